// The reading stage of a training step: this worker's part of each step's block of training
// lines. A step reads the next block of workers x batch_size lines of the job's train_paths
// (starting over at their end), and each worker parses its part of it: batch_size lines at rank x
// batch_size, or, with a BatchBalancer, its share after the lower ranks' shares. Every worker
// reads every line, so an epoch covers the data once however the shares change.
#ifndef PS_WORKER_BATCH_READER_H_
#define PS_WORKER_BATCH_READER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/batch_balancer.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_reader.h"

namespace ps {
namespace worker {

// A BatchReader reads one worker's batches, a block of lines per step. Thread-compatible.
class BatchReader {
 public:
  // Opens the job's train_paths for worker `rank` of `world`, whose batches have `batch_size`
  // samples (or, with `balancer`, not owned and outliving this, the shares it gives) of the
  // features in `schema`. Errors: CriteoReader::Open's (NOT_FOUND for a missing file, ...).
  static absl::StatusOr<std::unique_ptr<BatchReader>> Open(const config::Job& job,
                                                           const SchemaOptions& schema, int rank,
                                                           int world, int batch_size,
                                                           const BatchBalancer* balancer);

  // The blocks in one pass over the data (the last one may be short): the steps of an epoch.
  // Every worker counts the same. Reads the data through and starts it over; errors of the data.
  absl::StatusOr<int64_t> CountBlocks();

  // Passes over `blocks` blocks without parsing them (a resumed job reads on from the block of
  // its first step). Errors as Next.
  absl::Status Skip(int64_t blocks);

  // Reads this worker's part of the next block into `batch`, starting the data over at its end.
  // The batch may be empty (a part past the end of a short last block). FAILED_PRECONDITION
  // when the data holds no line at all; otherwise errors of the data (DATA_LOSS, UNAVAILABLE).
  absl::Status Next(Batch* batch);

  // Malformed lines skipped since the data last started over.
  int64_t skipped_lines() const { return reader_->skipped_lines(); }

 private:
  BatchReader(std::unique_ptr<CriteoReader> reader, int rank, int world, int batch_size,
              const BatchBalancer* balancer);

  // Reads lines [begin, begin + count) of the next block, starting over at the end of the data.
  absl::Status ReadRange(int64_t begin, int64_t count, Batch* batch);

  // Constant after construction.
  const std::unique_ptr<CriteoReader> reader_;
  const int rank_;
  const int batch_size_;
  const int64_t block_lines_;  // world x batch_size
  const BatchBalancer* const balancer_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_BATCH_READER_H_

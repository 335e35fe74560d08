// The reading stage of a training step: this worker's part of each step's block of training
// lines. A step reads the next block of workers x batch_size lines of the job's train_paths
// (starting over at their end), and each worker parses its part of it: batch_size lines at rank x
// batch_size, or, with a BatchBalancer, its share after the lower ranks' shares. Every worker
// reads every line, so an epoch covers the data once however the shares change.
//
// With data.format BINARY (`ps_ctl convert`'s files, worker/data/binary_format.h) the samples
// are numbered, and a worker reads only its part: at the t-th block of a pass, samples
// [t x workers x batch_size + begin, + count) of the files, the same parts of the same blocks
// as text whose lines all parse.
//
// ReadAhead moves the reading and parsing onto a thread of the reader's own, one batch ahead of
// Next(): the step's batch is parsed while the step before trains.
#ifndef PS_WORKER_BATCH_READER_H_
#define PS_WORKER_BATCH_READER_H_

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/job.pb.h"
#include "worker/batch_balancer.h"
#include "worker/data/batch.h"
#include "worker/data/binary_format.h"
#include "worker/data/criteo_reader.h"

namespace ps {
namespace worker {

// A BatchReader reads one worker's batches, a block of lines per step. Thread-compatible (its
// read-ahead thread is its own business).
class BatchReader {
 public:
  // Opens the job's train_paths for worker `rank` of `world`, whose batches have `batch_size`
  // samples (or, with `balancer`, not owned and outliving this, the shares it gives) of the
  // features in `schema`. Errors: CriteoReader::Open's (NOT_FOUND for a missing file, ...), or
  // for format BINARY BinaryReader::Open's (DATA_LOSS for a truncated or damaged file,
  // INVALID_ARGUMENT for files of other counts of features than `schema`'s, or, when
  // schema.text is set, other names or kinds).
  static absl::StatusOr<std::unique_ptr<BatchReader>> Open(const config::Job& job,
                                                           const SchemaOptions& schema, int rank,
                                                           int world, int batch_size,
                                                           const BatchBalancer* balancer);

  // The blocks in one pass over the data (the last one may be short): the steps of an epoch.
  // Every worker counts the same. Text: reads the data through and starts it over; errors of the
  // data. Binary: from the files' sample counts, reading nothing; never fails.
  absl::StatusOr<int64_t> CountBlocks();

  // Passes over `blocks` blocks without parsing them (a resumed job reads on from the block of
  // its first step). Errors as Next.
  absl::Status Skip(int64_t blocks);

  // Reads this worker's part of the next block into `batch`, starting the data over at its end.
  // The batch may be empty (a part past the end of a short last block). FAILED_PRECONDITION
  // when the data holds no line at all; otherwise errors of the data (DATA_LOSS, UNAVAILABLE).
  // Reading ahead: takes the batch the thread read (waiting for it), with its error, and has the
  // thread read the next while batches are left; past them, reads here.
  absl::Status Next(Batch* batch);

  // Reads the next `batches` batches on a thread of the reader's own, each as soon as Next took
  // the one before (the first at once), so that Next finds them parsed. Call after CountBlocks and
  // Skip, once. FAILED_PRECONDITION with a BatchBalancer (a worker's share of a block is decided
  // when the step reads it) or when already reading ahead.
  absl::Status ReadAhead(int64_t batches);
  ~BatchReader();

  // Malformed lines skipped since the data last started over (0 for binary data, which holds
  // only samples that parsed).
  // Reading ahead: waits for the read under way.
  int64_t skipped_lines() const;

  // Bytes of data this worker has read since Open(). Binary: the bytes of the arrays of the
  // samples it read. Text: every worker reads (decompresses) every line, so each pass over the
  // data, CountBlocks()'s included, reads the files' whole (compressed) size; a pass under way is
  // counted in proportion to its lines read once a pass's lines are known (after CountBlocks()
  // or a first whole pass), and whole before that. Reading ahead: waits for the read under way,
  // and counts the batches read ahead that Next has not taken yet.
  int64_t read_bytes() const;

 private:
  BatchReader(std::unique_ptr<CriteoReader> text, std::unique_ptr<BinaryReader> binary, int rank,
              int world, int batch_size, const BatchBalancer* balancer, int64_t text_bytes);

  // Next's reading, on the caller's thread.
  absl::Status ReadNext(Batch* batch);
  // The read-ahead thread: reads a batch each time one is wanted, until stopped.
  void ReadAheadLoop();
  // Without a read-ahead thread, or once it read every batch it was given, the counters are the
  // caller's; otherwise waits until the thread is not reading.
  void AwaitIdle() const;
  // Conditions on mu_: a read wanted (or the thread stopped); no read wanted or under way.
  bool WantedOrStopped() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t ReadBytesNow() const;
  // Reads lines [begin, begin + count) of the next block, starting over at the end of the data.
  absl::Status ReadRange(int64_t begin, int64_t count, Batch* batch);
  absl::Status ReadBinaryRange(int64_t begin, int64_t count, Batch* batch);

  // Constant after construction. Exactly one of text_ and binary_ is set.
  const std::unique_ptr<CriteoReader> text_;
  const std::unique_ptr<BinaryReader> binary_;
  const int rank_;
  const int batch_size_;
  const int64_t block_lines_;  // world x batch_size
  const BatchBalancer* const balancer_;
  const int64_t text_bytes_;  // text: the files' sizes, summed

  // Binary: the block the next read takes, counted from the start of the data.
  int64_t binary_block_ = 0;
  // Text: bytes of the passes done, lines read of the pass under way, and a pass's lines (-1
  // until known).
  int64_t text_bytes_done_ = 0;
  int64_t text_pass_lines_read_ = 0;
  int64_t text_lines_per_pass_ = -1;

  // Reading ahead. The readers above and the counters are the thread's while it reads (`want_` or
  // `reading_`), the caller's otherwise.
  mutable absl::Mutex mu_;
  bool want_ ABSL_GUARDED_BY(mu_) = false;     // the thread is to read the next batch
  bool reading_ ABSL_GUARDED_BY(mu_) = false;  // the thread is reading it
  bool ready_ ABSL_GUARDED_BY(mu_) = false;    // ahead_ holds it
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t left_ ABSL_GUARDED_BY(mu_) = 0;  // batches still to read ahead after the one wanted
  Batch ahead_ ABSL_GUARDED_BY(mu_);
  absl::Status ahead_status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // started by ReadAhead
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_BATCH_READER_H_

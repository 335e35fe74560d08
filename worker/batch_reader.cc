#include "worker/batch_reader.h"

#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"

namespace ps {
namespace worker {

absl::StatusOr<std::unique_ptr<BatchReader>> BatchReader::Open(const config::Job& job,
                                                               const SchemaOptions& schema,
                                                               int rank, int world,
                                                               int batch_size,
                                                               const BatchBalancer* balancer) {
  std::vector<std::string> paths(job.data().train_paths().begin(),
                                 job.data().train_paths().end());
  // Every worker reads every line (rank 0 of 1) and parses its range of each block.
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                      CriteoReader::Open(std::move(paths), 0, 1, schema));
  return std::unique_ptr<BatchReader>(
      new BatchReader(std::move(reader), rank, world, batch_size, balancer));
}

BatchReader::BatchReader(std::unique_ptr<CriteoReader> reader, int rank, int world,
                         int batch_size, const BatchBalancer* balancer)
    : reader_(std::move(reader)),
      rank_(rank),
      batch_size_(batch_size),
      block_lines_(int64_t{world} * batch_size),
      balancer_(balancer) {}

absl::StatusOr<int64_t> BatchReader::CountBlocks() {
  Batch batch;
  int64_t blocks = 0;
  while (true) {
    PS_ASSIGN_OR_RETURN(const int64_t lines, reader_->NextBlock(block_lines_, 0, 0, &batch));
    if (lines == 0) break;
    ++blocks;
  }
  PS_RETURN_IF_ERROR(reader_->Rewind());
  return blocks;
}

absl::Status BatchReader::Skip(int64_t blocks) {
  Batch batch;
  for (int64_t block = 0; block < blocks; ++block) PS_RETURN_IF_ERROR(ReadRange(0, 0, &batch));
  return absl::OkStatus();
}

absl::Status BatchReader::Next(Batch* batch) {
  int64_t begin = int64_t{rank_} * batch_size_;
  int64_t count = batch_size_;
  if (balancer_ != nullptr) {  // this worker's share, after the lower ranks' shares
    begin = 0;
    for (int r = 0; r < rank_; ++r) begin += balancer_->batch(r);
    count = balancer_->batch(rank_);
  }
  return ReadRange(begin, count, batch);
}

absl::Status BatchReader::ReadRange(int64_t begin, int64_t count, Batch* batch) {
  PS_ASSIGN_OR_RETURN(int64_t lines, reader_->NextBlock(block_lines_, begin, count, batch));
  if (lines == 0) {
    PS_RETURN_IF_ERROR(reader_->Rewind());
    PS_ASSIGN_OR_RETURN(lines, reader_->NextBlock(block_lines_, begin, count, batch));
  }
  if (lines == 0) return absl::FailedPreconditionError("the training data is empty");
  return absl::OkStatus();
}

}  // namespace worker
}  // namespace ps

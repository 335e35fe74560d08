#include "worker/batch_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/data_paths.h"
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
  if (job.data().format() == config::Data::BINARY) {
    // Without a text schema the job says only the counts (model.num_*_features).
    BinarySchema expected;
    if (schema.text != nullptr) {
      expected = BinarySchema::Of(schema);
    } else {
      expected.num_dense = schema.num_dense;
      expected.num_sparse = schema.num_sparse;
    }
    PS_ASSIGN_OR_RETURN(std::unique_ptr<BinaryReader> binary, BinaryReader::Open(paths, expected));
    return std::unique_ptr<BatchReader>(
        new BatchReader(nullptr, std::move(binary), rank, world, batch_size, balancer, 0));
  }
  // Every worker reads every line (rank 0 of 1) and parses its range of each block.
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                      CriteoReader::Open(paths, 0, 1, schema));
  // The files Open() read, by size (compressed), for read_bytes().
  int64_t text_bytes = 0;
  PS_ASSIGN_OR_RETURN(const std::vector<std::string> files, ExpandDataPaths(paths));
  for (const std::string& file : files) {
    struct stat st;
    if (::stat(file.c_str(), &st) == 0) text_bytes += st.st_size;
  }
  return std::unique_ptr<BatchReader>(
      new BatchReader(std::move(reader), nullptr, rank, world, batch_size, balancer, text_bytes));
}

BatchReader::BatchReader(std::unique_ptr<CriteoReader> text, std::unique_ptr<BinaryReader> binary,
                         int rank, int world, int batch_size, const BatchBalancer* balancer,
                         int64_t text_bytes)
    : text_(std::move(text)),
      binary_(std::move(binary)),
      rank_(rank),
      batch_size_(batch_size),
      block_lines_(int64_t{world} * batch_size),
      balancer_(balancer),
      text_bytes_(text_bytes) {}

absl::StatusOr<int64_t> BatchReader::CountBlocks() {
  if (binary_ != nullptr) return (binary_->samples() + block_lines_ - 1) / block_lines_;
  Batch batch;
  int64_t blocks = 0, lines_read = 0;
  while (true) {
    PS_ASSIGN_OR_RETURN(const int64_t lines, text_->NextBlock(block_lines_, 0, 0, &batch));
    if (lines == 0) break;
    lines_read += lines;
    ++blocks;
  }
  PS_RETURN_IF_ERROR(text_->Rewind());
  // A pass read through, after the part of a pass read before (which starts over).
  text_bytes_done_ = ReadBytesNow() + text_bytes_;
  text_pass_lines_read_ = 0;
  text_lines_per_pass_ = lines_read;
  return blocks;
}

absl::Status BatchReader::Skip(int64_t blocks) {
  if (binary_ != nullptr) {
    const int64_t per_pass = (binary_->samples() + block_lines_ - 1) / block_lines_;
    if (blocks == 0) return absl::OkStatus();
    if (per_pass == 0) return absl::FailedPreconditionError("the training data is empty");
    binary_block_ = (binary_block_ + blocks % per_pass) % per_pass;
    return absl::OkStatus();
  }
  Batch batch;
  for (int64_t block = 0; block < blocks; ++block) PS_RETURN_IF_ERROR(ReadRange(0, 0, &batch));
  return absl::OkStatus();
}

BatchReader::~BatchReader() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status BatchReader::ReadAhead(int64_t batches) {
  if (balancer_ != nullptr) {
    return absl::FailedPreconditionError(
        "a worker's share of a block changes with the batch balancer: it cannot be read ahead");
  }
  if (thread_.joinable()) return absl::FailedPreconditionError("already reading ahead");
  {
    absl::MutexLock lock(&mu_);
    want_ = batches > 0;
    left_ = std::max<int64_t>(0, batches - 1);
  }
  thread_ = std::thread([this] { ReadAheadLoop(); });
  return absl::OkStatus();
}

bool BatchReader::WantedOrStopped() const { return want_ || stop_; }

bool BatchReader::Idle() const { return !want_ && !reading_; }

void BatchReader::ReadAheadLoop() {
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(this, &BatchReader::WantedOrStopped));
    if (stop_) break;
    want_ = false;
    reading_ = true;
    Batch batch = std::move(ahead_);
    mu_.Unlock();
    absl::Status status = ReadNext(&batch);
    mu_.Lock();
    reading_ = false;
    ahead_ = std::move(batch);
    ahead_status_ = std::move(status);
    ready_ = true;
  }
  mu_.Unlock();
}

absl::Status BatchReader::Next(Batch* batch) {
  if (!thread_.joinable()) return ReadNext(batch);
  {
    absl::MutexLock lock(&mu_);
    if (ready_ || want_ || reading_) {
      mu_.Await(absl::Condition(&ready_));
      std::swap(*batch, ahead_);
      absl::Status status = std::move(ahead_status_);
      ready_ = false;
      if (status.ok() && left_ > 0) {
        --left_;
        want_ = true;
      }
      return status;
    }
  }
  return ReadNext(batch);  // past the batches read ahead: the thread is idle
}

void BatchReader::AwaitIdle() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &BatchReader::Idle));
}

int64_t BatchReader::skipped_lines() const {
  AwaitIdle();
  return text_ != nullptr ? text_->skipped_lines() : 0;
}

absl::Status BatchReader::ReadNext(Batch* batch) {
  int64_t begin = int64_t{rank_} * batch_size_;
  int64_t count = batch_size_;
  if (balancer_ != nullptr) {  // this worker's share, after the lower ranks' shares
    begin = 0;
    for (int r = 0; r < rank_; ++r) begin += balancer_->batch(r);
    count = balancer_->batch(rank_);
  }
  return ReadRange(begin, count, batch);
}

int64_t BatchReader::read_bytes() const {
  AwaitIdle();
  return ReadBytesNow();
}

int64_t BatchReader::ReadBytesNow() const {
  if (binary_ != nullptr) return binary_->read_bytes();
  int64_t pass = 0;
  if (text_lines_per_pass_ > 0) {
    pass = static_cast<int64_t>(static_cast<double>(text_bytes_) * text_pass_lines_read_ /
                                text_lines_per_pass_);
  } else if (text_pass_lines_read_ > 0) {
    pass = text_bytes_;
  }
  return text_bytes_done_ + pass;
}

absl::Status BatchReader::ReadRange(int64_t begin, int64_t count, Batch* batch) {
  if (binary_ != nullptr) return ReadBinaryRange(begin, count, batch);
  PS_ASSIGN_OR_RETURN(int64_t lines, text_->NextBlock(block_lines_, begin, count, batch));
  if (lines == 0) {
    // A pass read through.
    text_bytes_done_ += text_bytes_;
    text_lines_per_pass_ = text_pass_lines_read_;
    text_pass_lines_read_ = 0;
    PS_RETURN_IF_ERROR(text_->Rewind());
    PS_ASSIGN_OR_RETURN(lines, text_->NextBlock(block_lines_, begin, count, batch));
  }
  if (lines == 0) return absl::FailedPreconditionError("the training data is empty");
  text_pass_lines_read_ += lines;
  return absl::OkStatus();
}

absl::Status BatchReader::ReadBinaryRange(int64_t begin, int64_t count, Batch* batch) {
  const int64_t samples = binary_->samples();
  if (samples == 0) return absl::FailedPreconditionError("the training data is empty");
  const int64_t start = binary_block_ * block_lines_;
  const int64_t block = std::min(block_lines_, samples - start);  // the last one may be short
  const int64_t first = std::min(begin, block);
  const int64_t last = std::min(begin + count, block);
  PS_RETURN_IF_ERROR(binary_->Read(start + first, last - first, batch));
  ++binary_block_;
  if (binary_block_ * block_lines_ >= samples) binary_block_ = 0;
  return absl::OkStatus();
}

}  // namespace worker
}  // namespace ps

#include "worker/batch_reader.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace worker {
namespace {

const SchemaOptions kSchema{1, 1};

// `lines` lines whose one integer feature is the line's number, so a batch says which lines it
// holds (the reader transforms integers by log(1 + x)).
std::string WriteLines(const std::string& dir, int lines) {
  const std::string path = absl::StrCat(dir, "/train.tsv");
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) out << i % 2 << "\t" << i << "\t" << "0000abcd\n";
  return path;
}

config::Job JobReading(const std::string& path) {
  config::Job job;
  job.mutable_data()->add_train_paths(path);
  return job;
}

// The line numbers a batch holds.
std::vector<int> Lines(const Batch& batch) {
  std::vector<int> lines;
  for (int i = 0; i < batch.size; ++i) {
    lines.push_back(static_cast<int>(std::lround(std::expm1(batch.dense[i]))));
  }
  return lines;
}

TEST_CASE("BatchReader reads its rank's part of each block, and starts the data over",
          "[worker][batch_reader]") {
  auto dir = testing::ScopedTempDir::Create("batch_reader");
  REQUIRE(dir.ok());
  const config::Job job = JobReading(WriteLines((*dir)->path(), 10));
  // 2 workers x 3 samples: blocks of 6 lines, the second one short (4 lines).
  auto rank1 = BatchReader::Open(job, kSchema, 1, 2, 3, nullptr);
  REQUIRE(rank1.ok());
  CHECK(*(*rank1)->CountBlocks() == 2);
  Batch batch;
  REQUIRE((*rank1)->Next(&batch).ok());
  CHECK(Lines(batch) == std::vector<int>{3, 4, 5});
  REQUIRE((*rank1)->Next(&batch).ok());
  CHECK(Lines(batch) == std::vector<int>{9});  // the short last block's part
  REQUIRE((*rank1)->Next(&batch).ok());  // the data again
  CHECK(Lines(batch) == std::vector<int>{3, 4, 5});
  CHECK((*rank1)->skipped_lines() == 0);

  // A resumed job passes over the blocks of the steps done.
  auto rank0 = BatchReader::Open(job, kSchema, 0, 2, 3, nullptr);
  REQUIRE(rank0.ok());
  REQUIRE((*rank0)->Skip(3).ok());
  REQUIRE((*rank0)->Next(&batch).ok());
  CHECK(Lines(batch) == std::vector<int>{6, 7, 8});
}

TEST_CASE("BatchReader reads a balanced share after the lower ranks' shares",
          "[worker][batch_reader]") {
  auto dir = testing::ScopedTempDir::Create("batch_reader");
  REQUIRE(dir.ok());
  const config::Job job = JobReading(WriteLines((*dir)->path(), 12));
  BatchBalancer balancer(2, 3);
  // Worker 0 twice as fast as worker 1: shares 4 and 2 of each block of 6.
  std::vector<float> summed(balancer.ExchangeFloats(), 0.0f);
  balancer.Record(4, absl::Milliseconds(1));
  balancer.Report(0, absl::MakeSpan(summed));
  BatchBalancer other(2, 3);
  other.Record(2, absl::Milliseconds(1));
  other.Report(1, absl::MakeSpan(summed));
  REQUIRE(balancer.Update(summed).ok());
  REQUIRE(balancer.batch(0) == 4);
  auto rank1 = BatchReader::Open(job, kSchema, 1, 2, 3, &balancer);
  REQUIRE(rank1.ok());
  Batch batch;
  REQUIRE((*rank1)->Next(&batch).ok());
  CHECK(Lines(batch) == std::vector<int>{4, 5});
  REQUIRE((*rank1)->Next(&batch).ok());
  CHECK(Lines(batch) == std::vector<int>{10, 11});
}

TEST_CASE("BatchReader refuses data without a line, and a missing file",
          "[worker][batch_reader]") {
  auto dir = testing::ScopedTempDir::Create("batch_reader");
  REQUIRE(dir.ok());
  auto empty = BatchReader::Open(JobReading(WriteLines((*dir)->path(), 0)), kSchema, 0, 1, 4,
                                 nullptr);
  REQUIRE(empty.ok());
  CHECK(*(*empty)->CountBlocks() == 0);
  Batch batch;
  CHECK((*empty)->Next(&batch).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(BatchReader::Open(JobReading(absl::StrCat((*dir)->path(), "/none.tsv")), kSchema, 0, 1,
                          4, nullptr)
            .status()
            .code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace worker
}  // namespace ps

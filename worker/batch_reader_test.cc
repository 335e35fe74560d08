#include "worker/batch_reader.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
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
  // Shares decided step by step cannot be read ahead.
  CHECK((*rank1)->ReadAhead(4).code() == absl::StatusCode::kFailedPrecondition);
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

// Gives a batch of the text reader, which may leave its offsets unset (single-valued fields),
// its offsets.
void WithOffsets(Batch* batch) {
  if (batch->offsets.size() != size_t(batch->size) * kSchema.num_sparse + 1) {
    SetSingleValuedOffsets(kSchema.num_sparse, batch);
  }
}

// The samples of the text file `text` written as the binary file `text`.bin (as ps_ctl convert
// writes them); returns a job reading that, format BINARY.
config::Job ConvertToBinary(const std::string& text, int chunk_samples) {
  auto reader = CriteoReader::Open({text}, 0, 1, kSchema);
  REQUIRE(reader.ok());
  BinaryWriterOptions options;
  options.chunk_samples = chunk_samples;
  auto writer = BinaryWriter::Open(text + ".bin", BinarySchema::Of(kSchema), options);
  REQUIRE(writer.ok());
  Batch batch;
  while (*(*reader)->Next(5, &batch) > 0) {
    WithOffsets(&batch);
    REQUIRE((*writer)->Append(batch).ok());
  }
  REQUIRE((*writer)->Close().ok());
  config::Job job = JobReading(text + ".bin");
  job.mutable_data()->set_format(config::Data::BINARY);
  return job;
}

TEST_CASE("BatchReader reads binary data as it reads the text it was converted from",
          "[worker][batch_reader]") {
  auto dir = testing::ScopedTempDir::Create("batch_reader");
  REQUIRE(dir.ok());
  const std::string text = WriteLines((*dir)->path(), 23);
  const config::Job text_job = JobReading(text);
  const config::Job binary_job = ConvertToBinary(text, GENERATE(1, 4, 100));
  const int world = GENERATE(1, 2, 3);
  const int batch_size = GENERATE(1, 4, 7);
  INFO(world << " workers of batch " << batch_size);
  for (int rank = 0; rank < world; ++rank) {
    auto from_text = BatchReader::Open(text_job, kSchema, rank, world, batch_size, nullptr);
    auto from_binary = BatchReader::Open(binary_job, kSchema, rank, world, batch_size, nullptr);
    REQUIRE(from_text.ok());
    REQUIRE(from_binary.ok());
    const int64_t blocks = *(*from_text)->CountBlocks();
    CHECK(*(*from_binary)->CountBlocks() == blocks);
    REQUIRE((*from_text)->Skip(1).ok());
    REQUIRE((*from_binary)->Skip(1).ok());
    // Two passes and a bit, from the second block: the data starts over alike.
    for (int64_t step = 1; step < 2 * blocks + 3; ++step) {
      INFO("rank " << rank << " step " << step);
      Batch t, b;
      REQUIRE((*from_text)->Next(&t).ok());
      REQUIRE((*from_binary)->Next(&b).ok());
      WithOffsets(&t);
      CHECK(Lines(b) == Lines(t));
      CHECK(b.labels == t.labels);
      CHECK(b.keys == t.keys);
      CHECK(b.offsets == t.offsets);
    }
    CHECK((*from_binary)->skipped_lines() == 0);
  }
}

TEST_CASE("BatchReader on binary data: N workers read what one worker of N x batch reads",
          "[worker][batch_reader]") {
  auto dir = testing::ScopedTempDir::Create("batch_reader");
  REQUIRE(dir.ok());
  const config::Job job = ConvertToBinary(WriteLines((*dir)->path(), 50), 8);
  auto one = BatchReader::Open(job, kSchema, 0, 1, 12, nullptr);
  REQUIRE(one.ok());
  std::vector<std::unique_ptr<BatchReader>> four;
  for (int rank = 0; rank < 4; ++rank) {
    auto reader = BatchReader::Open(job, kSchema, rank, 4, 3, nullptr);
    REQUIRE(reader.ok());
    four.push_back(std::move(*reader));
  }
  for (int step = 0; step < 12; ++step) {
    Batch whole, part;
    REQUIRE((*one)->Next(&whole).ok());
    std::vector<int> joined;
    for (auto& reader : four) {
      REQUIRE(reader->Next(&part).ok());
      for (int line : Lines(part)) joined.push_back(line);
    }
    CHECK(joined == Lines(whole));
  }
  // Each of four workers read about a quarter of the bytes that one worker read.
  int64_t sum = 0;
  for (auto& reader : four) {
    CHECK(reader->read_bytes() > 0);
    CHECK(reader->read_bytes() < (*one)->read_bytes() / 3);
    sum += reader->read_bytes();
  }
  CHECK(sum >= (*one)->read_bytes());  // each range starts with one offset more
}

TEST_CASE("BatchReader on text counts the files' bytes for every pass", "[worker][batch_reader]") {
  auto dir = testing::ScopedTempDir::Create("batch_reader");
  REQUIRE(dir.ok());
  const std::string text = WriteLines((*dir)->path(), 20);
  struct stat st;
  REQUIRE(stat(text.c_str(), &st) == 0);
  auto reader = BatchReader::Open(JobReading(text), kSchema, 1, 2, 5, nullptr);
  REQUIRE(reader.ok());
  CHECK((*reader)->read_bytes() == 0);
  REQUIRE(*(*reader)->CountBlocks() == 2);
  CHECK((*reader)->read_bytes() == st.st_size);  // the counting pass
  Batch batch;
  REQUIRE((*reader)->Next(&batch).ok());
  CHECK((*reader)->read_bytes() == st.st_size + st.st_size / 2);
  REQUIRE((*reader)->Next(&batch).ok());
  REQUIRE((*reader)->Next(&batch).ok());  // the data again
  CHECK((*reader)->read_bytes() == 2 * st.st_size + st.st_size / 2);
}

TEST_CASE("BatchReader refuses binary files of another schema, and empty binary data",
          "[worker][batch_reader]") {
  auto dir = testing::ScopedTempDir::Create("batch_reader");
  REQUIRE(dir.ok());
  const config::Job job = ConvertToBinary(WriteLines((*dir)->path(), 4), 8);
  const auto other = BatchReader::Open(job, SchemaOptions{13, 26}, 0, 1, 4, nullptr);
  CHECK(other.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(other.status().message()),
             Catch::Contains("written with 1 dense and 1 sparse fields, expected 13 dense and 26"));

  const config::Job empty = ConvertToBinary(WriteLines((*dir)->path(), 0), 8);
  auto reader = BatchReader::Open(empty, kSchema, 0, 1, 4, nullptr);
  REQUIRE(reader.ok());
  CHECK(*(*reader)->CountBlocks() == 0);
  Batch batch;
  CHECK((*reader)->Next(&batch).code() == absl::StatusCode::kFailedPrecondition);
  CHECK((*reader)->Skip(1).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE(
    "BatchReader reading ahead on its thread gives the batches, errors and counts that "
    "reading in place does",
    "[worker][batch_reader]") {
  auto dir = testing::ScopedTempDir::Create("batch_reader");
  REQUIRE(dir.ok());
  // Malformed lines among them (skipped and counted alike).
  const std::string text = WriteLines((*dir)->path(), 23);
  {
    std::ofstream out(text, std::ios::app);
    out << "not a line\n1\t5\t0000abcd\n";
  }
  const bool binary = GENERATE(false, true);
  const config::Job job = binary ? ConvertToBinary(text, 4) : JobReading(text);
  const int ahead = GENERATE(0, 1, 5, 40);  // batches read ahead; the loop takes 12
  INFO((binary ? "binary" : "text") << ", " << ahead << " batches read ahead");
  auto in_place = BatchReader::Open(job, kSchema, 1, 2, 3, nullptr);
  auto on_thread = BatchReader::Open(job, kSchema, 1, 2, 3, nullptr);
  REQUIRE(in_place.ok());
  REQUIRE(on_thread.ok());
  REQUIRE((*in_place)->CountBlocks().ok());
  REQUIRE((*on_thread)->CountBlocks().ok());
  REQUIRE((*in_place)->Skip(1).ok());
  REQUIRE((*on_thread)->Skip(1).ok());
  REQUIRE((*on_thread)->ReadAhead(ahead).ok());
  CHECK((*on_thread)->ReadAhead(ahead).code() == absl::StatusCode::kFailedPrecondition);
  Batch a, b;
  for (int step = 0; step < 12; ++step) {  // past the end of the data, and past `ahead`
    INFO("step " << step);
    REQUIRE((*in_place)->Next(&a).ok());
    REQUIRE((*on_thread)->Next(&b).ok());
    CHECK(Lines(b) == Lines(a));
    CHECK(b.labels == a.labels);
    CHECK(b.keys == a.keys);
    if (step + 1 >= ahead) {  // nothing is read ahead past the batches asked for
      CHECK((*on_thread)->read_bytes() == (*in_place)->read_bytes());
      CHECK((*on_thread)->skipped_lines() == (*in_place)->skipped_lines());
    }
  }
}

TEST_CASE("BatchReader reading ahead hands over the data's error at the batch that meets it",
          "[worker][batch_reader]") {
  auto dir = testing::ScopedTempDir::Create("batch_reader");
  REQUIRE(dir.ok());
  const std::string path = absl::StrCat((*dir)->path(), "/empty.tsv");
  { std::ofstream out(path); }
  auto reader = BatchReader::Open(JobReading(path), kSchema, 0, 1, 2, nullptr);
  REQUIRE(reader.ok());
  REQUIRE((*reader)->ReadAhead(3).ok());
  Batch batch;
  CHECK((*reader)->Next(&batch).code() == absl::StatusCode::kFailedPrecondition);
  // After an error the thread reads no further: the next call reads in place, with its error.
  CHECK((*reader)->Next(&batch).code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace worker
}  // namespace ps

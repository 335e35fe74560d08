#include "worker/data/binary_format.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace worker {
namespace {

// Three dense features and four sparse fields, the second and the fourth multi-valued.
BinarySchema TestSchema() {
  BinarySchema s;
  s.num_dense = 3;
  s.dense_names = {"a", "b", "c"};
  s.num_sparse = 4;
  s.sparse_names = {"user", "tags", "item", "history"};
  s.multi_valued = {false, true, false, true};
  return s;
}

// A batch of `size` random samples of TestSchema(): multi-valued fields hold 0 to 5 keys (often
// none).
Batch RandomBatch(int size, std::mt19937_64* rng) {
  const BinarySchema s = TestSchema();
  Batch b;
  b.size = size;
  b.offsets.push_back(0);
  for (int r = 0; r < size; ++r) {
    b.labels.push_back(static_cast<float>((*rng)() % 2));
    for (int d = 0; d < s.num_dense; ++d) {
      b.dense.push_back(std::uniform_real_distribution<float>(-3, 3)(*rng));
    }
    for (int f = 0; f < s.num_sparse; ++f) {
      const int values = s.multi_valued[f] ? static_cast<int>((*rng)() % 6) : 1;
      for (int v = 0; v < values; ++v) b.keys.push_back((*rng)());
      b.offsets.push_back(static_cast<uint32_t>(b.keys.size()));
    }
  }
  return b;
}

// Samples [begin, begin + count) of `all` as a batch whose offsets start at 0.
Batch Slice(const Batch& all, int begin, int count, int nd, int ns) {
  Batch b;
  b.size = count;
  b.labels.assign(all.labels.begin() + begin, all.labels.begin() + begin + count);
  b.dense.assign(all.dense.begin() + begin * nd, all.dense.begin() + (begin + count) * nd);
  const uint32_t first = all.offsets[begin * ns];
  for (int i = begin * ns; i <= (begin + count) * ns; ++i) {
    b.offsets.push_back(all.offsets[i] - first);
  }
  b.keys.assign(all.keys.begin() + first, all.keys.begin() + all.offsets[(begin + count) * ns]);
  return b;
}

void Concat(const Batch& b, Batch* all) {
  if (all->offsets.empty()) all->offsets.push_back(0);
  const uint32_t base = static_cast<uint32_t>(all->keys.size());
  all->size += b.size;
  all->labels.insert(all->labels.end(), b.labels.begin(), b.labels.end());
  all->dense.insert(all->dense.end(), b.dense.begin(), b.dense.end());
  for (size_t i = 1; i < b.offsets.size(); ++i) all->offsets.push_back(base + b.offsets[i]);
  all->keys.insert(all->keys.end(), b.keys.begin(), b.keys.end());
}

void CheckEqual(const Batch& got, const Batch& want) {
  CHECK(got.size == want.size);
  CHECK(got.labels == want.labels);
  CHECK(got.dense == want.dense);
  CHECK(got.offsets == want.offsets);
  CHECK(got.keys == want.keys);
}

// Writes batches of the given sizes to `path`; returns the samples written, concatenated.
Batch WriteFile(const std::string& path, const std::vector<int>& sizes, int chunk_samples,
                std::mt19937_64* rng) {
  BinaryWriterOptions options;
  options.chunk_samples = chunk_samples;
  auto writer = BinaryWriter::Open(path, TestSchema(), options);
  REQUIRE(writer.ok());
  Batch all;
  all.offsets.push_back(0);
  for (int size : sizes) {
    const Batch b = RandomBatch(size, rng);
    REQUIRE((*writer)->Append(b).ok());
    Concat(b, &all);
  }
  const auto summary = (*writer)->Close();
  REQUIRE(summary.ok());
  CHECK(summary->samples == all.size);
  return all;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_CASE("Binary files read back exactly what was written, across chunks and files",
          "[worker][binary_format]") {
  const int chunk_samples = GENERATE(1, 3, 7, 65536);
  auto dir = testing::ScopedTempDir::Create("binary_format");
  REQUIRE(dir.ok());
  std::mt19937_64 rng(42);
  const std::string a = (*dir)->path() + "/part-0.bin", b = (*dir)->path() + "/part-1.bin",
                    empty = (*dir)->path() + "/part-2.bin", c = (*dir)->path() + "/part-3.bin";
  Batch all;
  Concat(WriteFile(a, {5, 0, 12, 1}, chunk_samples, &rng), &all);
  Concat(WriteFile(b, {9}, chunk_samples, &rng), &all);
  Concat(WriteFile(empty, {}, chunk_samples, &rng), &all);
  Concat(WriteFile(c, {2, 8}, chunk_samples, &rng), &all);
  REQUIRE(all.size == 37);

  // A glob is the files it matches, in order.
  auto reader = BinaryReader::Open({(*dir)->path() + "/part-*.bin"}, TestSchema(),
                                   {BinaryReaderOptions::Verify::kFull});
  REQUIRE(reader.ok());
  CHECK((*reader)->samples() == 37);
  CHECK((*reader)->paths() == std::vector<std::string>{a, b, empty, c});
  CHECK((*reader)->schema() == TestSchema());

  Batch got;
  REQUIRE((*reader)->Read(0, 37, &got).ok());
  CheckEqual(got, all);
  // Every array byte of the samples once, and one offset more per chunk (its runs' first).
  const int64_t arrays = 37 * 4 + 37 * 3 * 4 + (37 * 4) * 4 + int64_t(all.keys.size()) * 8;
  CHECK((*reader)->read_bytes() >= arrays + 4);
  CHECK((*reader)->read_bytes() <= arrays + 4 * 37);

  // Every range, including empty ones and ones across chunk and file boundaries.
  for (int begin = 0; begin <= 37; ++begin) {
    for (int count = 0; begin + count <= 37; count += 1 + count / 3) {
      INFO("samples [" << begin << ", " << begin + count << ")");
      REQUIRE((*reader)->Read(begin, count, &got).ok());
      CheckEqual(got, Slice(all, begin, count, 3, 4));
    }
  }
  CHECK((*reader)->Read(30, 8, &got).code() == absl::StatusCode::kInvalidArgument);
  CHECK((*reader)->Read(-1, 1, &got).code() == absl::StatusCode::kInvalidArgument);
  CHECK((*reader)->Read(0, 1, nullptr).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Files of single-valued fields have no offsets, and read back exactly",
          "[worker][binary_format]") {
  auto dir = testing::ScopedTempDir::Create("binary_format");
  REQUIRE(dir.ok());
  BinarySchema schema;
  schema.num_dense = 2;
  schema.num_sparse = 3;
  std::mt19937_64 rng(13);
  Batch all;
  all.size = 40;
  for (int i = 0; i < 40 * 2; ++i) all.dense.push_back(static_cast<float>(rng() % 1000) / 7);
  for (int i = 0; i < 40; ++i) all.labels.push_back(static_cast<float>(rng() % 2));
  for (int i = 0; i < 40 * 3; ++i) all.keys.push_back(rng());
  SetSingleValuedOffsets(3, &all);
  const std::string path = (*dir)->path() + "/single.bin";
  BinaryWriterOptions options;
  options.chunk_samples = 40;
  auto writer = BinaryWriter::Open(path, schema, options);
  REQUIRE(writer.ok());
  REQUIRE((*writer)->Append(all).ok());
  const auto summary = (*writer)->Close();
  REQUIRE(summary.ok());
  // A header of 128 bytes, one chunk of labels, dense and keys, a 32-byte index entry and the
  // 32-byte trailer.
  CHECK(summary->bytes == 128 + (40 * 4 + 40 * 2 * 4 + 40 * 3 * 8 + 63) / 64 * 64 + 32 + 32);
  auto reader = BinaryReader::Open({path}, schema, {BinaryReaderOptions::Verify::kFull});
  REQUIRE(reader.ok());
  Batch got;
  for (int begin = 0; begin < 40; begin += 7) {
    const int count = std::min(11, 40 - begin);
    REQUIRE((*reader)->Read(begin, count, &got).ok());
    CheckEqual(got, Slice(all, begin, count, 2, 3));
    CHECK(got.SingleValued());
  }
  REQUIRE((*reader)->Read(0, 40, &got).ok());
  CheckEqual(got, all);
}

TEST_CASE("A reader counts the bytes of the arrays it copies, not the file's",
          "[worker][binary_format]") {
  auto dir = testing::ScopedTempDir::Create("binary_format");
  REQUIRE(dir.ok());
  std::mt19937_64 rng(7);
  const std::string path = (*dir)->path() + "/data.bin";
  const Batch all = WriteFile(path, {1000}, 100, &rng);
  auto reader = BinaryReader::Open({path}, TestSchema());
  REQUIRE(reader.ok());
  Batch got;
  REQUIRE((*reader)->Read(250, 10, &got).ok());
  CHECK((*reader)->read_bytes() ==
        10 * 4 + 10 * 3 * 4 + (10 * 4 + 1) * 4 + int64_t(got.keys.size()) * 8);
}

TEST_CASE("A truncated binary file is refused with DATA_LOSS naming it",
          "[worker][binary_format]") {
  auto dir = testing::ScopedTempDir::Create("binary_format");
  REQUIRE(dir.ok());
  std::mt19937_64 rng(3);
  const std::string path = (*dir)->path() + "/data.bin";
  WriteFile(path, {50}, 16, &rng);
  const std::string bytes = ReadAll(path);
  const size_t size = bytes.size();
  // Inside the magic, the header, the first chunk, the last chunk, the index, the trailer.
  const size_t cut =
      GENERATE_COPY(as<size_t>{}, 0, 4, 20, 70, 200, 1000, size - 200, size - 100, size - 1);
  INFO("cut at " << cut << " of " << size);
  const std::string truncated = (*dir)->path() + "/truncated.bin";
  WriteAll(truncated, bytes.substr(0, cut));
  const auto reader = BinaryReader::Open({truncated}, TestSchema());
  REQUIRE_FALSE(reader.ok());
  CHECK(reader.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(reader.status().message()), Catch::StartsWith(truncated + ": "));
}

TEST_CASE("A damaged binary file is refused with DATA_LOSS naming it and the chunk",
          "[worker][binary_format]") {
  auto dir = testing::ScopedTempDir::Create("binary_format");
  REQUIRE(dir.ok());
  std::mt19937_64 rng(5);
  const std::string path = (*dir)->path() + "/data.bin";
  WriteFile(path, {50}, 16, &rng);
  const std::string bytes = ReadAll(path);
  const std::string damaged = (*dir)->path() + "/damaged.bin";

  SECTION("a byte of the header") {
    std::string copy = bytes;
    copy[26] ^= 0x10;  // the sample count
    WriteAll(damaged, copy);
    const auto reader = BinaryReader::Open({damaged}, TestSchema());
    CHECK(reader.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(reader.status().message()),
               Catch::Equals(damaged + ": damaged header (checksum mismatch)"));
  }
  SECTION("a byte of the index") {
    std::string copy = bytes;
    copy[copy.size() - 32 - 4 * 32 + 8] ^= 1;  // chunk 0's sample count
    WriteAll(damaged, copy);
    const auto reader = BinaryReader::Open({damaged}, TestSchema());
    CHECK(reader.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(reader.status().message()), Catch::StartsWith(damaged + ": "));
  }
  SECTION("a byte of a chunk's keys: found by a full check, which names the chunk") {
    std::string copy = bytes;
    // Chunk 1 holds samples [16, 32): find its last key's bytes and flip one of them.
    const auto intact = BinaryReader::Open({path}, TestSchema());
    REQUIRE(intact.ok());
    Batch chunk1;
    REQUIRE((*intact)->Read(16, 16, &chunk1).ok());
    REQUIRE_FALSE(chunk1.keys.empty());
    const uint64_t key = chunk1.keys.back();
    const size_t at = copy.find(std::string(reinterpret_cast<const char*>(&key), 8));
    REQUIRE(at != std::string::npos);
    copy[at + 3] ^= 0x40;
    WriteAll(damaged, copy);
    const auto full =
        BinaryReader::Open({damaged}, TestSchema(), {BinaryReaderOptions::Verify::kFull});
    CHECK(full.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(full.status().message()),
               Catch::Equals(damaged + ": chunk 1 (samples 16 to 31) is damaged (checksum "
                                       "mismatch)"));
    // The structure alone does not read the chunks.
    CHECK(BinaryReader::Open({damaged}, TestSchema()).ok());
  }
  SECTION("a chunk's offsets out of order: Read refuses the chunk") {
    std::string copy = bytes;
    const auto intact = BinaryReader::Open({path}, TestSchema());
    REQUIRE(intact.ok());
    Batch chunk0;
    REQUIRE((*intact)->Read(0, 16, &chunk0).ok());
    // Chunk 0 starts at the header's end; its offsets after 16 labels and 16 x 3 dense floats.
    uint32_t header_bytes;
    std::memcpy(&header_bytes, copy.data() + 12, 4);
    const size_t offsets_at = header_bytes + 16 * 4 + 16 * 3 * 4;
    copy[offsets_at + 4 * 5 + 3] = static_cast<char>(0x7f);  // offset 5 far past the keys
    WriteAll(damaged, copy);
    auto reader = BinaryReader::Open({damaged}, TestSchema());
    REQUIRE(reader.ok());
    Batch got;
    const absl::Status status = (*reader)->Read(0, 4, &got);
    CHECK(status.code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(status.message()), Catch::StartsWith(damaged + ": chunk 0 is damaged"));
    CHECK((*reader)->Read(16, 4, &got).ok());  // another chunk reads
  }
}

TEST_CASE("A binary file of another schema, or not binary at all, is refused",
          "[worker][binary_format]") {
  auto dir = testing::ScopedTempDir::Create("binary_format");
  REQUIRE(dir.ok());
  std::mt19937_64 rng(9);
  const std::string path = (*dir)->path() + "/data.bin";
  WriteFile(path, {4}, 16, &rng);

  BinarySchema criteo;  // what a Criteo job expects: counts only
  criteo.num_dense = 13;
  criteo.num_sparse = 26;
  auto reader = BinaryReader::Open({path}, criteo);
  CHECK(reader.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(reader.status().message() ==
        path +
            ": written with 3 dense and 4 sparse fields, expected 13 dense and 26 sparse fields");

  BinarySchema counts;  // the same counts: accepted
  counts.num_dense = 3;
  counts.num_sparse = 4;
  CHECK(BinaryReader::Open({path}, counts).ok());

  BinarySchema renamed = TestSchema();
  renamed.sparse_names[2] = "product";
  CHECK(BinaryReader::Open({path}, renamed).status().code() == absl::StatusCode::kInvalidArgument);

  const std::string text = (*dir)->path() + "/train.tsv";
  WriteAll(text, "1\t2\t3\n");
  reader = BinaryReader::Open({text}, TestSchema());
  CHECK(reader.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(reader.status().message()), Catch::StartsWith(text + ": not a binary"));

  CHECK(BinaryReader::Open({(*dir)->path() + "/missing.bin"}, TestSchema()).status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(BinaryReader::Open({}, TestSchema()).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("BinaryWriter refuses batches that do not fit its schema, and leaves no file unclosed",
          "[worker][binary_format]") {
  auto dir = testing::ScopedTempDir::Create("binary_format");
  REQUIRE(dir.ok());
  const std::string path = (*dir)->path() + "/data.bin";
  std::mt19937_64 rng(11);
  {
    auto writer = BinaryWriter::Open(path, TestSchema());
    REQUIRE(writer.ok());
    Batch bad = RandomBatch(2, &rng);
    bad.dense.pop_back();
    CHECK((*writer)->Append(bad).code() == absl::StatusCode::kInvalidArgument);
    Batch two_values = RandomBatch(1, &rng);  // field 0 (single-valued) given two keys
    two_values.keys.insert(two_values.keys.begin(), 1);
    for (size_t i = 1; i < two_values.offsets.size(); ++i) ++two_values.offsets[i];
    CHECK((*writer)->Append(two_values).code() == absl::StatusCode::kInvalidArgument);
    REQUIRE((*writer)->Append(RandomBatch(3, &rng)).ok());
    CHECK((*writer)->samples() == 3);
  }
  CHECK(access(path.c_str(), F_OK) != 0);
  CHECK(access((path + ".tmp").c_str(), F_OK) != 0);

  BinaryWriterOptions zero;
  zero.chunk_samples = 0;
  CHECK(BinaryWriter::Open(path, TestSchema(), zero).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(BinaryWriter::Open((*dir)->path() + "/no/such/dir.bin", TestSchema()).status().code() ==
        absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace worker
}  // namespace ps

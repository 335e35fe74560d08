#include "common/checkpoint_reader.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "proto/ps.pb.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "tests/testing/temp_dir.h"
#include "xxhash.h"

namespace ps {
namespace {

using Rows = std::map<uint64_t, std::vector<float>>;

// A table of a test file: its layout and rows.
struct TestTable {
  std::string name;
  uint32_t dim;
  uint32_t row_floats;
  Rows rows;
};

Rows RandomRows(size_t n, uint32_t row_floats, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  Rows rows;
  while (rows.size() < n) {
    std::vector<float> row(row_floats);
    for (float& f : row) f = value(rng);
    rows[rng()] = row;
  }
  return rows;
}

// Writes a shard file as the server does, with the key helpers: a dense chunk, the header, the
// tables' rows and layouts, and a window, in key order. Small blocks (`block_size`) make a file of
// many blocks.
void WriteFile(const std::string& path, const std::vector<TestTable>& tables,
               size_t block_size = 4096, bool with_header = true) {
  rocksdb::Options options;
  options.compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_size = block_size;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options);
  REQUIRE(writer.Open(path).ok());

  rpc::DenseChange dense;
  dense.set_name("mlp");
  dense.set_chunk(3);
  REQUIRE(writer.Put(DenseChunkKey("mlp", 3), dense.SerializeAsString()).ok());
  if (with_header) {
    rpc::CheckpointShardFile header;
    header.set_shard(5);
    header.set_sequence(77);
    header.set_applied_step(-1);
    header.set_dense_chunks(1);
    for (const TestTable& t : tables) header.set_rows(header.rows() + t.rows.size());
    REQUIRE(writer.Put(ShardMetaKey(), header.SerializeAsString()).ok());
  }
  for (const TestTable& t : tables) {  // given in name order
    for (const auto& [id, row] : t.rows) {
      REQUIRE(writer
                  .Put(RowKey(t.name, id), rocksdb::Slice(reinterpret_cast<const char*>(row.data()),
                                                          row.size() * sizeof(float)))
                  .ok());
    }
  }
  for (const TestTable& t : tables) {
    rpc::CheckpointTableLayout layout;
    layout.set_name(t.name);
    layout.set_dim(t.dim);
    layout.set_row_floats(t.row_floats);
    REQUIRE(writer.Put(TableLayoutKey(t.name), layout.SerializeAsString()).ok());
  }
  rpc::WindowEntry window;
  window.set_worker_id(2);
  REQUIRE(writer.Put(WindowKey(2), window.SerializeAsString()).ok());
  REQUIRE(writer.Finish().ok());
}

// Every row of `table` in `reader`, in the order the cursor gives them.
absl::StatusOr<std::vector<std::pair<uint64_t, std::vector<float>>>> ReadAll(
    ShardFileReader& reader, const std::string& table) {
  absl::StatusOr<std::unique_ptr<ShardRowCursor>> cursor = reader.Rows(table);
  if (!cursor.ok()) return cursor.status();
  std::vector<std::pair<uint64_t, std::vector<float>>> out;
  for (; (*cursor)->Valid(); (*cursor)->Next()) {
    out.emplace_back((*cursor)->id(),
                     std::vector<float>((*cursor)->row().begin(), (*cursor)->row().end()));
  }
  if (!(*cursor)->status().ok()) return (*cursor)->status();
  return out;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::unique_ptr<testing::ScopedTempDir> Scratch() {
  return std::move(testing::ScopedTempDir::Create("checkpoint_reader_test")).value();
}

TEST_CASE("row keys sort by table, then by id as a number, and parse back", "[checkpoint]") {
  CHECK(RowKey("a", 0xffffffffffffffffull) < RowKey("ab", 0));  // "a\0" sorts before "ab"
  CHECK(RowKey("emb", 255) < RowKey("emb", 256));
  CHECK(RowKey("emb", 1) < RowKey("emb", 1ull << 56));
  CHECK(RowKey("emb", 258) == RowKeyPrefix("emb") + std::string("\0\0\0\0\0\0\1\2", 8));
  CHECK(DenseChunkKey("mlp", 258) == std::string("dmlp\0\0\0\1\2", 9));
  CHECK(ShardMetaKey() == "m");
  CHECK(TableLayoutKey("emb") == "temb");
  CHECK(WindowKey(258) == std::string("w\0\0\1\2", 5));

  absl::string_view table;
  uint64_t id = 0;
  const std::string key = RowKey("emb", 0x0102030405060708ull);  // `table` points into it
  REQUIRE(ParseRowKey(key, &table, &id));
  CHECK(table == "emb");
  CHECK(id == 0x0102030405060708ull);
  const std::string short_id = RowKeyPrefix("emb") + "1234567";
  const std::string no_nul = "remb12345678";
  for (const std::string& bad : {short_id, no_nul, TableLayoutKey("emb"), std::string()}) {
    CHECK_FALSE(ParseRowKey(bad, &table, &id));
  }
}

TEST_CASE("a shard file's header, tables and rows are read back in id order, bit for bit",
          "[checkpoint]") {
  auto dir = Scratch();
  const std::string path = dir->path() + "/shard-00005.sst";
  // "ab" sorts after "a" and before "emb"; "a" has no rows. Tiny blocks: many blocks per table.
  const std::vector<TestTable> tables = {
      {"a", 2, 2, {}},
      {"ab", 1, 1, RandomRows(300, 1, 1)},
      {"emb", 4, 8, RandomRows(1000, 8, 2)},
  };
  const size_t block_size = GENERATE(size_t{256}, size_t{256 << 10});
  WriteFile(path, tables, block_size);

  absl::StatusOr<std::unique_ptr<ShardFileReader>> reader = ShardFileReader::Open(path);
  INFO(reader.status().ToString());
  REQUIRE(reader.ok());
  CHECK((*reader)->header().shard() == 5);
  CHECK((*reader)->header().sequence() == 77);
  CHECK((*reader)->header().applied_step() == -1);
  CHECK((*reader)->header().rows() == 1300);
  CHECK((*reader)->header().dense_chunks() == 1);
  REQUIRE((*reader)->tables().size() == 3);
  for (size_t t = 0; t < tables.size(); ++t) {
    const rpc::CheckpointTableLayout& layout = (*reader)->tables()[t];
    CHECK(layout.name() == tables[t].name);
    CHECK(layout.dim() == tables[t].dim);
    CHECK(layout.row_floats() == tables[t].row_floats);

    auto rows = ReadAll(**reader, tables[t].name);
    INFO(rows.status().ToString());
    REQUIRE(rows.ok());
    REQUIRE(rows->size() == tables[t].rows.size());
    auto want = tables[t].rows.begin();  // a std::map: in id order
    for (const auto& [id, row] : *rows) {
      CHECK(id == want->first);
      REQUIRE(row.size() == want->second.size());
      CHECK(std::memcmp(row.data(), want->second.data(), row.size() * sizeof(float)) == 0);
      ++want;
    }
    absl::StatusOr<uint64_t> count = (*reader)->CountRows(tables[t].name);
    REQUIRE(count.ok());
    CHECK(*count == tables[t].rows.size());
  }

  // Two cursors at once walk independently.
  auto first = (*reader)->Rows("emb");
  auto second = (*reader)->Rows("emb");
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  (*first)->Next();
  CHECK((*first)->id() != (*second)->id());
  CHECK((*second)->id() == tables[2].rows.begin()->first);

  const auto missing = (*reader)->Rows("wide");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("\"wide\""));
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("a, ab, emb"));
}

TEST_CASE("a chain cursor walks a shard's files as one: each id once, the newest file's row",
          "[checkpoint][incremental]") {
  auto dir = Scratch();
  // A full file and two increments: each changes some rows of before and adds some.
  std::vector<Rows> files = {RandomRows(500, 8, 1)};
  std::mt19937_64 rng(4);
  for (int i = 0; i < 2; ++i) {
    Rows inc = RandomRows(40, 8, 10 + i);  // new ids
    const Rows& before = files.back();
    for (int k = 0; k < 30; ++k) {
      auto it = std::next(before.begin(), rng() % before.size());
      inc[it->first] = RandomRows(1, 8, 100 * i + k).begin()->second;
    }
    files.push_back(inc);
  }
  files[2].insert(*files[0].begin());  // an id the middle file did not change
  std::vector<std::string> paths;
  Rows want;
  for (size_t i = 0; i < files.size(); ++i) {
    paths.push_back(dir->path() + "/shard-" + std::to_string(i) + ".sst");
    WriteFile(paths.back(), {{"emb", 4, 8, files[i]}}, 256);
    for (const auto& [id, row] : files[i]) want[id] = row;
  }
  for (size_t n = 1; n <= paths.size(); ++n) {
    CAPTURE(n);
    Rows expected;
    for (size_t i = 0; i < n; ++i) {
      for (const auto& [id, row] : files[i]) expected[id] = row;
    }
    absl::StatusOr<std::unique_ptr<ShardChainCursor>> chain =
        ShardChainCursor::Open(std::vector<std::string>(paths.begin(), paths.begin() + n), "emb");
    REQUIRE(chain.ok());
    CHECK((*chain)->layout().row_floats() == 8);
    std::vector<std::pair<uint64_t, std::vector<float>>> got;
    for (; (*chain)->Valid(); (*chain)->Next()) {
      got.emplace_back((*chain)->id(),
                       std::vector<float>((*chain)->row().begin(), (*chain)->row().end()));
    }
    CHECK((*chain)->status().ok());
    CHECK(got ==
          std::vector<std::pair<uint64_t, std::vector<float>>>(expected.begin(), expected.end()));
  }

  // A table the newest file lacks is NOT_FOUND; one an older file lacks or lays out otherwise is
  // DATA_LOSS naming that file.
  CHECK(ShardChainCursor::Open(paths, "wide").status().code() == absl::StatusCode::kNotFound);
  const std::string other = dir->path() + "/other.sst";
  WriteFile(other, {{"emb", 2, 4, RandomRows(5, 4, 9)}});
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{other, paths[2]},
        std::vector<std::string>{paths[0], paths[1], other}}) {
    absl::StatusOr<std::unique_ptr<ShardChainCursor>> chain = ShardChainCursor::Open(bad, "emb");
    CHECK(chain.status().code() == absl::StatusCode::kDataLoss);
  }
  const std::string lacking = dir->path() + "/lacking.sst";
  WriteFile(lacking, {{"ab", 1, 1, RandomRows(5, 1, 9)}});
  absl::StatusOr<std::unique_ptr<ShardChainCursor>> chain =
      ShardChainCursor::Open({lacking, paths[0]}, "emb");
  CHECK(chain.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(chain.status().message()), Catch::Contains(lacking));
}

TEST_CASE("a file's digest is its XXH3-64, checked against the manifest's entry", "[checkpoint]") {
  auto dir = Scratch();
  const std::string path = dir->path() + "/shard-00000.sst";
  WriteFile(path, {{"emb", 2, 4, RandomRows(50, 4, 3)}});
  const std::string bytes = ReadBytes(path);
  absl::StatusOr<uint64_t> digest = FileXxh3(path);
  REQUIRE(digest.ok());
  CHECK(*digest == XXH3_64bits(bytes.data(), bytes.size()));
  CHECK(FileXxh3(dir->path() + "/absent").status().code() == absl::StatusCode::kNotFound);

  rpc::CheckpointShardFile expected;
  expected.set_bytes(bytes.size());
  expected.set_xxh3(*digest);
  CHECK(VerifyShardFile(path, expected).ok());

  rpc::CheckpointShardFile other_size = expected;
  other_size.set_bytes(bytes.size() + 1);
  rpc::CheckpointShardFile other_digest = expected;
  other_digest.set_xxh3(*digest + 1);
  for (const absl::Status& s :
       {VerifyShardFile(path, other_size), VerifyShardFile(path, other_digest),
        VerifyShardFile(dir->path() + "/absent", expected)}) {
    CHECK(s.code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(s.message()), Catch::Contains("checkpoint file " + dir->path()));
  }
  CHECK_THAT(std::string(VerifyShardFile(path, other_digest).message()),
             Catch::Contains("the manifest says"));
}

TEST_CASE("a missing, truncated or corrupt shard file is DATA_LOSS", "[checkpoint]") {
  auto dir = Scratch();
  const std::string path = dir->path() + "/shard-00001.sst";
  const Rows rows = RandomRows(2000, 4, 4);
  WriteFile(path, {{"emb", 4, 4, rows}}, /*block_size=*/256);
  const std::string good = ReadBytes(path);

  SECTION("missing") {
    const auto reader = ShardFileReader::Open(dir->path() + "/absent.sst");
    CHECK(reader.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(reader.status().message()), Catch::Contains("is missing"));
  }
  SECTION("truncated") {
    for (size_t keep : {size_t{0}, size_t{10}, good.size() / 2, good.size() - 1}) {
      WriteBytes(path, good.substr(0, keep));
      const auto reader = ShardFileReader::Open(path);
      CHECK(reader.status().code() == absl::StatusCode::kDataLoss);
    }
  }
  SECTION("a flipped byte in a row, found by the block checksum when the cursor gets there") {
    // The 1000th row's value, stored as is (no compression): flip a bit of its first float.
    auto at = rows.begin();
    std::advance(at, 1000);
    const std::string value(reinterpret_cast<const char*>(at->second.data()), 4 * sizeof(float));
    const size_t offset = good.find(value);
    REQUIRE(offset != std::string::npos);
    std::string bad = good;
    bad[offset] ^= 0x01;
    WriteBytes(path, bad);
    auto reader = ShardFileReader::Open(path);
    REQUIRE(reader.ok());  // the header and layouts are in other blocks
    auto read = ReadAll(**reader, "emb");
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(read.status().message()), Catch::Contains(path));
    CHECK((*reader)->CountRows("emb").status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("no header") {
    WriteFile(path, {{"emb", 4, 4, rows}}, 4096, /*with_header=*/false);
    const auto reader = ShardFileReader::Open(path);
    CHECK(reader.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(reader.status().message()), Catch::Contains("no header"));
  }
  SECTION("a row whose size disagrees with its table's layout") {
    WriteFile(path, {{"emb", 4, 5, {{7, {1, 2, 3, 4}}}}});
    auto reader = ShardFileReader::Open(path);
    REQUIRE(reader.ok());
    const auto read = ReadAll(**reader, "emb");
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(read.status().message()), Catch::Contains("has 16 bytes, not 20"));
  }
}

}  // namespace
}  // namespace ps

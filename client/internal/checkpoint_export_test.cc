#include "client/internal/checkpoint_export.h"

#include <catch2/catch.hpp>
#include <cfloat>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace client_internal {
namespace {

constexpr uint32_t kShards = 3;
constexpr uint32_t kDim = 3;
constexpr uint32_t kRowFloats = 2 * kDim;  // adagrad: the embedding, then its accumulator

using Rows = std::map<uint64_t, std::vector<float>>;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A checkpoint on disk as the servers and the coordinator write it: tables "emb" (dim kDim,
// adagrad, rows spread over the shards by id, none in the last shard) and "wide" (dim 1, sgd),
// each shard file with its header and layouts, and the manifest with every file's size and digest.
struct Checkpoint {
  Checkpoint() {
    scratch = std::move(testing::ScopedTempDir::Create("checkpoint_export_test")).value();

    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    const std::vector<float> awkward = {
        -0.0f, std::numeric_limits<float>::denorm_min(), FLT_MAX, -FLT_MAX, 1.0f / 3, 1e-30f};
    while (emb.size() < 500) {
      std::vector<float> row(kRowFloats);
      for (float& f : row) f = value(rng);
      row[0] = awkward[emb.size() % awkward.size()];
      emb[rng() >> (emb.size() % 2 == 0 ? 0 : 40)] = row;  // large and small ids
    }
    while (wide.size() < 100) wide[rng()] = {value(rng)};
    folder = Write(1, 0, emb, wide);
  }

  // An increment on the newest checkpoint: changes `changed` rows of emb and adds `added`, and
  // writes checkpoint `id` with only those; emb becomes what it restores to.
  void AddIncrement(uint64_t id, int changed, int added) {
    std::mt19937_64 rng(id);
    Rows rows;
    for (int i = 0; i < changed; ++i) {
      auto it = std::next(emb.begin(), rng() % emb.size());
      rows[it->first] = std::vector<float>(kRowFloats, static_cast<float>(id) + 0.5f * i);
    }
    for (int i = 0; i < added; ++i) rows[rng()] = std::vector<float>(kRowFloats, -1.0f * i);
    for (const auto& [row_id, row] : rows) emb[row_id] = row;
    folder = Write(id, id - 1, rows, {});
  }

  // Checkpoint `id` (incremental on `base` unless 0) holding `emb_rows` and `wide_rows`.
  std::string Write(uint64_t id, uint64_t base, const Rows& emb_rows, const Rows& wide_rows) {
    const std::string at = scratch->path() + "/" + CheckpointFolderName(id);
    std::filesystem::create_directory(at);
    rpc::CheckpointManifest manifest;
    manifest.set_format(kCheckpointFormat);
    manifest.set_id(id);
    manifest.set_base_id(base);
    manifest.mutable_shard_map()->set_num_shards(kShards);
    manifest.set_job_name("export_test");
    config::Table* t = manifest.add_tables();
    t->set_name("wide");
    t->set_dim(1);
    t = manifest.add_tables();
    t->set_name("emb");
    t->set_dim(kDim);
    t->mutable_optimizer()->set_type("adagrad");
    for (uint32_t shard = 0; shard < kShards; ++shard) {
      const std::string file = absl::StrCat("shard-0000", shard, ".sst");
      rpc::CheckpointShardFile* entry = manifest.add_shards();
      entry->set_shard(shard);
      entry->set_file(file);
      entry->set_incremental(base != 0);
      entry->set_base_id(base);
      WriteShard(at + "/" + file, *entry, emb_rows, wide_rows);
      entry->set_bytes(std::filesystem::file_size(at + "/" + file));
      entry->set_xxh3(FileXxh3(at + "/" + file).value());
    }
    REQUIRE(WriteCheckpointManifest(at, manifest).ok());
    return at;
  }

  // Shard `header.shard()`'s rows: those whose id % (kShards - 1) is the shard, in key order.
  void WriteShard(const std::string& path, const rpc::CheckpointShardFile& header,
                  const Rows& emb_rows, const Rows& wide_rows) {
    rocksdb::Options options;
    options.compression = rocksdb::kNoCompression;
    rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options);
    REQUIRE(writer.Open(path).ok());
    const uint32_t shard = header.shard();
    REQUIRE(writer.Put(ShardMetaKey(), header.SerializeAsString()).ok());
    for (const auto& [name, rows] :
         {std::make_pair("emb", &emb_rows), std::make_pair("wide", &wide_rows)}) {
      for (const auto& [id, row] : *rows) {
        if (id % (kShards - 1) != shard) continue;
        const rocksdb::Slice value(reinterpret_cast<const char*>(row.data()), row.size() * 4);
        REQUIRE(writer.Put(RowKey(name, id), value).ok());
      }
    }
    for (const auto& [name, dim, row_floats] :
         {std::make_tuple("emb", kDim, kRowFloats),
          std::make_tuple("wide", uint32_t{1}, uint32_t{1})}) {
      rpc::CheckpointTableLayout layout;
      layout.set_name(name);
      layout.set_dim(dim);
      layout.set_row_floats(row_floats);
      REQUIRE(writer.Put(TableLayoutKey(name), layout.SerializeAsString()).ok());
    }
    REQUIRE(writer.Finish().ok());
  }

  std::unique_ptr<testing::ScopedTempDir> scratch;
  std::string folder;
  Rows emb;
  Rows wide;
};

// The rows of a TSV export, in file order.
std::vector<std::pair<uint64_t, std::vector<float>>> ParseTsv(const std::string& text) {
  std::vector<std::pair<uint64_t, std::vector<float>>> rows;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> fields = absl::StrSplit(line, '\t');
    std::vector<float> row;
    for (size_t i = 1; i < fields.size(); ++i)
      row.push_back(std::strtof(fields[i].c_str(), nullptr));
    rows.emplace_back(std::strtoull(fields[0].c_str(), nullptr, 10), row);
  }
  return rows;
}

// The rows of an .npy export, in file order, after checking its header.
std::vector<std::pair<uint64_t, std::vector<float>>> ParseNpy(const std::string& bytes,
                                                              uint32_t dim) {
  REQUIRE(bytes.size() >= 10);
  REQUIRE(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_length = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
  const size_t data = 10 + header_length;
  CHECK(data % 64 == 0);
  REQUIRE(bytes.size() >= data);
  const std::string header = bytes.substr(10, header_length);
  const std::string dict = absl::StrCat("{'descr': [('id', '<u8'), ('emb', '<f4', (", dim,
                                        ",))], 'fortran_order': False, 'shape': (");
  REQUIRE(header.substr(0, dict.size()) == dict);
  const size_t rows = std::strtoull(header.c_str() + dict.size(), nullptr, 10);
  CHECK(header.substr(dict.size() + absl::StrCat(rows).size()).find_first_not_of(" \n,)}") ==
        std::string::npos);
  CHECK(header.back() == '\n');
  const size_t item = 8 + 4 * dim;
  REQUIRE(bytes.size() == data + rows * item);
  std::vector<std::pair<uint64_t, std::vector<float>>> out;
  for (size_t r = 0; r < rows; ++r) {
    const char* p = bytes.data() + data + r * item;
    uint64_t id;
    std::memcpy(&id, p, 8);
    std::vector<float> row(dim);
    std::memcpy(row.data(), p + 8, 4 * dim);
    out.emplace_back(id, row);
  }
  return out;
}

TEST_CASE("a table's embeddings are exported sorted by id, bit for bit, without optimizer state",
          "[checkpoint][export]") {
  Checkpoint checkpoint;
  const ExportFormat format = GENERATE(ExportFormat::kTsv, ExportFormat::kNpy);
  const std::string out = checkpoint.scratch->path() + "/emb.out";
  for (const auto& [name, dim, rows] : {std::make_tuple("emb", kDim, &checkpoint.emb),
                                        std::make_tuple("wide", uint32_t{1}, &checkpoint.wide)}) {
    absl::StatusOr<ExportSummary> summary = ExportTable(checkpoint.folder, name, format, out);
    INFO(summary.status().ToString());
    REQUIRE(summary.ok());
    CHECK(summary->rows == rows->size());
    CHECK(summary->dim == dim);
    CHECK_FALSE(std::filesystem::exists(out + ".tmp"));
    const std::string bytes = ReadBytes(out);
    const auto exported = format == ExportFormat::kTsv ? ParseTsv(bytes) : ParseNpy(bytes, dim);
    REQUIRE(exported.size() == rows->size());
    auto want = rows->begin();  // in id order
    for (const auto& [id, row] : exported) {
      CHECK(id == want->first);
      REQUIRE(row.size() == dim);
      CHECK(std::memcmp(row.data(), want->second.data(), dim * sizeof(float)) == 0);
      ++want;
    }
  }
}

TEST_CASE("an incremental checkpoint is exported with its chain: every row, its newest value",
          "[checkpoint][export][incremental]") {
  Checkpoint checkpoint;
  checkpoint.AddIncrement(2, 40, 10);
  checkpoint.AddIncrement(3, 40, 10);
  const std::string out = checkpoint.scratch->path() + "/emb.npy";
  for (const auto& [name, dim, rows] : {std::make_tuple("emb", kDim, &checkpoint.emb),
                                        std::make_tuple("wide", uint32_t{1}, &checkpoint.wide)}) {
    absl::StatusOr<ExportSummary> summary =
        ExportTable(checkpoint.folder, name, ExportFormat::kNpy, out);
    INFO(summary.status().ToString());
    REQUIRE(summary.ok());
    CHECK(summary->rows == rows->size());
    const auto exported = ParseNpy(ReadBytes(out), dim);
    REQUIRE(exported.size() == rows->size());
    auto want = rows->begin();
    for (const auto& [id, row] : exported) {
      CHECK(id == want->first);
      CHECK(std::memcmp(row.data(), want->second.data(), dim * sizeof(float)) == 0);
      ++want;
    }
  }

  // A damaged base file, or a missing base, fails the export before anything is written.
  const std::string base = checkpoint.scratch->path() + "/" + CheckpointFolderName(2);
  std::string named;
  SECTION("a damaged base file") {
    named = base + "/shard-00001.sst";
    std::filesystem::resize_file(named, std::filesystem::file_size(named) - 1);
  }
  SECTION("a missing base") {
    std::filesystem::remove_all(base);
    named = "builds on checkpoint 2 (" + base + "), which is missing";
  }
  std::filesystem::remove(out);
  absl::StatusOr<ExportSummary> summary =
      ExportTable(checkpoint.folder, "emb", ExportFormat::kTsv, out);
  CHECK(summary.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(summary.status().message()), Catch::Contains(named));
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE(
    "an export refuses an unknown table, a damaged file or an incomplete checkpoint, and "
    "leaves no file",
    "[checkpoint][export]") {
  Checkpoint checkpoint;
  const std::string out = checkpoint.scratch->path() + "/emb.tsv";

  absl::StatusOr<ExportSummary> summary =
      ExportTable(checkpoint.folder, "deep", ExportFormat::kTsv, out);
  CHECK(summary.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(summary.status().message()), Catch::Contains("\"deep\""));
  CHECK_THAT(std::string(summary.status().message()), Catch::Contains("wide, emb"));
  CHECK_FALSE(std::filesystem::exists(out));

  // A flipped byte: found by the digest before anything is written; a file already at `out` is
  // left as it was.
  std::ofstream(out) << "before\n";
  const std::string shard = checkpoint.folder + "/shard-00001.sst";
  std::string bytes = ReadBytes(shard);
  bytes[bytes.size() / 3] ^= 0x20;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  summary = ExportTable(checkpoint.folder, "emb", ExportFormat::kNpy, out);
  CHECK(summary.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(summary.status().message()), Catch::Contains(shard));
  CHECK(ReadBytes(out) == "before\n");
  CHECK_FALSE(std::filesystem::exists(out + ".tmp"));

  std::filesystem::remove(checkpoint.folder + "/MANIFEST");
  summary = ExportTable(checkpoint.folder, "emb", ExportFormat::kTsv, out);
  CHECK(summary.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(summary.status().message()),
             Catch::Contains("is not a complete checkpoint"));
  CHECK(ParseExportFormat("npy").value() == ExportFormat::kNpy);
  CHECK(ParseExportFormat("tsv").value() == ExportFormat::kTsv);
  CHECK(ParseExportFormat("csv").status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

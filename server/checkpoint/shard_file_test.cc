#include "server/checkpoint/shard_file.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/optimizer.h"
#include "proto/job.pb.h"

namespace ps {
namespace server {
namespace {

// Tables "emb" (adagrad, dim `dim`) and "wide" (sgd, dim 1), and a scratch folder.
struct Fixture {
  explicit Fixture(uint32_t dim = 4) {
    tables = Tables(dim);
    config::Optimizer dense;
    dense.set_type("adagrad");
    dense.set_learning_rate(0.1f);
    dense_optimizer = std::move(Optimizer::Create(dense)).value();
    config.tables = &tables;
    config.dense_optimizer = dense_optimizer.get();
    config.dense_chunk_floats = 8;
    char tmpl[] = "/tmp/shard_file_test.XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  ~Fixture() { std::filesystem::remove_all(dir); }

  static std::vector<std::unique_ptr<TableSpec>> Tables(uint32_t dim) {
    std::vector<std::unique_ptr<TableSpec>> out;
    for (const char* name : {"wide", "emb"}) {  // not in name order
      config::Table table;
      table.set_name(name);
      table.set_dim(std::string(name) == "emb" ? dim : 1);
      table.mutable_optimizer()->set_type(std::string(name) == "emb" ? "adagrad" : "sgd");
      table.mutable_optimizer()->set_learning_rate(0.5f);
      table.mutable_initializer()->set_kind(config::Initializer::NORMAL);
      out.push_back(std::move(TableSpec::Create(table, /*job_seed=*/11)).value());
    }
    return out;
  }

  // A shard with rows in both tables, pushed to by two workers, and a dense tensor.
  std::unique_ptr<Shard> Filled(uint32_t id, int keys) {
    auto shard = std::make_unique<Shard>(id, config, std::vector<size_t>{0, 0});
    std::mt19937_64 rng(42 + id);
    for (int round = 0; round < 3; ++round) {
      for (size_t t = 0; t < tables.size(); ++t) {
        std::vector<uint64_t> ids(keys);
        for (uint64_t& k : ids) k = rng() % (4 * keys);
        std::vector<float> grads(ids.size() * tables[t]->dim);
        for (float& g : grads) g = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
        shard->Push(t, /*worker=*/1 + round % 2, /*sequence=*/round * 2 + t + 1, ids, grads.data());
      }
    }
    std::vector<float> dense(20, 0.25f);
    REQUIRE(shard->AssignDense("mlp", 0, absl::MakeConstSpan(dense).subspan(0, 8), 20).ok());
    REQUIRE(shard->AssignDense("mlp", 2, absl::MakeConstSpan(dense).subspan(16, 4), 20).ok());
    std::vector<float> g(8, 0.5f);
    REQUIRE(shard->ApplyDenseGradient("mlp", 0, g, 20, /*worker=*/1, /*sequence=*/100).ok());
    return shard;
  }

  std::vector<std::unique_ptr<TableSpec>> tables;
  std::unique_ptr<Optimizer> dense_optimizer;
  ShardConfig config;
  std::string dir;
};

// Everything a cut says, keyed so that two cuts compare regardless of record order.
struct Contents {
  std::map<std::pair<uint32_t, uint64_t>, std::string> rows;  // (table, id) -> row bytes
  std::map<std::pair<std::string, uint32_t>, std::string> dense;
  std::map<uint32_t, std::string> windows;
  uint64_t sequence;
  int64_t step;

  explicit Contents(const ShardCut& cut, const std::vector<std::unique_ptr<TableSpec>>& tables)
      : sequence(cut.sequence), step(cut.applied_step) {
    for (const rpc::ShardRecord& r : cut.records) {
      if (r.has_rows()) {
        const size_t row_bytes = tables[r.rows().table()]->row_floats() * sizeof(float);
        for (size_t i = 0; i < r.rows().keys().size() / 8; ++i) {
          uint64_t id;
          std::memcpy(&id, r.rows().keys().data() + 8 * i, 8);
          rows[{r.rows().table(), id}] = r.rows().values().substr(i * row_bytes, row_bytes);
        }
      } else if (r.has_dense()) {
        dense[{r.dense().name(), r.dense().chunk()}] = r.dense().SerializeAsString();
      } else if (r.has_window()) {
        windows[r.window().worker_id()] = r.window().SerializeAsString();
      }
    }
  }
  bool operator==(const Contents& o) const {
    return rows == o.rows && dense == o.dense && windows == o.windows && sequence == o.sequence &&
           step == o.step;
  }
};

TEST_CASE("a shard written to a file and read back restores bit for bit", "[checkpoint]") {
  Fixture f;
  std::unique_ptr<Shard> shard = f.Filled(5, 300);
  const ShardCut cut = shard->Cut(/*max_record_bytes=*/4096);
  const std::string path = f.dir + "/shard-5.sst";
  absl::StatusOr<rpc::CheckpointShardFile> written = WriteShardFile(path, cut, f.tables);
  REQUIRE(written.ok());
  CHECK(written->file() == "shard-5.sst");
  CHECK(written->shard() == 5);
  CHECK(written->sequence() == shard->applied_sequence());
  CHECK(written->bytes() == std::filesystem::file_size(path));
  CHECK(written->dense_chunks() == 2);
  const Contents original(cut, f.tables);
  CHECK(written->rows() == original.rows.size());
  CHECK(original.windows.size() == 2);

  absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables, &*written, 4096);
  REQUIRE(read.ok());
  CHECK(Contents(*read, f.tables) == original);

  // Restored into a fresh shard, it cuts the same again, and keeps training the same way.
  Shard restored(5, f.config, {0, 0});
  REQUIRE(restored.Restore(*read).ok());
  CHECK(restored.complete());
  CHECK(restored.applied_sequence() == shard->applied_sequence());
  CHECK(Contents(restored.Cut(1 << 20), f.tables) == original);
  const std::vector<uint64_t> ids = {1, 2, 3, 700};
  std::vector<float> grads(ids.size() * 4, 0.25f);
  CHECK(shard->Push(1, 2, 50, ids, grads.data()) == ApplyWindow::Verdict::kApply);
  CHECK(restored.Push(1, 2, 50, ids, grads.data()) == ApplyWindow::Verdict::kApply);
  CHECK(Contents(restored.Cut(1 << 20), f.tables) == Contents(shard->Cut(1 << 20), f.tables));
  // The window came along: a retry of an applied push is recognised.
  CHECK(restored.Push(1, 1, 5, ids, grads.data()) == ApplyWindow::Verdict::kDuplicate);
}

TEST_CASE("an empty shard makes a valid file", "[checkpoint]") {
  Fixture f;
  Shard shard(0, f.config, {0, 0});
  const std::string path = f.dir + "/empty.sst";
  absl::StatusOr<rpc::CheckpointShardFile> written =
      WriteShardFile(path, shard.Cut(4096), f.tables);
  REQUIRE(written.ok());
  CHECK(written->rows() == 0);
  absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables, &*written);
  REQUIRE(read.ok());
  CHECK(read->records.empty());
  CHECK(read->applied_step == -1);
}

TEST_CASE("a damaged shard file is refused with DATA_LOSS", "[checkpoint]") {
  Fixture f;
  const std::string path = f.dir + "/shard-1.sst";
  absl::StatusOr<rpc::CheckpointShardFile> written =
      WriteShardFile(path, f.Filled(1, 200)->Cut(4096), f.tables);
  REQUIRE(written.ok());
  const uintmax_t size = std::filesystem::file_size(path);

  SECTION("missing") {
    std::filesystem::remove(path);
    absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables, &*written);
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(read.status().message()), Catch::Contains("missing"));
  }
  SECTION("truncated") {
    std::filesystem::resize_file(path, size / 2);
    CHECK(ReadShardFile(path, f.tables, &*written).status().code() == absl::StatusCode::kDataLoss);
    // Without the manifest's size and checksum, RocksDB's own checks refuse it too.
    absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables);
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("a flipped byte") {
    {
      std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(static_cast<std::streamoff>(size / 3));
      char c;
      file.read(&c, 1);
      file.seekp(static_cast<std::streamoff>(size / 3));
      c ^= 0x10;
      file.write(&c, 1);
    }
    absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables, &*written);
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(read.status().message()), Catch::Contains("checksum"));
    // RocksDB's block checksums catch it without the manifest.
    CHECK(ReadShardFile(path, f.tables).status().code() == absl::StatusCode::kDataLoss);
  }
}

TEST_CASE("a shard file is refused by a job whose table differs", "[checkpoint]") {
  Fixture f;
  const std::string path = f.dir + "/shard-2.sst";
  REQUIRE(WriteShardFile(path, f.Filled(2, 50)->Cut(4096), f.tables).ok());
  const std::vector<std::unique_ptr<TableSpec>> wider = Fixture::Tables(/*dim=*/8);
  absl::StatusOr<ShardCut> read = ReadShardFile(path, wider);
  CHECK(read.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(read.status().message()), Catch::Contains("\"emb\" has dim 4"));
  std::vector<std::unique_ptr<TableSpec>> fewer = Fixture::Tables(4);
  fewer.erase(fewer.begin());  // no "wide"
  read = ReadShardFile(path, fewer);
  CHECK(read.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(read.status().message()), Catch::Contains("\"wide\""));
}

}  // namespace
}  // namespace server
}  // namespace ps

// Test fixtures of the checkpoint tests: shards filled with rows, dense chunks and windows, and
// a comparison of cuts that ignores the order of their records.
#ifndef PS_SERVER_CHECKPOINT_INTERNAL_TEST_SHARDS_H_
#define PS_SERVER_CHECKPOINT_INTERNAL_TEST_SHARDS_H_

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "server/shard/shard.h"
#include "server/storage/embedding_table.h"

namespace ps {
namespace server {
namespace testing {

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

  // A shard with rows in both tables (ids from `first_id` on), pushed to by two workers, and a
  // dense tensor.
  std::unique_ptr<Shard> Filled(uint32_t id, int keys, uint64_t first_id = 0) {
    auto shard = std::make_unique<Shard>(id, config, std::vector<size_t>{0, 0});
    std::mt19937_64 rng(42 + id);
    for (int round = 0; round < 3; ++round) {
      for (size_t t = 0; t < tables.size(); ++t) {
        std::vector<uint64_t> ids(keys);
        for (uint64_t& k : ids) k = first_id + rng() % (4 * keys);
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

// Replaces `shard` with `cut` as a server restoring a checkpoint does (server_checkpoint.cc):
// BeginRestore, then FinishRestore with the cut's records.
inline absl::Status RestoreCut(Shard& shard, const ShardCut& cut) {
  shard.BeginRestore();
  return shard.FinishRestore(cut);
}

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

}  // namespace testing
}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_INTERNAL_TEST_SHARDS_H_

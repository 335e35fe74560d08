#include "server/store_stats.h"

#include <catch2/catch.hpp>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/hot_keys.h"
#include "server/shard/shard.h"
#include "server/storage/embedding_table.h"

namespace ps {
namespace server {
namespace {

// Tables "a" (dim 4, adagrad) and "b" (dim 2, sgd), and shards holding rows of them.
struct Fixture {
  Fixture() {
    for (const auto& [name, dim, optimizer] :
         {std::make_tuple("a", 4, "adagrad"), std::make_tuple("b", 2, "sgd")}) {
      config::Table* table = job.add_tables();
      table->set_name(name);
      table->set_dim(dim);
      table->mutable_optimizer()->set_type(optimizer);
      table->mutable_optimizer()->set_learning_rate(0.1f);
      tables.push_back(std::move(TableSpec::Create(*table, /*job_seed=*/5)).value());
    }
    config::Optimizer sgd;
    sgd.set_type("sgd");
    dense_optimizer = std::move(Optimizer::Create(sgd)).value();
    config.tables = &tables;
    config.dense_optimizer = dense_optimizer.get();
  }
  // A shard holding `rows` rows of table t.
  std::unique_ptr<Shard> Holding(uint32_t id, size_t t, int rows) {
    auto shard = std::make_unique<Shard>(id, config, std::vector<size_t>{});
    std::vector<uint64_t> keys(rows);
    for (int i = 0; i < rows; ++i) keys[i] = 1000 * id + i;
    std::vector<float> out(rows * tables[t]->dim);
    shard->Pull(t, keys, out.data());
    return shard;
  }

  config::Job job;
  std::vector<std::unique_ptr<TableSpec>> tables;
  std::unique_ptr<Optimizer> dense_optimizer;
  ShardConfig config;
};

TEST_CASE("the status sizes every copy and every table, primaries apart", "[server][store_stats]") {
  Fixture f;
  StoreStats stats(f.job, &f.tables, /*hot_keys_sample_every=*/1);
  std::unique_ptr<Shard> primary = f.Holding(0, 0, 10);
  std::unique_ptr<Shard> replica = f.Holding(1, 1, 7);
  std::unique_ptr<Shard> catching_up = f.Holding(2, 0, 3);
  const std::vector<StoreStats::Copy> copies = {
      {0, rpc::ShardSize::PRIMARY, primary.get()},
      {1, rpc::ShardSize::REPLICA, replica.get()},
      {2, rpc::ShardSize::CATCHING_UP, catching_up.get()}};
  rpc::ServerStatus status;
  stats.Fill(rpc::ServerStatusRequest(), copies, &status);
  CHECK(std::vector<uint32_t>(status.primary_shards().begin(), status.primary_shards().end()) ==
        std::vector<uint32_t>{0});
  CHECK(std::vector<uint32_t>(status.replica_shards().begin(), status.replica_shards().end()) ==
        std::vector<uint32_t>{1, 2});
  REQUIRE(status.shard_sizes_size() == 3);
  CHECK(status.shard_sizes(0).rows() == 10);
  CHECK(status.shard_sizes(1).copy() == rpc::ShardSize::REPLICA);
  CHECK(status.shard_sizes(1).rows() == 7);
  CHECK(status.shard_sizes(2).copy() == rpc::ShardSize::CATCHING_UP);
  REQUIRE(status.tables_size() == 2);
  CHECK(status.tables(0).name() == "a");
  CHECK(status.tables(0).dim() == 4);
  CHECK(status.tables(0).optimizer() == "adagrad");
  CHECK(status.tables(0).rows() == 13);
  CHECK(status.tables(0).primary_rows() == 10);
  CHECK(status.tables(0).bytes() > status.tables(0).primary_bytes());
  CHECK(status.tables(1).rows() == 7);
  CHECK(status.tables(1).primary_rows() == 0);
  CHECK(status.hot_keys_table().empty());
}

TEST_CASE("the status counts the data path and reports a table's hot keys",
          "[server][store_stats]") {
  Fixture f;
  StoreStats stats(f.job, &f.tables, /*hot_keys_sample_every=*/1);
  std::mt19937_64 rng(3);
  std::vector<uint64_t> keys(200);
  for (uint64_t& k : keys) k = rng() % 5;  // five keys, each many times
  stats.traffic(1).RecordPull(keys);
  stats.traffic(1).RecordPush(keys);
  stats.CountReplicaPull();
  stats.CountLatePush(12);
  stats.CountLatePush(3);
  rpc::ServerStatusRequest request;
  request.set_hot_keys_table("b");
  request.set_hot_keys_k(3);
  REQUIRE(stats.CheckRequest(request).ok());
  rpc::ServerStatus status;
  stats.Fill(request, {}, &status);
  CHECK(status.replica_pulls() == 1);
  CHECK(status.late_pushes_dropped() == 2);
  CHECK(status.late_keys_dropped() == 15);
  CHECK(status.tables(1).keys_pulled() == 200);
  CHECK(status.tables(0).keys_pulled() == 0);
  CHECK(status.hot_keys_table() == "b");
  CHECK(status.hot_pulled_size() == 3);

  // Hot keys that cannot be reported: nothing of them is filled.
  request.set_hot_keys_table("nope");
  CHECK(stats.CheckRequest(request).code() == absl::StatusCode::kNotFound);
  request.set_hot_keys_table("b");
  request.set_hot_keys_k(HotKeys::kDefaultCapacity + 1);
  CHECK(stats.CheckRequest(request).code() == absl::StatusCode::kInvalidArgument);
  request.set_hot_keys_k(0);  // 10
  CHECK(stats.CheckRequest(request).ok());
  CHECK(stats.CheckRequest(rpc::ServerStatusRequest()).ok());
}

}  // namespace
}  // namespace server
}  // namespace ps

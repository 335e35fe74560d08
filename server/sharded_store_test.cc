#include "server/sharded_store.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/hash.h"
#include "common/job_config.h"
#include "server/internal/test_fixtures.h"
#include "server/replication/replicate_wire.h"

namespace ps {
namespace server {
namespace {

using testing::EvenOddMap;
using testing::SetKeys;
using testing::TestJob;
constexpr uint32_t kShards = testing::kTestShards;

// Keys that fall on shards served by server 0 in EvenOddMap.
std::vector<uint64_t> EvenShardKeys(int n) { return testing::KeysOnShards(0, n); }

// Pulls and returns the rows by key, as an observer that keeps no step clock.
std::map<uint64_t, std::vector<float>> PullRows(ShardedStore& store,
                                                const std::vector<uint64_t>& keys) {
  absl::StatusOr<std::map<uint64_t, std::vector<float>>> rows = testing::PullStoreRows(store, keys);
  INFO(rows.status().ToString());
  REQUIRE(rows.ok());
  return *std::move(rows);
}

rpc::PushRequest MakePush(const std::vector<uint64_t>& keys, float grad, uint64_t sequence) {
  rpc::PushRequest request;
  request.set_table("emb");
  request.mutable_header()->set_worker_id(7);
  request.mutable_header()->set_sequence(sequence);
  SetKeys(keys, &request);
  std::vector<float> grads(keys.size() * 4, grad);
  request.set_grads(
      std::string(reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)));
  return request;
}

std::unique_ptr<ShardedStore> ServingStore() {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  return std::move(*store);
}

TEST_CASE("pulls create deterministic rows and pushes apply sgd, duplicates summed",
          "[server][store]") {
  auto store = ServingStore();
  const std::vector<uint64_t> keys = EvenShardKeys(50);
  const auto before = PullRows(*store, keys);
  CHECK(PullRows(*store, keys) == before);  // a second pull sees the same rows

  // Every key twice in one push: the two gradients are summed, then one SGD step (lr 0.5).
  std::vector<uint64_t> doubled = keys;
  doubled.insert(doubled.end(), keys.begin(), keys.end());
  uint32_t duplicates = 99;
  REQUIRE(store->Push(MakePush(doubled, 1.0f, 1), &duplicates).ok());
  CHECK(duplicates == 0);
  const auto after = PullRows(*store, keys);
  for (uint64_t k : keys) {
    for (int j = 0; j < 4; ++j) CHECK(after.at(k)[j] == before.at(k)[j] - 0.5f * 2.0f);
  }

  // A second store created from the same job creates the same rows bit for bit.
  auto other = ServingStore();
  CHECK(PullRows(*other, keys) == before);
}

TEST_CASE("a rowwise_adagrad table steps each row by the mean square of its gradient",
          "[server][store][rowwise]") {
  // TestJob's table with the compact optimizer of issue 35: one accumulator a row, behind the same
  // store, pushes and pulls as every other optimizer.
  config::Job job = TestJob();
  config::Optimizer* optimizer = job.mutable_tables(0)->mutable_optimizer();
  optimizer->set_type("rowwise_adagrad");
  optimizer->set_learning_rate(0.5f);
  optimizer->set_initial_accumulator(0.1f);
  REQUIRE(ValidateJob(job).ok());
  auto created = ShardedStore::Create(job, {});
  REQUIRE(created.ok());
  std::unique_ptr<ShardedStore> store = std::move(*created);
  store->SetShardMap(EvenOddMap(3), 0);

  const std::vector<uint64_t> keys = EvenShardKeys(40);
  const auto before = PullRows(*store, keys);
  // Gradient (1, 2, 3, 4) for every row: acc = 0.1 + (1 + 4 + 9 + 16) / 4 = 7.6, one denominator.
  const std::vector<float> g = {1.0f, 2.0f, 3.0f, 4.0f};
  rpc::PushRequest push = MakePush(keys, 0.0f, 1);
  std::vector<float> grads;
  for (size_t i = 0; i < keys.size(); ++i) grads.insert(grads.end(), g.begin(), g.end());
  push.set_grads(
      std::string(reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)));
  uint32_t duplicates = 0;
  REQUIRE(store->Push(push, &duplicates).ok());
  const auto after = PullRows(*store, keys);
  const float denominator = std::sqrt(0.1f + 7.5f) + 1e-8f;
  for (uint64_t k : keys) {
    for (int j = 0; j < 4; ++j) {
      CHECK(after.at(k)[j] == Approx(before.at(k)[j] - 0.5f * g[j] / denominator));
    }
  }
}

TEST_CASE("the status counts each table's traffic, sizes every shard copy and lists hot keys",
          "[server][store][status]") {
  // Every key counted, so that the hot keys' counts are exact.
  ShardedStore::Options options;
  options.hot_keys_sample_every = 1;
  auto created = ShardedStore::Create(TestJob(), options);
  REQUIRE(created.ok());
  std::unique_ptr<ShardedStore> store = std::move(*created);
  store->SetShardMap(EvenOddMap(3), 0);
  // 200 keys, the first one repeated 3000 times: a key every sample finds.
  const std::vector<uint64_t> spread = EvenShardKeys(200);
  std::vector<uint64_t> keys = spread;
  keys.insert(keys.end(), 3000, spread[0]);
  for (int i = 0; i < 4; ++i) PullRows(*store, keys);
  uint32_t duplicates = 0;
  REQUIRE(store->Push(MakePush(keys, 0.5f, 1), &duplicates).ok());
  // A refused request is not counted.
  rpc::PullRequest odd;
  odd.set_table("emb");
  SetKeys(testing::KeysOnShards(1, 5), &odd);
  rpc::PullResponse ignored;
  REQUIRE(store->Pull(odd, &ignored).code() == absl::StatusCode::kFailedPrecondition);

  rpc::ServerStatusRequest request;
  request.set_hot_keys_table("emb");
  request.set_hot_keys_k(3);
  rpc::ServerStatus status;
  REQUIRE(store->FillStatus(request, &status).ok());
  REQUIRE(status.tables_size() == 1);
  const rpc::TableStatus& table = status.tables(0);
  CHECK(table.name() == "emb");
  CHECK(table.optimizer() == "sgd");
  CHECK(table.keys_pulled() == 4 * keys.size());
  CHECK(table.pull_requests() == 4);
  CHECK(table.keys_pushed() == keys.size());
  CHECK(table.push_requests() == 1);
  CHECK(table.rows() == 200);
  CHECK(table.primary_rows() == 200);  // no replicas here
  CHECK(table.primary_bytes() == table.bytes());
  CHECK(table.bytes() > 200 * 4 * sizeof(float));
  // A size for every shard this server holds (the even ones), summing to the table's.
  REQUIRE(status.shard_sizes_size() == static_cast<int>(kShards / 2));
  uint64_t rows = 0, bytes = 0;
  for (const rpc::ShardSize& size : status.shard_sizes()) {
    CHECK(size.shard() % 2 == 0);
    CHECK(size.copy() == rpc::ShardSize::PRIMARY);
    rows += size.rows();
    bytes += size.bytes();
  }
  CHECK(rows == table.rows());
  CHECK(bytes == table.bytes());
  // The repeated key first each way, counted exactly (3001 times a request).
  CHECK(status.hot_keys_table() == "emb");
  CHECK(status.hot_keys_sample_every() == 1);
  REQUIRE(status.hot_pulled_size() == 3);
  REQUIRE(status.hot_pushed_size() == 3);
  CHECK(status.hot_pulled(0).id() == spread[0]);
  CHECK(status.hot_pulled(0).count() == 4 * 3001);
  CHECK(status.hot_pulled(0).error() == 0);
  CHECK(status.hot_pulled(1).count() == 4);
  CHECK(status.hot_pushed(0).id() == spread[0]);
  CHECK(status.hot_pushed(0).count() == 3001);

  SECTION("k defaults to 10 and is at most the sketch's capacity; the table must exist") {
    rpc::ServerStatusRequest ten;
    ten.set_hot_keys_table("emb");
    rpc::ServerStatus more;
    REQUIRE(store->FillStatus(ten, &more).ok());
    CHECK(more.hot_pulled_size() == 10);
    rpc::ServerStatusRequest too_many = ten;
    too_many.set_hot_keys_k(HotKeys::kDefaultCapacity + 1);
    rpc::ServerStatus refused;
    CHECK(store->FillStatus(too_many, &refused).code() == absl::StatusCode::kInvalidArgument);
    CHECK(refused.tables_size() == 0);
    rpc::ServerStatusRequest unknown;
    unknown.set_hot_keys_table("nope");
    CHECK(store->FillStatus(unknown, &refused).code() == absl::StatusCode::kNotFound);
    // Without a table, no hot keys.
    rpc::ServerStatus plain;
    store->FillStatus(&plain);
    CHECK(plain.hot_keys_table().empty());
    CHECK(plain.hot_pulled_size() == 0);
    CHECK(plain.tables(0).keys_pulled() == 4 * keys.size());
  }
  SECTION("by default keys are sampled, 1 in 128, each weighing 128") {
    auto sampled = ServingStore();
    for (int i = 0; i < 4; ++i) PullRows(*sampled, keys);
    rpc::ServerStatus s;
    REQUIRE(sampled->FillStatus(request, &s).ok());
    CHECK(s.hot_keys_sample_every() == 128);
    REQUIRE(s.hot_pulled_size() >= 1);
    CHECK(s.hot_pulled(0).id() == spread[0]);
    CHECK(s.hot_pulled(0).count() % 128 == 0);
    CHECK(s.hot_pulled(0).count() > 4 * 3001 * 7 / 10);
    CHECK(s.hot_pulled(0).count() < 4 * 3001 * 13 / 10);
  }
}

TEST_CASE("a large request served by the lookup threads gives the serial path's results",
          "[server][store]") {
  ShardedStore::Options serial_options;
  ShardedStore::Options parallel_options;
  parallel_options.lookup_threads = GENERATE(1, 3);
  parallel_options.parallel_min_keys = GENERATE(1u, 40u);
  auto serial = ShardedStore::Create(TestJob(), serial_options);
  auto parallel = ShardedStore::Create(TestJob(), parallel_options);
  REQUIRE(serial.ok());
  REQUIRE(parallel.ok());
  (*serial)->SetShardMap(EvenOddMap(3), 0);
  (*parallel)->SetShardMap(EvenOddMap(3), 0);
  std::vector<uint64_t> keys = EvenShardKeys(400);
  keys.insert(keys.end(), keys.begin(), keys.begin() + 50);  // some twice in one push
  REQUIRE(PullRows(**parallel, keys) == PullRows(**serial, keys));
  for (uint64_t sequence : {1, 2, 2}) {  // the last one a retry: every shard's part a duplicate
    uint32_t serial_duplicates = 0;
    uint32_t parallel_duplicates = 0;
    std::vector<std::pair<uint32_t, uint64_t>> serial_at;
    std::vector<std::pair<uint32_t, uint64_t>> parallel_at;
    REQUIRE((*serial)
                ->Push(MakePush(keys, 0.25f * sequence, sequence), &serial_duplicates, nullptr,
                       &serial_at)
                .ok());
    REQUIRE((*parallel)
                ->Push(MakePush(keys, 0.25f * sequence, sequence), &parallel_duplicates, nullptr,
                       &parallel_at)
                .ok());
    CHECK(parallel_duplicates == serial_duplicates);
    CHECK(parallel_at == serial_at);
  }
  CHECK(PullRows(**parallel, keys) == PullRows(**serial, keys));
}

TEST_CASE("a retried push is applied exactly once", "[server][store]") {
  auto store = ServingStore();
  const std::vector<uint64_t> keys = EvenShardKeys(20);
  const auto before = PullRows(*store, keys);
  uint32_t duplicates = 0;
  REQUIRE(store->Push(MakePush(keys, 1.0f, 5), &duplicates).ok());
  REQUIRE(store->Push(MakePush(keys, 1.0f, 5), &duplicates).ok());
  CHECK(duplicates == keys.size());
  // Out of order: 4 arrives after 5 and is still applied once.
  REQUIRE(store->Push(MakePush(keys, 1.0f, 4), &duplicates).ok());
  CHECK(duplicates == 0);
  const auto after = PullRows(*store, keys);
  for (uint64_t k : keys) CHECK(after.at(k)[0] == before.at(k)[0] - 0.5f * 2.0f);
}

TEST_CASE("bad requests get specific errors and change nothing", "[server][store]") {
  auto store = ServingStore();
  const std::vector<uint64_t> keys = EvenShardKeys(10);
  const auto before = PullRows(*store, keys);
  uint32_t duplicates = 0;

  SECTION("unknown table") {
    rpc::PullRequest pull;
    pull.set_table("nope");
    rpc::PullResponse response;
    const absl::Status status = store->Pull(pull, &response);
    CHECK(status.code() == absl::StatusCode::kNotFound);
    CHECK(absl::StrContains(status.message(), "unknown table \"nope\""));
  }
  SECTION("gradient length disagrees with keys x dim") {
    rpc::PushRequest push = MakePush(keys, 1.0f, 1);
    push.mutable_grads()->resize(push.grads().size() - 4);
    const absl::Status status = store->Push(push, &duplicates);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "gradients are"));
  }
  SECTION("keys not a multiple of 8 bytes") {
    rpc::PullRequest pull;
    pull.set_table("emb");
    SetKeys(keys, &pull);
    pull.mutable_keys()->push_back('x');
    rpc::PullResponse response;
    CHECK(store->Pull(pull, &response).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("runs that do not add up") {
    rpc::PullRequest pull;
    pull.set_table("emb");
    SetKeys(keys, &pull);
    pull.mutable_runs(0)->set_count(pull.runs(0).count() + 1);
    rpc::PullResponse response;
    const absl::Status status = store->Pull(pull, &response);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "shard runs cover"));
  }
  SECTION("a key in the wrong shard's run") {
    rpc::PullRequest pull;
    pull.set_table("emb");
    SetKeys(keys, &pull);
    // Claim the first run is shard 0 or 2, whichever it is not.
    pull.mutable_runs(0)->set_shard(pull.runs(0).shard() == 0 ? 2 : 0);
    rpc::PullResponse response;
    const absl::Status status = store->Pull(pull, &response);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "belongs to shard"));
  }
  SECTION("NaN or Inf anywhere in a push: nothing applied") {
    const float bad =
        GENERATE(std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                 -std::numeric_limits<float>::infinity());
    rpc::PushRequest push = MakePush(keys, 1.0f, 1);
    float* g = reinterpret_cast<float*>(push.mutable_grads()->data());
    g[push.grads().size() / sizeof(float) - 1] = bad;  // the very last gradient
    const absl::Status status = store->Push(push, &duplicates);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "NaN or Inf"));
  }
  SECTION("a shard this server does not serve") {
    rpc::PullRequest pull;
    pull.set_table("emb");
    const uint64_t table = NameHash("emb");
    uint64_t odd = 0;
    while (ShardOf(table, odd, kShards) % 2 == 0) ++odd;
    SetKeys({odd}, &pull);
    rpc::PullResponse response;
    const absl::Status status = store->Pull(pull, &response);
    CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(absl::StrContains(status.message(), "shard map version 3"));
  }
  SECTION("more keys than a response may carry") {
    // 1 MiB limit / 16 bytes per row: 65536 rows fit, 70000 do not.
    const std::vector<uint64_t> many = EvenShardKeys(70000);
    rpc::PullRequest pull;
    pull.set_table("emb");
    SetKeys(many, &pull);
    rpc::PullResponse response;
    CHECK(store->Pull(pull, &response).code() == absl::StatusCode::kResourceExhausted);
  }
  SECTION("a push without a sequence") {
    CHECK(store->Push(MakePush(keys, 1.0f, 0), &duplicates).code() ==
          absl::StatusCode::kInvalidArgument);
  }
  SECTION("a run naming a shard outside the job's") {
    rpc::PullRequest pull;
    pull.set_table("emb");
    SetKeys(keys, &pull);
    pull.mutable_runs(0)->set_shard(kShards);
    rpc::PullResponse response;
    const absl::Status status = store->Pull(pull, &response);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "out of range"));
  }
  CHECK(PullRows(*store, keys) == before);
}

// The rules proto/ps.proto states for RequestHeader.sequence (ApplyWindow::kWindow = 1024).
TEST_CASE("sequences: repeats are duplicates, gaps are fine, more than the window below is refused",
          "[server][store]") {
  auto store = ServingStore();
  const std::vector<uint64_t> keys = EvenShardKeys(6);
  const auto before = PullRows(*store, keys);
  uint32_t duplicates = 0;
  REQUIRE(store->Push(MakePush(keys, 1.0f, 10), &duplicates).ok());
  // A gap: 11 to 2009 never arrive; 2010 is applied.
  REQUIRE(store->Push(MakePush(keys, 1.0f, 2010), &duplicates).ok());
  CHECK(duplicates == 0);
  // A repeat: acknowledged, counted, not applied.
  REQUIRE(store->Push(MakePush(keys, 1.0f, 2010), &duplicates).ok());
  CHECK(duplicates == keys.size());
  // Within the window below the newest (2010 - 1024 = 986 is its oldest): applied once.
  REQUIRE(store->Push(MakePush(keys, 1.0f, 986), &duplicates).ok());
  CHECK(duplicates == 0);
  REQUIRE(store->Push(MakePush(keys, 1.0f, 986), &duplicates).ok());
  CHECK(duplicates == keys.size());
  // More than the window below: the shards cannot tell, and refuse.
  const absl::Status old = store->Push(MakePush(keys, 1.0f, 985), &duplicates);
  CHECK(old.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(old.message(), "push sequence 985 of worker 7 is more than 1024 below"));
  CHECK(store->Push(MakePush(keys, 1.0f, 10), &duplicates).code() ==
        absl::StatusCode::kInvalidArgument);
  // Applied: 10, 2010 and 986, three SGD steps of 0.5.
  const auto after = PullRows(*store, keys);
  for (uint64_t k : keys) CHECK(after.at(k)[0] == Approx(before.at(k)[0] - 3 * 0.5f));
}

TEST_CASE("requests before the shard map are refused as retryable", "[server][store]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  rpc::PullRequest pull;
  pull.set_table("emb");
  SetKeys(EvenShardKeys(3), &pull);
  rpc::PullResponse response;
  CHECK((*store)->Pull(pull, &response).code() == absl::StatusCode::kUnavailable);
  CHECK((*store)->map_version() == 0);
}

TEST_CASE("a pull into the caller's memory writes the rows of a pull into a response",
          "[server][store]") {
  auto store = ServingStore();
  const std::vector<uint64_t> keys = EvenShardKeys(50);
  rpc::PullRequest request;
  request.set_table("emb");
  SetKeys(keys, &request);
  int calls = 0;
  std::vector<float> rows;
  REQUIRE(store
              ->Pull(request,
                     [&](size_t num_keys, uint32_t dim) {
                       ++calls;
                       CHECK(num_keys == keys.size());
                       CHECK(dim == 4);
                       rows.assign(num_keys * dim, std::nanf(""));
                       return rows.data();
                     })
              .ok());
  CHECK(calls == 1);
  rpc::PullResponse response;
  REQUIRE(store->Pull(request, &response).ok());
  REQUIRE(response.values().size() == rows.size() * sizeof(float));
  CHECK(std::memcmp(response.values().data(), rows.data(), response.values().size()) == 0);

  // Errors are found before anything is allocated.
  rpc::PullRequest unknown = request;
  unknown.set_table("nope");
  rpc::PullRequest odd_shard;
  odd_shard.set_table("emb");
  odd_shard.set_keys(std::string(8, '\0'));
  odd_shard.add_runs()->set_shard(1);
  odd_shard.mutable_runs(0)->set_count(1);
  for (const rpc::PullRequest* bad : {&unknown, &odd_shard}) {
    const absl::Status status = store->Pull(*bad, [&](size_t, uint32_t) -> float* {
      ++calls;
      return nullptr;
    });
    CHECK(!status.ok());
  }
  CHECK(calls == 1);
}

TEST_CASE("dense tensors are chunked over the served shards", "[server][store]") {
  config::Job job = TestJob();
  job.mutable_cluster()->set_dense_chunk_floats(4);
  auto created = ShardedStore::Create(job, {});
  REQUIRE(created.ok());
  ShardedStore& store = **created;
  rpc::ShardMap all = EvenOddMap(1);
  for (auto& a : *all.mutable_shards()) a.set_primary(0);
  store.SetShardMap(all, 0);

  rpc::PushDenseRequest push;
  push.set_name("mlp.w");
  push.set_total_floats(6);
  std::vector<float> c0 = {1, 2, 3, 4};
  std::vector<float> c1 = {5, 6};
  auto* chunk = push.add_chunks();
  chunk->set_chunk(0);
  chunk->set_values(std::string(reinterpret_cast<char*>(c0.data()), 16));
  chunk = push.add_chunks();
  chunk->set_chunk(1);
  chunk->set_values(std::string(reinterpret_cast<char*>(c1.data()), 8));
  REQUIRE(store.PushDense(push).ok());

  // A gradient step with the default dense optimizer (sgd, lr 0.01). Chunk c is admitted once as
  // (worker_id, sequence + c): this push takes sequences 20 and 21, and its retry applies nothing.
  push.set_kind(rpc::PushDenseRequest::GRADIENT);
  push.mutable_header()->set_worker_id(3);
  push.mutable_header()->set_sequence(20);
  REQUIRE(store.PushDense(push).ok());
  REQUIRE(store.PushDense(push).ok());

  // Each section leaves the values as they are.
  SECTION("a gradient without a sequence is refused") {
    rpc::PushDenseRequest bad = push;
    bad.mutable_header()->set_sequence(0);
    const absl::Status status = store.PushDense(bad);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "without a sequence number"));
  }
  SECTION("a malformed chunk anywhere: nothing applied") {
    rpc::PushDenseRequest bad = push;
    bad.mutable_header()->set_sequence(100);
    SECTION("a short chunk") { bad.mutable_chunks(1)->mutable_values()->resize(4); }
    // server_request_fuzz: an empty chunk's floats were copied with memcpy into a null pointer.
    SECTION("an empty chunk, copied without memcpy into an empty vector's null data") {
      bad.mutable_chunks(1)->clear_values();
    }
    SECTION("torn floats") { bad.mutable_chunks(1)->mutable_values()->push_back('x'); }
    SECTION("a chunk twice") { *bad.add_chunks() = bad.chunks(1); }
    SECTION("a chunk beyond the tensor") { bad.mutable_chunks(1)->set_chunk(2); }
    SECTION("another total") { bad.set_total_floats(7); }
    const absl::Status status = store.PushDense(bad);
    INFO(status.message());
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "\"mlp.w\""));
  }
  SECTION("a chunk's sequence more than the window below the newest is refused") {
    rpc::PushDenseRequest zeros = push;  // a zero gradient: sgd changes nothing
    zeros.mutable_header()->set_sequence(5000);
    zeros.mutable_chunks(0)->set_values(std::string(16, '\0'));
    zeros.mutable_chunks(1)->set_values(std::string(8, '\0'));
    REQUIRE(store.PushDense(zeros).ok());
    zeros.mutable_header()->set_sequence(30);  // 5000 - 30 > 1024
    const absl::Status status = store.PushDense(zeros);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), "dense push sequence 30 of worker 3"));
    CHECK(absl::StrContains(status.message(), "more than 1024 below"));
  }

  rpc::PullDenseRequest pull;
  pull.set_name("mlp.w");
  pull.add_chunks(0);
  pull.add_chunks(1);
  rpc::PullDenseResponse response;
  REQUIRE(store.PullDense(pull, &response).ok());
  REQUIRE(response.chunks_size() == 2);
  const float* v = reinterpret_cast<const float*>(response.chunks(1).values().data());
  CHECK(v[0] == Approx(5 - 0.01 * 5));
  CHECK(v[1] == Approx(6 - 0.01 * 6));

  pull.set_name("nope");
  response.Clear();
  CHECK(store.PullDense(pull, &response).code() == absl::StatusCode::kNotFound);
}

// A sync job: 2 workers (quorum as given), adagrad so that "summed and applied once" differs from
// "applied one after the other".
config::Job SyncJob(float quorum, uint32_t timeout_ms = 10000, uint32_t workers = 2) {
  absl::StatusOr<config::Job> job =
      ParseJob(absl::StrFormat(R"pb(
                                 tables {
                                   name: "emb"
                                   dim: 4
                                   initializer { kind: UNIFORM low: -1 high: 1 }
                                   optimizer { type: "adagrad" learning_rate: 0.5 }
                                 }
                                 training { mode: SYNC sync_quorum: %f sync_timeout_ms: %d }
                                 cluster { num_shards: 8 num_servers: 2 num_workers: %d }
                               )pb",
                               quorum, timeout_ms, workers),
               "sync.pbtxt");
  REQUIRE(job.ok());
  return *job;
}

std::unique_ptr<ShardedStore> ServingSyncStore(const config::Job& job) {
  auto store = ShardedStore::Create(job, {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  return std::move(*store);
}

rpc::PushRequest StepPush(const std::vector<uint64_t>& keys, float grad, uint32_t worker,
                          int64_t step) {
  rpc::PushRequest push = MakePush(keys, grad, /*sequence=*/step + 1);
  push.mutable_header()->set_worker_id(worker);
  push.mutable_header()->set_clock(step);
  return push;
}

TEST_CASE("sync mode sums a step's pushes and applies them once, when every worker ended it",
          "[server][store][sync]") {
  auto store = ServingSyncStore(SyncJob(1.0f));
  const std::vector<uint64_t> keys = EvenShardKeys(30);
  const auto before = PullRows(*store, keys);
  uint32_t duplicates = 0;
  REQUIRE(store->Push(StepPush(keys, 1.0f, 1, 0), &duplicates).ok());
  REQUIRE(store->Push(StepPush(keys, 3.0f, 2, 0), &duplicates).ok());
  CHECK(PullRows(*store, keys) == before);  // nothing applied before the step ends

  absl::Notification step0_applied;
  store->RunWhenApplied(0, [&](absl::Status s) {
    CHECK(s.ok());
    step0_applied.Notify();
  });
  CHECK(*store->EndStep(1, 0) == -1);
  CHECK_FALSE(step0_applied.HasBeenNotified());
  CHECK(PullRows(*store, keys) == before);
  CHECK(*store->EndStep(2, 0) == 0);
  CHECK(step0_applied.HasBeenNotified());

  // One adagrad step with the summed gradient 4: acc = 0.1 + 16, w -= 0.5 * 4 / sqrt(acc).
  const auto after = PullRows(*store, keys);
  const float expected_delta = 0.5f * 4.0f / (std::sqrt(0.1f + 16.0f) + 1e-8f);
  for (uint64_t k : keys) {
    for (int j = 0; j < 4; ++j) CHECK(after.at(k)[j] == Approx(before.at(k)[j] - expected_delta));
  }
  // Ending an applied step again is a no-op; a future step is refused.
  CHECK(*store->EndStep(1, 0) == 0);
  CHECK(store->EndStep(1, 5).status().code() == absl::StatusCode::kUnavailable);
  // A step end counts a worker: it needs the worker's id.
  CHECK(store->EndStep(0, 1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(store->Push(StepPush(keys, 1.0f, 1, 7), &duplicates).code() ==
        absl::StatusCode::kUnavailable);
  CHECK(store->Push(StepPush(keys, 1.0f, 1, -1), &duplicates).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("sync mode with a quorum drops and counts a straggler's late push",
          "[server][store][sync]") {
  auto store = ServingSyncStore(SyncJob(0.5f));
  const std::vector<uint64_t> keys = EvenShardKeys(10);
  const auto before = PullRows(*store, keys);
  uint32_t duplicates = 0, late = 0;
  REQUIRE(store->Push(StepPush(keys, 1.0f, 1, 0), &duplicates, &late).ok());
  CHECK(*store->EndStep(1, 0) == 0);  // 1 of 2 workers is the quorum
  // The straggler's push for step 0 arrives after it was applied: dropped and counted.
  REQUIRE(store->Push(StepPush(keys, 100.0f, 2, 0), &duplicates, &late).ok());
  CHECK(late == keys.size());
  const auto after = PullRows(*store, keys);
  const float expected_delta = 0.5f * 1.0f / (std::sqrt(0.1f + 1.0f) + 1e-8f);
  for (uint64_t k : keys) CHECK(after.at(k)[0] == Approx(before.at(k)[0] - expected_delta));
  rpc::ServerStatus status;
  store->FillStatus(&status);
  CHECK(status.applied_step() == 0);
  CHECK(status.late_pushes_dropped() == 1);
  CHECK(status.late_keys_dropped() == keys.size());
}

// A straggler's pull for step t passes the check at its arrival, waits for step t - 1, and is
// read later: if the quorum applied step t in between, the read used to return rows with step
// t's pushes in them. The store now checks the step under the lock it reads with.
TEST_CASE("a pull for a step the quorum applied after the pull arrived is refused",
          "[server][store][sync]") {
  auto store = ServingSyncStore(SyncJob(0.5f));
  const std::vector<uint64_t> keys = EvenShardKeys(10);
  const auto before = PullRows(*store, keys);
  rpc::PullRequest pull;
  pull.set_table("emb");
  pull.mutable_header()->set_worker_id(2);
  pull.mutable_header()->set_clock(0);
  SetKeys(keys, &pull);
  REQUIRE(store->CheckPullStep(0).ok());  // the straggler's pull of step 0 arrives

  uint32_t duplicates = 0;
  REQUIRE(store->Push(StepPush(keys, 1.0f, 1, 0), &duplicates).ok());
  CHECK(*store->EndStep(1, 0) == 0);  // the quorum (1 of 2) applies step 0

  rpc::PullResponse response;
  const absl::Status status = store->Pull(pull, &response);
  CHECK(status.code() == absl::StatusCode::kAborted);
  CHECK(response.values().empty());
  CHECK(PullRows(*store, keys) != before);  // step 0 is in the rows a step-1 pull sees
  pull.mutable_header()->set_clock(1);
  CHECK(store->Pull(pull, &response).ok());
}

TEST_CASE("sync mode with a quorum applies a step when its timeout passes",
          "[server][store][sync]") {
  // 3 workers, quorum 0.67: 2 must end the step, or 50 ms after the first did.
  auto store = ServingSyncStore(SyncJob(0.67f, 50, 3));
  const std::vector<uint64_t> keys = EvenShardKeys(5);
  const auto before = PullRows(*store, keys);
  uint32_t duplicates = 0;
  REQUIRE(store->Push(StepPush(keys, 1.0f, 1, 0), &duplicates).ok());
  absl::Notification applied;
  absl::Status applied_status;  // checked here: Catch2's assertions are not thread-safe
  store->RunWhenApplied(0, [&](absl::Status s) {
    applied_status = s;
    applied.Notify();
  });
  CHECK(*store->EndStep(1, 0) == -1);
  REQUIRE(applied.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(applied_status.ok());
  CHECK(PullRows(*store, keys) != before);
}

TEST_CASE("servers report how many steps of pushes a pull might be missing",
          "[server][store][clocks]") {
  config::Job job = TestJob();  // async
  job.mutable_cluster()->set_num_workers(2);
  auto created = ShardedStore::Create(job, {});
  REQUIRE(created.ok());
  ShardedStore& store = **created;
  store.SetShardMap(EvenOddMap(1), 0);
  const std::vector<uint64_t> keys = EvenShardKeys(3);
  auto pull_at = [&](int64_t step) {
    rpc::PullRequest request;
    request.set_table("emb");
    request.mutable_header()->set_clock(step);
    SetKeys(keys, &request);
    rpc::PullResponse response;
    REQUIRE(store.Pull(request, &response).ok());
  };
  uint32_t duplicates = 0;
  // Worker 1 has pushed steps 0..4, worker 2 only step 0: a pull at step 5 might miss steps 1..4
  // of worker 2.
  for (int64_t step = 0; step < 5; ++step) {
    rpc::PushRequest push = MakePush(keys, 0.0f, step + 1);
    push.mutable_header()->set_worker_id(1);
    push.mutable_header()->set_clock(step);
    REQUIRE(store.Push(push, &duplicates).ok());
  }
  rpc::PushRequest push = MakePush(keys, 0.0f, 1);
  push.mutable_header()->set_worker_id(2);
  push.mutable_header()->set_clock(0);
  REQUIRE(store.Push(push, &duplicates).ok());
  pull_at(5);
  rpc::ServerStatus status;
  store.FillStatus(&status);
  CHECK(status.step_pulls() == 1);
  CHECK(status.last_pull_oldest_missing_step() == 1);
  CHECK(status.max_pull_staleness() == 4);
  // A pull at step 1 misses nothing older than itself.
  pull_at(1);
  store.FillStatus(&status);
  CHECK(status.step_pulls() == 2);
  CHECK(status.mean_pull_staleness() == Approx(2.0));
}

TEST_CASE("waits for a step end with UNAVAILABLE when the store shuts down",
          "[server][store][sync]") {
  auto store = ServingSyncStore(SyncJob(1.0f));
  absl::Status seen = absl::OkStatus();
  store->RunWhenApplied(3, [&](absl::Status s) { seen = s; });
  store->Shutdown();
  CHECK(seen.code() == absl::StatusCode::kUnavailable);
}

// Delivers a primary's records, on a thread of its own as gRPC would, to the stores registered
// by address.
class LoopbackTransport : public ReplicationTransport {
 public:
  LoopbackTransport() : thread_([this] { Run(); }) {}
  ~LoopbackTransport() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  void Send(const std::string& address, grpc::ByteBuffer request,
            std::function<void(absl::StatusOr<rpc::ReplicateResponse>)> done) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back({address, std::move(request), std::move(done)});
  }

  void Set(const std::string& address, ShardedStore* store) {
    absl::MutexLock lock(&mu_);
    if (store == nullptr) {
      stores_.erase(address);
    } else {
      stores_[address] = store;
    }
  }

 private:
  struct Call {
    std::string address;
    grpc::ByteBuffer request;
    std::function<void(absl::StatusOr<rpc::ReplicateResponse>)> done;
  };

  void Run() {
    while (true) {
      Call call;
      ShardedStore* store = nullptr;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || !calls_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (calls_.empty()) return;
        call = std::move(calls_.front());
        calls_.pop_front();
        const auto it = stores_.find(call.address);
        if (it != stores_.end()) store = it->second;
      }
      if (store == nullptr) {
        call.done(absl::UnavailableError(absl::StrCat(call.address, " is down")));
        continue;
      }
      // As the service does: the bytes read, then the records applied.
      ReplicateRequestReader reader;
      const absl::Status read = reader.Parse(call.request);
      if (!read.ok()) {
        call.done(read);
        continue;
      }
      rpc::ReplicateResponse response;
      store->ApplyReplicated(reader.records(), &response);
      call.done(std::move(response));
    }
  }

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ShardedStore*> stores_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Servers 0 and 1 ("s0", "s1"); shard s has its primary on s % 2 and a replica on the other,
// except the shards whose primary `dead` was: promoted to the replica (term 1), without copies.
rpc::ShardMap ReplicatedMap(uint64_t version, int dead = -1) {
  rpc::ShardMap map;
  map.set_version(version);
  map.set_num_shards(kShards);
  for (uint32_t id = 0; id < 2; ++id) {
    rpc::ServerInfo* server = map.add_servers();
    server->set_server_id(id);
    server->set_address(absl::StrCat("s", id));
    server->set_alive(static_cast<int>(id) != dead);
  }
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    rpc::ShardAssignment* a = map.add_shards();
    a->set_shard(shard);
    const uint32_t primary = shard % 2;
    if (static_cast<int>(primary) == dead) {
      a->set_primary(1 - primary);
      a->set_primary_term(1);
    } else {
      a->set_primary(primary);
      if (dead < 0) a->add_replicas(1 - primary);
    }
  }
  return map;
}

struct ReplicatedPair {
  explicit ReplicatedPair(config::Job job) {
    job.mutable_cluster()->set_replication_factor(2);
    for (uint32_t id = 0; id < 2; ++id) {
      ShardedStore::Options options;
      options.replication_transport = &transport;
      options.server_id = id;
      auto store = ShardedStore::Create(job, options);
      REQUIRE(store.ok());
      stores[id] = std::move(*store);
      transport.Set(absl::StrCat("s", id), stores[id].get());
    }
    for (uint32_t id = 0; id < 2; ++id) stores[id]->SetShardMap(ReplicatedMap(1), id);
  }

  // Pushes to server `id` and waits until the push may be acknowledged.
  void Push(uint32_t id, const rpc::PushRequest& push) {
    uint32_t duplicates = 0;
    std::vector<std::pair<uint32_t, uint64_t>> at;
    REQUIRE(stores[id]->Push(push, &duplicates, nullptr, &at).ok());
    absl::Notification replicated;
    absl::Status status;  // checked here: Catch2's assertions are not thread-safe
    stores[id]->WhenReplicated(at, [&](absl::Status s) {
      status = s;
      replicated.Notify();
    });
    REQUIRE(replicated.WaitForNotificationWithTimeout(absl::Seconds(10)));
    CHECK(status.ok());
  }

  ~ReplicatedPair() {
    for (uint32_t id = 0; id < 2; ++id) transport.Set(absl::StrCat("s", id), nullptr);
    for (auto& store : stores) store->Shutdown();
  }

  // Server 0 dies: server 1 takes over its shards.
  void KillServer0() {
    transport.Set("s0", nullptr);
    stores[1]->SetShardMap(ReplicatedMap(2, /*dead=*/0), 1);
  }

  LoopbackTransport transport;
  std::unique_ptr<ShardedStore> stores[2];
};

TEST_CASE("a replica holds its primary's rows and takes over with them",
          "[server][store][replication]") {
  ReplicatedPair pair(TestJob());
  const std::vector<uint64_t> keys = EvenShardKeys(40);
  pair.Push(0, MakePush(keys, 1.0f, 1));
  pair.Push(0, MakePush(keys, -0.25f, 2));
  const auto rows = PullRows(*pair.stores[0], keys);
  // The replica serves nothing while it is one.
  rpc::PullRequest pull;
  pull.set_table("emb");
  SetKeys(keys, &pull);
  rpc::PullResponse response;
  CHECK(pair.stores[1]->Pull(pull, &response).code() == absl::StatusCode::kFailedPrecondition);
  // Its heartbeats report the primary's sequence for the even shards.
  for (const rpc::ShardProgress& p : pair.stores[1]->Progress()) {
    if (p.shard() % 2 == 0) CHECK(p.applied_sequence() > 0);
  }
  pair.KillServer0();
  CHECK(PullRows(*pair.stores[1], keys) == rows);
  // A retry of a push the old primary applied is recognised by the new one.
  uint32_t duplicates = 0;
  REQUIRE(pair.stores[1]->Push(MakePush(keys, 1.0f, 2), &duplicates).ok());
  CHECK(duplicates == keys.size());
  CHECK(PullRows(*pair.stores[1], keys) == rows);
}

TEST_CASE("with read_from_replicas a replica answers pulls, creating no row, and takes no push",
          "[server][store][replication]") {
  config::Job job = TestJob();
  job.mutable_cluster()->set_read_from_replicas(true);
  ReplicatedPair pair(job);
  const std::vector<uint64_t> keys = EvenShardKeys(30);
  pair.Push(0, MakePush(keys, 0.5f, 1));
  const auto rows = PullRows(*pair.stores[0], keys);
  const auto rows_held = [&](ShardedStore& store) {
    rpc::ServerStatus status;
    store.FillStatus(&status);
    return status.tables(0).rows();
  };
  const uint64_t held = rows_held(*pair.stores[1]);
  CHECK(PullRows(*pair.stores[1], keys) == rows);
  // Keys never pushed read as their initial rows, which the replica does not create.
  const std::vector<uint64_t> fresh = testing::KeysOnShards(0, 60);
  const std::vector<uint64_t> unseen(fresh.begin() + 30, fresh.end());
  CHECK(PullRows(*pair.stores[1], unseen) == PullRows(*pair.stores[0], unseen));
  CHECK(rows_held(*pair.stores[1]) == held);
  rpc::ServerStatus status;
  pair.stores[1]->FillStatus(&status);
  CHECK(status.replica_pulls() == 2);
  uint32_t duplicates = 0;
  CHECK(pair.stores[1]->Push(MakePush(keys, 1.0f, 2), &duplicates).code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a promoted replica completes the sync step its primary did not send",
          "[server][store][replication][sync]") {
  ReplicatedPair pair(SyncJob(1.0f));
  // The reference: one store that sees every push and step end.
  auto reference = ServingSyncStore(SyncJob(1.0f));
  const std::vector<uint64_t> keys = EvenShardKeys(25);
  uint32_t duplicates = 0;
  for (int64_t step = 0; step < 2; ++step) {
    for (uint32_t worker : {1u, 2u}) {
      const rpc::PushRequest push = StepPush(keys, 0.5f * worker + step, worker, step);
      pair.Push(0, push);
      REQUIRE(reference->Push(push, &duplicates).ok());
    }
    for (uint32_t worker : {1u, 2u}) {
      REQUIRE(reference->EndStep(worker, step).ok());
      REQUIRE(pair.stores[1]->EndStep(worker, step).ok());
      // Server 0 dies before the workers end step 1 there: it never applies it.
      if (step == 0) REQUIRE(pair.stores[0]->EndStep(worker, step).ok());
    }
  }
  pair.KillServer0();
  CHECK(PullRows(*pair.stores[1], keys) == PullRows(*reference, keys));
}

// The cuts of `shards` (primaries of `store` in map `map_version`) as a checkpoint takes them
// (sync: at boundary `step`), rows read.
std::vector<ShardCut> CutShards(ShardedStore& store, const std::vector<uint32_t>& shards,
                                uint64_t map_version, int64_t step = -1) {
  REQUIRE(store.BeginCheckpoint(step, shards, map_version).ok());
  std::vector<ShardCut> cuts;
  for (uint32_t s : shards) {
    absl::Duration stall, hold;
    absl::StatusOr<ShardCut> cut = store.TakeCheckpointCut(s, absl::InfiniteFuture(), &stall);
    REQUIRE(cut.ok());
    REQUIRE(store.ReadCheckpointRows(&*cut, &hold).ok());
    cuts.push_back(std::move(cut).value());
  }
  store.EndCheckpoint();
  return cuts;
}

// New shards of `store` restored from `cuts`, for ReplacePrimaries.
ShardedStore::Restored RestoredFrom(const ShardedStore& store, const std::vector<ShardCut>& cuts) {
  ShardedStore::Restored restored;
  for (const ShardCut& cut : cuts) {
    absl::StatusOr<std::unique_ptr<Shard>> shard = store.NewRestoringShard(cut.shard, 0);
    REQUIRE(shard.ok());
    REQUIRE((*shard)->FinishRestore(cut).ok());
    restored.shards.push_back(std::move(shard).value());
  }
  return restored;
}

TEST_CASE("primaries replaced in place are served and snapshotted to their replicas",
          "[server][store][replication][restore]") {
  ReplicatedPair pair(TestJob());
  const std::vector<uint64_t> keys = EvenShardKeys(40);
  pair.Push(0, MakePush(keys, 1.0f, 1));
  const auto kept = PullRows(*pair.stores[0], keys);
  const std::vector<uint32_t> even = {0, 2, 4, 6};
  const std::vector<ShardCut> cuts = CutShards(*pair.stores[0], even, 1);
  pair.Push(0, MakePush(keys, -0.5f, 2));
  REQUIRE(PullRows(*pair.stores[0], keys) != kept);

  // Not the installed map, or not this server's primaries: nothing is replaced.
  CHECK(pair.stores[0]->ReplacePrimaries(2, RestoredFrom(*pair.stores[0], cuts)).code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(pair.stores[1]->ReplacePrimaries(1, RestoredFrom(*pair.stores[1], cuts)).code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(PullRows(*pair.stores[0], keys) != kept);

  REQUIRE(pair.stores[0]->ReplacePrimaries(1, RestoredFrom(*pair.stores[0], cuts)).ok());
  CHECK(PullRows(*pair.stores[0], keys) == kept);
  // A push after it is replicated once the replica has the new shards (a zero gradient changes
  // no row); promoted, the replica serves the restored rows.
  pair.Push(0, MakePush(keys, 0.0f, 3));
  pair.KillServer0();
  CHECK(PullRows(*pair.stores[1], keys) == kept);
}

TEST_CASE("sync primaries are not replaced while a step is under way",
          "[server][store][sync][restore]") {
  auto store = ServingSyncStore(SyncJob(1.0f));
  const std::vector<uint64_t> keys = EvenShardKeys(10);
  const std::vector<ShardCut> cuts = CutShards(*store, {0, 2, 4, 6}, 3, /*step=*/0);
  uint32_t duplicates = 0;
  REQUIRE(store->Push(StepPush(keys, 1.0f, 1, 0), &duplicates).ok());
  CHECK(store->ReplacePrimaries(3, RestoredFrom(*store, cuts)).code() ==
        absl::StatusCode::kFailedPrecondition);
  // Once the step is applied, the store is at rest; the restored shards carry on at its step.
  REQUIRE(store->Push(StepPush(keys, 1.0f, 2, 0), &duplicates).ok());
  REQUIRE(store->EndStep(1, 0).ok());
  REQUIRE(store->EndStep(2, 0).ok());
  REQUIRE(store->ReplacePrimaries(3, RestoredFrom(*store, cuts)).ok());
  for (const rpc::ShardProgress& p : store->Progress()) {
    if (p.shard() % 2 == 0) CHECK(p.applied_step() == 0);
  }
  REQUIRE(store->Push(StepPush(keys, 1.0f, 1, 1), &duplicates).ok());
}

// The rows of table "emb" in cuts, by key.
std::map<uint64_t, std::vector<float>> CutEmbeddings(const std::vector<ShardCut>& cuts) {
  std::map<uint64_t, std::vector<float>> rows;
  for (const ShardCut& cut : cuts) {
    for (const rpc::ShardRecord& r : cut.records) {
      if (!r.has_rows()) continue;
      const size_t n = r.rows().keys().size() / 8;
      const size_t row_floats = r.rows().values().size() / 4 / n;
      for (size_t i = 0; i < n; ++i) {
        uint64_t id;
        std::memcpy(&id, r.rows().keys().data() + 8 * i, 8);
        std::vector<float> row(4);
        std::memcpy(row.data(), r.rows().values().data() + 4 * row_floats * i, 16);
        rows[id] = row;
      }
    }
  }
  return rows;
}

TEST_CASE("a checkpoint cuts each primary shard at its applied sequence", "[server][store]") {
  const std::unique_ptr<ShardedStore> serving = ServingStore();
  ShardedStore& store = *serving;
  const std::vector<uint64_t> keys = EvenShardKeys(40);
  uint32_t duplicates = 0;
  REQUIRE(store.Push(MakePush(keys, 1.0f, 1), &duplicates).ok());
  const auto at_cut = PullRows(store, keys);

  // Only this server's primaries, at the installed map version, one checkpoint at a time.
  CHECK(store.BeginCheckpoint(-1, {0, 1}, 3).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(store.BeginCheckpoint(-1, {0, 2}, 2).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(store.BeginCheckpoint(4, {0, 2}, 3).code() == absl::StatusCode::kInvalidArgument);
  const std::vector<uint32_t> even = {0, 2, 4, 6};
  REQUIRE(store.BeginCheckpoint(-1, even, 3).ok());
  CHECK(store.BeginCheckpoint(-1, even, 3).code() == absl::StatusCode::kFailedPrecondition);
  std::vector<ShardCut> cuts;
  for (uint32_t s : even) {
    absl::Duration stall;
    absl::StatusOr<ShardCut> cut = store.TakeCheckpointCut(s, absl::InfiniteFuture(), &stall);
    REQUIRE(cut.ok());
    CHECK(cut->shard == s);
    CHECK(cut->sequence >= 1);
    cuts.push_back(std::move(cut).value());
  }
  // The rows are read after the cut, as of the cut: a push meanwhile is not in them.
  REQUIRE(store.Push(MakePush(keys, 2.0f, 2), &duplicates).ok());
  CHECK(PullRows(store, keys) != at_cut);
  for (ShardCut& cut : cuts) {
    absl::Duration hold;
    REQUIRE(store.ReadCheckpointRows(&cut, &hold).ok());
    CHECK(cut.rows_to_read == 0);
  }
  absl::Duration stall;
  CHECK(store.TakeCheckpointCut(0, absl::InfiniteFuture(), &stall).status().code() ==
        absl::StatusCode::kNotFound);
  store.EndCheckpoint();
  CHECK(CutEmbeddings(cuts) == at_cut);
  REQUIRE(store.BeginCheckpoint(-1, even, 3).ok());  // the next one may start
  store.EndCheckpoint();
}

TEST_CASE("a checkpoint ended before a cut's rows were read abandons the read", "[server][store]") {
  const std::unique_ptr<ShardedStore> serving = ServingStore();
  ShardedStore& store = *serving;
  const std::vector<uint64_t> keys = EvenShardKeys(40);
  uint32_t duplicates = 0;
  REQUIRE(store.Push(MakePush(keys, 1.0f, 1), &duplicates).ok());
  REQUIRE(store.BeginCheckpoint(-1, {0, 2}, 3).ok());
  absl::Duration stall, hold;
  absl::StatusOr<ShardCut> cut = store.TakeCheckpointCut(0, absl::InfiniteFuture(), &stall);
  REQUIRE(cut.ok());
  store.EndCheckpoint();
  CHECK(store.ReadCheckpointRows(&*cut, &hold).code() == absl::StatusCode::kAborted);
  // A shard that moved away meanwhile: FAILED_PRECONDITION.
  REQUIRE(store.BeginCheckpoint(-1, {0, 2}, 3).ok());
  cut = store.TakeCheckpointCut(2, absl::InfiniteFuture(), &stall);
  REQUIRE(cut.ok());
  rpc::ShardMap moved = EvenOddMap(4);
  moved.mutable_shards(2)->set_primary(1);
  store.SetShardMap(moved, 0);
  CHECK(store.ReadCheckpointRows(&*cut, &hold).code() == absl::StatusCode::kFailedPrecondition);
  store.EndCheckpoint();
}

TEST_CASE("a sync checkpoint cuts every shard at its step boundary", "[server][store][sync]") {
  auto store = ServingSyncStore(SyncJob(1.0f));
  const std::vector<uint64_t> keys = EvenShardKeys(30);
  const std::vector<uint32_t> even = {0, 2, 4, 6};
  uint32_t duplicates = 0;
  // Step 0 is pending: boundary 1 (after step 0) is ahead.
  REQUIRE(store->Push(StepPush(keys, 1.0f, 1, 0), &duplicates).ok());
  REQUIRE(store->BeginCheckpoint(1, even, 3).ok());
  absl::Duration stall;
  // The boundary is not reached yet.
  CHECK(store->TakeCheckpointCut(0, absl::Now() + absl::Milliseconds(1), &stall).status().code() ==
        absl::StatusCode::kDeadlineExceeded);
  REQUIRE(store->Push(StepPush(keys, 3.0f, 2, 0), &duplicates).ok());
  REQUIRE(*store->EndStep(1, 0) == -1);
  REQUIRE(*store->EndStep(2, 0) == 0);
  const auto after_step0 = PullRows(*store, keys);
  // Step 1's pushes arrive and shard 0's rows are cut after them: still the boundary's.
  REQUIRE(store->Push(StepPush(keys, 5.0f, 1, 1), &duplicates).ok());
  std::vector<ShardCut> cuts;
  absl::StatusOr<ShardCut> first = store->TakeCheckpointCut(0, absl::InfiniteFuture(), &stall);
  REQUIRE(first.ok());
  CHECK(first->applied_step == 0);
  cuts.push_back(std::move(first).value());
  // Step 1 is applied before the other shards are taken: their rows were cut before it. Every
  // shard's rows are read after it, as of the boundary.
  REQUIRE(store->Push(StepPush(keys, 5.0f, 2, 1), &duplicates).ok());
  REQUIRE(*store->EndStep(1, 1) == 0);
  REQUIRE(*store->EndStep(2, 1) == 1);
  CHECK(PullRows(*store, keys) != after_step0);
  for (uint32_t s : {2, 4, 6}) {
    absl::StatusOr<ShardCut> cut = store->TakeCheckpointCut(s, absl::InfiniteFuture(), &stall);
    REQUIRE(cut.ok());
    CHECK(cut->applied_step == 0);
    cuts.push_back(std::move(cut).value());
  }
  for (ShardCut& cut : cuts) {
    absl::Duration hold;
    REQUIRE(store->ReadCheckpointRows(&cut, &hold).ok());
  }
  store->EndCheckpoint();
  CHECK(CutEmbeddings(cuts) == after_step0);

  // A boundary whose step has begun is refused.
  REQUIRE(store->Push(StepPush(keys, 1.0f, 1, 2), &duplicates).ok());
  CHECK(store->BeginCheckpoint(2, even, 3).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(store->BeginCheckpoint(1, even, 3).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a restored store serves its checkpoint's shards and resumes at its step",
          "[server][store][sync]") {
  const config::Job job = SyncJob(1.0f);
  auto store = ServingSyncStore(job);
  const std::vector<uint64_t> keys = EvenShardKeys(30);
  const std::vector<uint32_t> even = {0, 2, 4, 6};
  uint32_t duplicates = 0;
  for (int64_t step = 0; step < 2; ++step) {
    REQUIRE(store->Push(StepPush(keys, 1.0f + step, 1, step), &duplicates).ok());
    REQUIRE(store->Push(StepPush(keys, 2.0f, 2, step), &duplicates).ok());
    REQUIRE(store->EndStep(1, step).ok());
    REQUIRE(*store->EndStep(2, step) == step);
  }
  REQUIRE(store->BeginCheckpoint(2, even, 3).ok());
  std::vector<ShardCut> cuts;
  for (uint32_t s : even) {
    absl::Duration stall;
    absl::StatusOr<ShardCut> cut = store->TakeCheckpointCut(s, absl::InfiniteFuture(), &stall);
    REQUIRE(cut.ok());
    absl::Duration hold;
    REQUIRE(store->ReadCheckpointRows(&*cut, &hold).ok());
    cuts.push_back(std::move(cut).value());
  }
  store->EndCheckpoint();
  const auto at_cut = PullRows(*store, keys);

  auto created = ShardedStore::Create(job, {});
  REQUIRE(created.ok());
  ShardedStore& fresh = **created;
  CHECK(fresh.NewPrimaries(EvenOddMap(3), 0) == even);
  // Each shard restored as server_checkpoint.cc does: a restoring shard, then the cut's records.
  auto restore = [&](const std::vector<ShardCut>& from) {
    ShardedStore::Restored restored;
    restored.step = 2;
    for (const ShardCut& cut : from) {
      std::unique_ptr<Shard> shard = fresh.NewRestoringShard(cut.shard, 0).value();
      REQUIRE(shard->FinishRestore(cut).ok());
      restored.shards.push_back(std::move(shard));
    }
    return restored;
  };
  // Not exactly one shard a new primary: refused, nothing installed.
  std::vector<ShardCut> missing = cuts;
  missing.pop_back();
  CHECK(fresh.SetShardMap(EvenOddMap(3), 0, restore(missing)).code() ==
        absl::StatusCode::kInvalidArgument);
  std::vector<ShardCut> foreign = cuts;
  foreign[0].shard = 1;
  for (rpc::ShardRecord& r : foreign[0].records) r.set_shard(1);
  CHECK(fresh.SetShardMap(EvenOddMap(3), 0, restore(foreign)).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(fresh.map_version() == 0);
  CHECK(fresh.NewRestoringShard(8, 0).status().code() == absl::StatusCode::kInvalidArgument);

  REQUIRE(fresh.SetShardMap(EvenOddMap(3), 0, restore(cuts)).ok());
  CHECK(fresh.NewPrimaries(EvenOddMap(3), 0).empty());
  CHECK(PullRows(fresh, keys) == at_cut);
  // Step 2 is the next: a push of step 1 is late, one of step 2 is summed and applied.
  uint32_t late = 0;
  REQUIRE(fresh.Push(StepPush(keys, 1.0f, 1, 1), &duplicates, &late).ok());
  CHECK(late == keys.size());
  for (ShardedStore* s : {store.get(), &fresh}) {
    REQUIRE(s->Push(StepPush(keys, 0.5f, 1, 2), &duplicates).ok());
    REQUIRE(s->Push(StepPush(keys, 0.5f, 2, 2), &duplicates).ok());
    REQUIRE(s->EndStep(1, 2).ok());
    REQUIRE(*s->EndStep(2, 2) == 2);
  }
  CHECK(PullRows(fresh, keys) == PullRows(*store, keys));
}

}  // namespace
}  // namespace server
}  // namespace ps

// Memory-bounded tables on real daemons (issue 35): a ps_coordinator and two ps_servers with a
// memory budget and replication 2, driven through the client library. A stream of far more
// distinct keys than the budget holds stays within it and every pull is answered; admission
// creates rows on no copy before min_count updates and on every copy after, across a kill -9;
// rows idle past their TTL in steps are evicted from every copy and come back as initial rows;
// ps_ctl tables --json shows the counts.
#include <google/protobuf/struct.pb.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "common/job_config.h"
#include "server/storage/embedding_table.h"
#include "tests/testing/daemon.h"
#include "tests/testing/eventually.h"
#include "tests/testing/server_status.h"

namespace ps {
namespace {

// "stream": budgeted only (LRU under the budget); "adm": admission at 3 updates; "ttl": rows
// idle for 50 steps go.
constexpr char kJob[] = R"pb(
name: "bounded"
tables {
  name: "stream"
  dim: 16
  initializer { kind: UNIFORM low: -0.1 high: 0.1 }
  optimizer { type: "adagrad" learning_rate: 0.05 }
  memory_weight: 6
}
tables {
  name: "adm"
  dim: 8
  initializer { kind: NORMAL stddev: 0.05 }
  optimizer { type: "sgd" learning_rate: 0.5 }
  admission { min_count: 3 }
}
tables {
  name: "ttl"
  dim: 4
  initializer { kind: UNIFORM low: -0.1 high: 0.1 }
  optimizer { type: "sgd" learning_rate: 0.5 }
  eviction { ttl_steps: 50 }
}
training { seed: 17 mode: ASYNC }
cluster { num_shards: 8 num_servers: 2 replication_factor: 2 }
)pb";

constexpr int64_t kBudgetMb = 160;

struct Cluster {
  std::unique_ptr<testing::Daemon> coordinator;
  std::vector<std::unique_ptr<testing::Daemon>> servers;
  std::vector<bool> killed = {false, false};
  std::unique_ptr<Client> client;
};

Cluster StartCluster() {
  Cluster cluster;
  auto coordinator = testing::StartCoordinator(kJob, "bounded_job");
  REQUIRE(coordinator.ok());
  cluster.coordinator = std::move(*coordinator);
  for (int i = 0; i < 2; ++i) {
    auto server = testing::Daemon::Start(
        "server/ps_server", {absl::StrCat("--coordinator=", cluster.coordinator->address()),
                             absl::StrCat("--memory_budget_mb=", kBudgetMb)});
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    cluster.servers.push_back(std::move(*server));
  }
  ClientOptions options;
  options.coordinator = cluster.coordinator->address();
  options.connect_timeout = absl::Seconds(30);
  auto client = Client::Connect(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  cluster.client = std::move(*client);
  return cluster;
}

// The table's status on `server`; the server must answer.
rpc::TableStatus TableOf(const testing::Daemon& server, const std::string& table) {
  absl::StatusOr<rpc::ServerStatus> status = testing::ServerStatusOf(server);
  INFO(status.status().ToString());
  REQUIRE(status.ok());
  for (const rpc::TableStatus& t : status->tables()) {
    if (t.name() == table) return t;
  }
  FAIL("no table " << table);
  return {};
}

// Rows of every copy on the live servers.
uint64_t RowsAllCopies(const Cluster& cluster, const std::string& table) {
  uint64_t rows = 0;
  for (size_t i = 0; i < cluster.servers.size(); ++i) {
    if (!cluster.killed[i]) rows += TableOf(*cluster.servers[i], table).rows();
  }
  return rows;
}

// What the table's initializer gives `keys` (the job's seed).
std::vector<float> InitialRows(const std::string& table, const std::vector<uint64_t>& keys) {
  const absl::StatusOr<config::Job> job = ParseJob(kJob, "job");
  REQUIRE(job.ok());
  for (const config::Table& t : job->tables()) {
    if (t.name() != table) continue;
    auto spec = server::TableSpec::Create(t, job->training().seed());
    REQUIRE(spec.ok());
    std::vector<float> rows(keys.size() * t.dim());
    for (size_t i = 0; i < keys.size(); ++i) {
      (*spec)->initializer->Fill(keys[i], t.dim(), rows.data() + i * t.dim());
    }
    return rows;
  }
  FAIL("no table " << table);
  return {};
}

std::vector<float> Pulled(Client& client, const std::string& table,
                          const std::vector<uint64_t>& keys, uint32_t dim) {
  std::vector<float> rows(keys.size() * dim);
  const absl::Status pulled = client.Pull(table, keys, absl::MakeSpan(rows));
  INFO(pulled.ToString());
  REQUIRE(pulled.ok());
  return rows;
}

TEST_CASE("a server under a budget far smaller than the stream stays within it and answers",
          "[integration][bounded]") {
  Cluster cluster = StartCluster();
  Client& client = *cluster.client;
  // 800k distinct keys of dim 16 with Adagrad: about 120 MB of rows on each server (every
  // key has a copy on both), where the budget leaves the table about 70 MB.
  constexpr uint64_t kKeys = 800000;
  constexpr uint64_t kBatch = 20000;
  std::mt19937_64 rng(3);
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> rows(kBatch * 16), grads(kBatch * 16, 0.01f);
  for (uint64_t first = 0; first < kKeys; first += kBatch) {
    for (uint64_t i = 0; i < kBatch; ++i) keys[i] = rng();
    const absl::Status pulled = client.Pull("stream", keys, absl::MakeSpan(rows));
    INFO(pulled.ToString());
    REQUIRE(pulled.ok());
    const absl::Status pushed = client.Push("stream", keys, grads);
    INFO(pushed.ToString());
    REQUIRE(pushed.ok());
  }
  uint64_t evicted = 0;
  for (const auto& server : cluster.servers) {
    absl::StatusOr<rpc::ServerStatus> status = testing::ServerStatusOf(*server);
    REQUIRE(status.ok());
    INFO("server " << status->server_id() << ": resident " << status->resident_bytes()
                   << ", peak " << status->peak_resident_bytes() << ", allowance "
                   << status->memory_allowance_bytes());
    CHECK(status->memory_budget_bytes() == kBudgetMb << 20);
    CHECK(status->peak_resident_bytes() <= status->memory_budget_bytes());
    const rpc::TableStatus& stream = status->tables(0);
    // Every copy within its cap (8 copies on each server).
    CHECK(stream.max_rows_per_copy() > 0);
    CHECK(stream.rows() <= 8 * stream.max_rows_per_copy());
    CHECK(stream.rows() < kKeys);
    evicted += stream.evicted_budget();
  }
  CHECK(evicted > 0);

  // ps_ctl tables --json sums the counters.
  absl::StatusOr<google::protobuf::Struct> parsed =
      testing::CtlTablesJson(cluster.coordinator->address());
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  const auto& tables = parsed->fields().at("tables").list_value();
  REQUIRE(tables.values_size() == 3);
  const auto& stream = tables.values(0).struct_value().fields();
  CHECK(stream.at("name").string_value() == "stream");
  // The sweeper may have gone on evicting since.
  CHECK(stream.at("evicted_budget").number_value() >= static_cast<double>(evicted));
  CHECK(cluster.servers[0]->Terminate(absl::Seconds(30)).ok());
  CHECK(cluster.servers[1]->Terminate(absl::Seconds(30)).ok());
}

TEST_CASE("admission creates rows on no copy below min_count and on every copy at it, "
          "also after a kill -9",
          "[integration][bounded]") {
  Cluster cluster = StartCluster();
  Client& client = *cluster.client;
  std::vector<uint64_t> rare, frequent;
  for (uint64_t i = 0; i < 500; ++i) rare.push_back(i * 0x9E3779B97F4A7C15ull + 1);
  for (uint64_t i = 0; i < 500; ++i) frequent.push_back(i * 0xC2B2AE3D27D4EB4Full + 2);
  const std::vector<float> grads(500 * 8, 0.1f);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(client.Push("adm", rare, grads).ok());
    REQUIRE(client.Push("adm", frequent, grads).ok());
  }
  // Two updates each: nothing anywhere, and a pull answers the initial rows.
  CHECK(RowsAllCopies(cluster, "adm") == 0);
  CHECK(Pulled(client, "adm", rare, 8) == InitialRows("adm", rare));
  // The third update of the frequent ones admits them, on the primary and its replica.
  REQUIRE(client.Push("adm", frequent, grads).ok());
  CHECK(RowsAllCopies(cluster, "adm") == 2 * frequent.size());
  uint64_t refused = 0;
  for (const auto& server : cluster.servers) refused += TableOf(*server, "adm").admission_refused();
  CHECK(refused == 4 * 500);
  // The admitting update applied once: initial - 0.5 * 0.1.
  std::vector<float> expected = InitialRows("adm", frequent);
  for (float& w : expected) w -= 0.5f * 0.1f;
  const std::vector<float> before = Pulled(client, "adm", frequent, 8);
  CHECK(before == expected);

  // The replicas hold the same: kill -9 a server, the other serves every shard from its copies.
  cluster.servers[0]->Kill();
  cluster.killed[0] = true;
  CHECK(Pulled(client, "adm", frequent, 8) == before);
  CHECK(Pulled(client, "adm", rare, 8) == InitialRows("adm", rare));
  CHECK(RowsAllCopies(cluster, "adm") == frequent.size());
}

TEST_CASE("rows idle past their TTL in steps leave every copy and come back as initial rows",
          "[integration][bounded]") {
  Cluster cluster = StartCluster();
  Client& client = *cluster.client;
  std::vector<uint64_t> old_keys, new_keys;
  for (uint64_t i = 0; i < 300; ++i) old_keys.push_back(i * 7 + 1);
  for (uint64_t i = 0; i < 300; ++i) new_keys.push_back(i * 7 + 100000);
  const std::vector<float> grads(300 * 4, 0.2f);
  client.SetClock(1);
  REQUIRE(client.Push("ttl", old_keys, grads).ok());
  CHECK(RowsAllCopies(cluster, "ttl") == 2 * 300);
  // Step 100: the old rows are 99 steps idle, past the TTL of 50.
  client.SetClock(100);
  REQUIRE(client.Push("ttl", new_keys, grads).ok());
  const bool evicted = testing::Eventually(
      [&] { return RowsAllCopies(cluster, "ttl") == 2 * 300; }, absl::Seconds(30));
  CHECK(evicted);
  uint64_t evicted_ttl = 0;
  for (const auto& server : cluster.servers) evicted_ttl += TableOf(*server, "ttl").evicted_ttl();
  CHECK(evicted_ttl == 300);
  // The old keys start again from the initializer; the new ones kept their update.
  CHECK(Pulled(client, "ttl", old_keys, 4) == InitialRows("ttl", old_keys));
  std::vector<float> updated = InitialRows("ttl", new_keys);
  for (float& w : updated) w -= 0.5f * 0.2f;
  CHECK(Pulled(client, "ttl", new_keys, 4) == updated);
}

}  // namespace
}  // namespace ps

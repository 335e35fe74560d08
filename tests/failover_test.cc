// Replication and failover across real processes: a coordinator and three servers on loopback,
// client threads pushing +1 to probe keys while a server is killed with SIGKILL. Every
// acknowledged push must be there afterwards, exactly once.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "proto/ps.grpc.pb.h"
#include "tests/testing/daemon.h"
#include "tests/testing/eventually.h"
#include "tests/testing/server_status.h"

namespace ps {
namespace {

constexpr int kProbes = 64;

// One dim-1 table of zeros with sgd at rate 1: a push of -1 adds 1, so a probe's value counts
// the pushes applied to it.
std::string Job(int replication, const std::string& mode) {
  return absl::StrFormat(
      R"pb(
        name: "failover"
        tables {
          name: "probe"
          dim: 1
          initializer { kind: ZEROS }
          optimizer { type: "sgd" learning_rate: 1 }
        }
        training { mode: ASYNC }
        cluster { num_shards: 12 num_servers: 3 replication_factor: %d replication_mode: %s }
      )pb",
      replication, mode);
}

struct Cluster {
  std::unique_ptr<testing::Daemon> coordinator;
  std::vector<std::unique_ptr<testing::Daemon>> servers;
};

Cluster StartCluster(const std::string& job) {
  Cluster cluster;
  auto coordinator = testing::StartCoordinator(job, "failover_job");
  INFO(coordinator.status().ToString());
  REQUIRE(coordinator.ok());
  cluster.coordinator = std::move(*coordinator);
  for (int i = 0; i < 3; ++i) {
    auto server = testing::Daemon::Start(
        "server/ps_server", {absl::StrCat("--coordinator=", cluster.coordinator->address())});
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    cluster.servers.push_back(std::move(*server));
  }
  return cluster;
}

std::unique_ptr<Client> Connect(const Cluster& cluster) {
  ClientOptions options;
  options.coordinator = cluster.coordinator->address();
  options.retry_timeout = absl::Seconds(30);
  options.request_timeout = absl::Seconds(5);
  auto client = Client::Connect(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  return std::move(*client);
}

// Threads push -1 to random probes until told to stop, counting what was acknowledged.
class Storm {
 public:
  Storm(const Cluster& cluster, int threads, uint64_t seed) {
    for (int t = 0; t < threads; ++t) {
      clients_.push_back(Connect(cluster));
      threads_.emplace_back([this, t, seed] { Run(clients_[t].get(), seed + t); });
    }
  }
  ~Storm() { Stop(); }

  // Waits until `n` pushes were acknowledged in all (or a push failed).
  void WaitForAcked(int64_t n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n] { return total_ >= n || !error_.ok(); };
    mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(60));
  }

  void Stop() {
    stop_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  // A window around a kill: pushes sent before CloseWindow and acknowledged after OpenWindow are
  // counted by window(). They are every push whose record a server could have made between the
  // two (later pushes were sent after the server died).
  void OpenWindow() { phase_.store(1); }
  void CloseWindow() { phase_.store(2); }
  int64_t window() {
    absl::MutexLock lock(&mu_);
    return window_;
  }
  // The longest push acknowledged before the window (phase 0), in it (1) or after it (2).
  absl::Duration longest(int phase) {
    absl::MutexLock lock(&mu_);
    return longest_[phase];
  }

  std::vector<int64_t> acked() {
    absl::MutexLock lock(&mu_);
    return acked_;
  }
  int64_t total() {
    absl::MutexLock lock(&mu_);
    return total_;
  }
  absl::Status error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  void Run(Client* client, uint64_t seed) {
    std::mt19937_64 rng(seed);
    while (!stop_.load()) {
      const uint64_t probe = rng() % kProbes;
      const float grad = -1.0f;
      const bool sent_before_close = phase_.load() < 2;
      const absl::Time sent = absl::Now();
      const absl::Status status = client->Push("probe", {probe}, absl::MakeConstSpan(&grad, 1));
      const absl::Duration took = absl::Now() - sent;
      const int phase = phase_.load();
      absl::MutexLock lock(&mu_);
      if (!status.ok()) {
        if (error_.ok()) error_ = status;
        return;
      }
      ++acked_[probe];
      ++total_;
      if (sent_before_close && phase >= 1) ++window_;
      longest_[phase] = std::max(longest_[phase], took);
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> phase_{0};  // 0: before the window, 1: in it, 2: after
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  std::vector<int64_t> acked_ ABSL_GUARDED_BY(mu_) = std::vector<int64_t>(kProbes, 0);
  int64_t total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t window_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration longest_[3] ABSL_GUARDED_BY(mu_) = {};
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

std::vector<float> PullProbes(Client& client) {
  std::vector<uint64_t> keys(kProbes);
  for (int i = 0; i < kProbes; ++i) keys[i] = i;
  std::vector<float> values(kProbes);
  const absl::Status status = client.Pull("probe", keys, absl::MakeSpan(values));
  INFO(status.ToString());
  REQUIRE(status.ok());
  return values;
}

// Every probe holds exactly the pushes acknowledged to it: none lost, none applied twice.
void CheckProbes(const Cluster& cluster, const std::vector<int64_t>& acked) {
  std::unique_ptr<Client> reader = Connect(cluster);
  const std::vector<float> values = PullProbes(*reader);
  for (int i = 0; i < kProbes; ++i) {
    INFO("probe " << i);
    CHECK(static_cast<int64_t>(values[i]) == acked[i]);
  }
}

TEST_CASE("a primary killed in a storm of pushes loses no acknowledged push (SYNC replication)",
          "[integration][failover]") {
  const int victim = GENERATE(0, 1, 2);
  CAPTURE(victim);
  Cluster cluster = StartCluster(Job(2, "SYNC"));
  std::mt19937_64 rng(1234 + victim);
  {
    Storm storm(cluster, /*threads=*/4, /*seed=*/victim * 100);
    const int64_t kill_at = 200 + static_cast<int64_t>(rng() % 400);
    storm.WaitForAcked(kill_at);
    REQUIRE(storm.error().ok());
    cluster.servers[victim]->Kill();
    // Keep pushing through the failover, to every shard again.
    storm.WaitForAcked(storm.total() + 1000);
    storm.Stop();
    INFO(storm.error().ToString());
    REQUIRE(storm.error().ok());
    CheckProbes(cluster, storm.acked());
  }
  for (int i = 0; i < 3; ++i) {
    if (i != victim) CHECK(cluster.servers[i]->Terminate(absl::Seconds(10)).ok());
  }
  CHECK(cluster.coordinator->Terminate(absl::Seconds(10)).ok());
}

rpc::ServerStatus StatusOf(const testing::Daemon& server) {
  absl::StatusOr<rpc::ServerStatus> status = testing::ServerStatusOf(server, absl::Seconds(5));
  INFO(status.status().ToString());
  REQUIRE(status.ok());
  return *std::move(status);
}

// The records a server applied as primary that a replica may not hold yet: per shard, the
// largest lag of its replicas, summed.
uint64_t UnreplicatedRecords(const rpc::ServerStatus& status) {
  uint64_t records = 0;
  for (const rpc::ShardProgress& p : status.shards()) {
    uint64_t most = 0;
    for (const rpc::ReplicaLag& lag : p.replica_lags()) most = std::max(most, lag.records());
    records += most;
  }
  return records;
}

TEST_CASE(
    "a primary killed in a storm of pushes under ASYNC replication loses at most what it had not "
    "replicated",
    "[integration][failover]") {
  const int victim = GENERATE(0, 1, 2);
  CAPTURE(victim);
  Cluster cluster = StartCluster(Job(2, "ASYNC"));
  std::mt19937_64 rng(4321 + victim);
  {
    Storm storm(cluster, /*threads=*/4, /*seed=*/1000 + victim);
    storm.WaitForAcked(200 + static_cast<int64_t>(rng() % 400));
    REQUIRE(storm.error().ok());
    // The lag is read from the victim itself, then it is killed: what it could lose is that lag
    // plus the pushes it may have applied between the two (the window).
    storm.OpenWindow();
    const uint64_t lag = UnreplicatedRecords(StatusOf(*cluster.servers[victim]));
    cluster.servers[victim]->Kill();
    storm.CloseWindow();
    storm.WaitForAcked(storm.total() + 1000);
    storm.Stop();
    INFO(storm.error().ToString());
    REQUIRE(storm.error().ok());
    const std::vector<int64_t> acked = storm.acked();
    const std::vector<float> values = PullProbes(*Connect(cluster));
    int64_t lost = 0;
    for (int i = 0; i < kProbes; ++i) {
      INFO("probe " << i);
      const int64_t applied = static_cast<int64_t>(values[i]);
      CHECK(applied <= acked[i]);  // never applied twice
      lost += std::max<int64_t>(0, acked[i] - applied);
    }
    std::printf(
        "ASYNC replication, server %d killed: %lld of %lld acknowledged pushes lost; lag read "
        "before the kill %llu records, pushes acknowledged between that read and the kill %lld\n",
        victim, static_cast<long long>(lost), static_cast<long long>(storm.total()),
        static_cast<unsigned long long>(lag), static_cast<long long>(storm.window()));
    CHECK(lost <= static_cast<int64_t>(lag) + storm.window());
  }
  for (int i = 0; i < 3; ++i) {
    if (i != victim) CHECK(cluster.servers[i]->Terminate(absl::Seconds(10)).ok());
  }
  CHECK(cluster.coordinator->Terminate(absl::Seconds(10)).ok());
}

rpc::ShardMap MapOf(const Cluster& cluster) {
  auto client = CoordinatorClient::Connect(cluster.coordinator->address(), absl::Seconds(5));
  REQUIRE(client.ok());
  absl::StatusOr<rpc::ClusterStatus> status = (*client)->GetStatus();
  INFO(status.status().ToString());
  REQUIRE(status.ok());
  return status->shard_map();
}

// Every shard has replication_factor live copies, none catching up.
bool Healed(const std::string& coordinator, int replication) {
  auto client = CoordinatorClient::Connect(coordinator, absl::Seconds(5));
  if (!client.ok()) return false;
  absl::StatusOr<rpc::ClusterStatus> status = (*client)->GetStatus();
  if (!status.ok() || status->shards_size() == 0) return false;
  for (const rpc::ShardAssignment& a : status->shard_map().shards()) {
    if (a.lost() || a.catching_up_size() > 0 || a.replicas_size() + 1 != replication) return false;
  }
  return true;
}

// SIGKILLs server `i` while the storm goes on, starts it again at its address (empty: it fills
// copies from snapshots, under load) and waits until every shard has `replication` copies again.
void KillRestartAndHeal(Cluster& cluster, int i, Storm& storm, int replication) {
  const int port = cluster.servers[i]->port();
  cluster.servers[i]->Kill();
  storm.WaitForAcked(storm.total() + 300);
  REQUIRE(storm.error().ok());
  auto restarted = testing::Daemon::Start(
      "server/ps_server", {absl::StrCat("--coordinator=", cluster.coordinator->address()),
                           absl::StrCat("--listen=127.0.0.1:", port)});
  INFO(restarted.status().ToString());
  REQUIRE(restarted.ok());
  cluster.servers[i] = std::move(*restarted);
  REQUIRE(testing::Eventually([&] { return Healed(cluster.coordinator->address(), replication); },
                              absl::Seconds(30)));
}

TEST_CASE("kill, restart, catch up, kill another: no acknowledged push is lost",
          "[integration][failover]") {
  Cluster cluster = StartCluster(Job(2, "SYNC"));
  {
    Storm storm(cluster, /*threads=*/3, /*seed=*/77);
    storm.WaitForAcked(300);
    KillRestartAndHeal(cluster, 0, storm, 2);
    storm.WaitForAcked(storm.total() + 300);
    cluster.servers[1]->Kill();
    storm.WaitForAcked(storm.total() + 500);
    storm.Stop();
    INFO(storm.error().ToString());
    REQUIRE(storm.error().ok());
    CheckProbes(cluster, storm.acked());
  }
  CHECK(cluster.servers[0]->Terminate(absl::Seconds(10)).ok());
  CHECK(cluster.servers[2]->Terminate(absl::Seconds(10)).ok());
  CHECK(cluster.coordinator->Terminate(absl::Seconds(10)).ok());
}

TEST_CASE("killing a server that holds only replicas moves no primary and loses no push",
          "[integration][failover]") {
  // Replication 3 on 3 servers: a server that died and came back gets a copy of every shard.
  Cluster cluster = StartCluster(Job(3, "SYNC"));
  {
    Storm storm(cluster, /*threads=*/3, /*seed=*/55);
    storm.WaitForAcked(300);
    // A server that died and came back holds only copies: its primaries went to replicas.
    KillRestartAndHeal(cluster, 0, storm, 3);
    const rpc::ServerStatus replica = StatusOf(*cluster.servers[0]);
    REQUIRE(replica.primary_shards_size() == 0);
    REQUIRE(replica.replica_shards_size() == 12);
    const rpc::ShardMap before = MapOf(cluster);
    storm.WaitForAcked(storm.total() + 300);

    storm.OpenWindow();
    cluster.servers[0]->Kill();
    storm.CloseWindow();
    storm.WaitForAcked(storm.total() + 1000);
    storm.Stop();
    INFO(storm.error().ToString());
    REQUIRE(storm.error().ok());
    CheckProbes(cluster, storm.acked());
    // Every shard kept its primary and term; the dead server is gone from the map.
    const rpc::ShardMap after = MapOf(cluster);
    REQUIRE(after.shards_size() == before.shards_size());
    for (int s = 0; s < after.shards_size(); ++s) {
      INFO("shard " << s);
      CHECK(after.shards(s).primary() == before.shards(s).primary());
      CHECK(after.shards(s).primary_term() == before.shards(s).primary_term());
      for (uint32_t r : after.shards(s).replicas()) CHECK(r != replica.server_id());
    }
    std::printf("a replica killed: the longest push took %.1f ms before, %.1f ms after\n",
                absl::ToDoubleMilliseconds(storm.longest(0)),
                absl::ToDoubleMilliseconds(storm.longest(2)));
  }
  CHECK(cluster.servers[1]->Terminate(absl::Seconds(10)).ok());
  CHECK(cluster.servers[2]->Terminate(absl::Seconds(10)).ok());
  CHECK(cluster.coordinator->Terminate(absl::Seconds(10)).ok());
}

TEST_CASE("killing the only copy of shards gives DATA_LOSS, never re-created rows",
          "[integration][failover]") {
  Cluster cluster = StartCluster(Job(1, "SYNC"));
  std::unique_ptr<Client> client = Connect(cluster);
  std::vector<uint64_t> keys(kProbes);
  for (int i = 0; i < kProbes; ++i) keys[i] = i;
  std::vector<float> grads(kProbes, -1.0f);
  REQUIRE(client->Push("probe", keys, grads).ok());
  cluster.servers[1]->Kill();
  std::vector<float> values(kProbes);
  absl::Status status;
  // Until the coordinator has noticed, calls may retry; then the lost shards are named.
  for (int attempt = 0; attempt < 50; ++attempt) {
    status = client->Pull("probe", keys, absl::MakeSpan(values));
    if (absl::IsDataLoss(status)) break;
  }
  INFO(status.ToString());
  CHECK(absl::IsDataLoss(status));
  CHECK(absl::StrContains(status.message(), "shard"));
}

}  // namespace
}  // namespace ps

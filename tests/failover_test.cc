// Replication and failover across real processes: a coordinator and three servers on loopback,
// client threads pushing +1 to probe keys while a server is killed with SIGKILL. Every
// acknowledged push must be there afterwards, exactly once.
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
#include "tests/testing/daemon.h"
#include "tests/testing/eventually.h"

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
      const absl::Status status = client->Push("probe", {probe}, absl::MakeConstSpan(&grad, 1));
      absl::MutexLock lock(&mu_);
      if (!status.ok()) {
        if (error_.ok()) error_ = status;
        return;
      }
      ++acked_[probe];
      ++total_;
    }
  }

  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  std::vector<int64_t> acked_ ABSL_GUARDED_BY(mu_) = std::vector<int64_t>(kProbes, 0);
  int64_t total_ ABSL_GUARDED_BY(mu_) = 0;
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

TEST_CASE("kill, restart, catch up, kill another: no acknowledged push is lost",
          "[integration][failover]") {
  Cluster cluster = StartCluster(Job(2, "SYNC"));
  {
    Storm storm(cluster, /*threads=*/3, /*seed=*/77);
    storm.WaitForAcked(300);
    const int port = cluster.servers[0]->port();
    cluster.servers[0]->Kill();
    storm.WaitForAcked(storm.total() + 500);
    REQUIRE(storm.error().ok());
    // The server comes back at its address, empty: it fills copies from snapshots, under load.
    auto restarted = testing::Daemon::Start(
        "server/ps_server", {absl::StrCat("--coordinator=", cluster.coordinator->address()),
                             absl::StrCat("--port=", port)});
    INFO(restarted.status().ToString());
    REQUIRE(restarted.ok());
    cluster.servers[0] = std::move(*restarted);
    CHECK(testing::Eventually([&] { return Healed(cluster.coordinator->address(), 2); },
                              absl::Seconds(30)));
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

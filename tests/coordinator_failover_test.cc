// Coordinators that fail over through etcd, with real processes: a 3-member etcd cluster
// (Debian's etcd), 3 ps_coordinator --etcd (one leads, two stand by), 3 ps_servers
// (replication_factor 2) and 2 ps_workers training in SYNC mode, with a checkpoint every 40 steps
// so that every step waits on the coordinator (a sync job with checkpoints reports its clock and
// reads the checkpoint notice at each step). Each case kills something for real and checks that
// the job ends with exactly the parameters of the same job run without the kill.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/eventually.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/model_parameters.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/synthetic.h"

namespace ps {
namespace {

constexpr int kBatch = 32;
constexpr int kSteps = 160;

rpc::ServerStatus StatusOf(const std::string& address) {
  auto stub = rpc::ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  rpc::ServerStatus status;
  if (!stub->GetStatus(&context, rpc::ServerStatusRequest(), &status).ok()) return {};
  return status;
}

// The cluster status from whichever coordinator answers (the leader).
std::optional<rpc::ClusterStatus> ClusterStatusOf(const testing::LocalCluster& cluster) {
  for (int i = 0; i < cluster.num_coordinators(); ++i) {
    if (cluster.coordinator(i) == nullptr) continue;
    auto stub = rpc::Coordinator::NewStub(
        grpc::CreateChannel(cluster.coordinator(i)->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    rpc::ClusterStatus status;
    if (stub->GetStatus(&context, rpc::StatusRequest(), &status).ok()) return status;
  }
  return std::nullopt;
}

std::string Job(const std::string& name, const std::string& train) {
  return absl::StrFormat(
      R"pb(name: "%s"
           tables {
             name: "emb"
             dim: 4
             initializer { kind: UNIFORM low: -0.1 high: 0.1 }
             optimizer { type: "adagrad" learning_rate: 0.05 }
           }
           model {
             bottom_mlp: [ 8, 4 ]
             top_mlp: [ 8 ]
             shared_table: "emb"
           }
           data { train_paths: "%s" }
           training {
             mode: SYNC
             batch_size: %d
             steps: %d
             dense_optimizer { type: "adam" learning_rate: 0.01 }
             dense_push_every: 0
             seed: 3
           }
           cluster {
             num_shards: 12
             num_servers: 3
             num_workers: 2
             replication_factor: 2
             checkpoint_dir: "%s/%s_checkpoints"
             checkpoint_every_steps: 40
           }
      )pb",
      name, train, kBatch, kSteps, testing::TempDir(), name);
}

// What happens to the cluster once training is halfway; it runs on a thread of its own.
using Disruption = std::function<void(testing::LocalCluster*, testing::EtcdCluster*)>;

struct Run {
  testing::ModelParameters parameters;
  std::vector<testing::ProcessResult> workers;
};

// Trains the job on a fresh etcd cluster and cluster, with `disrupt` run once the servers
// applied half the steps.
Run Train(const std::string& name, const std::string& train, const std::vector<uint64_t>& keys,
          const Disruption& disrupt) {
  absl::StatusOr<std::unique_ptr<testing::EtcdCluster>> etcd = testing::EtcdCluster::Start(3);
  INFO(etcd.status().ToString());
  REQUIRE(etcd.ok());
  const std::string job_path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream(job_path) << Job(name, train);
  testing::LocalClusterOptions options;
  options.servers = 3;
  options.coordinators = 3;
  options.etcd = (*etcd)->endpoints();
  options.coordinator_args = {"--lease_ttl_s=1"};
  absl::StatusOr<std::unique_ptr<testing::LocalCluster>> cluster =
      testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  std::atomic<bool> disrupted{false};
  std::thread disruptor;
  if (disrupt) {
    disruptor = std::thread([&] {
      const std::string server = (*cluster)->servers()[0]->address();
      if (!testing::Eventually([&] { return StatusOf(server).applied_step() >= kSteps / 2; },
                               absl::Minutes(3), absl::Milliseconds(2))) {
        return;
      }
      disrupt(cluster->get(), etcd->get());
      disrupted = true;
    });
  }
  absl::StatusOr<std::vector<testing::ProcessResult>> results = (*cluster)->RunWorkers(
      std::vector<std::vector<std::string>>(2, {"--progress_s=60"}), absl::Minutes(5));
  if (disruptor.joinable()) disruptor.join();
  INFO(results.status().ToString());
  REQUIRE(results.ok());
  if (disrupt) CHECK(disrupted.load());
  absl::StatusOr<testing::ModelParameters> parameters =
      testing::PullModelParameters((*cluster)->coordinator_addresses(), "emb", keys);
  INFO(parameters.status().ToString());
  REQUIRE(parameters.ok());
  return {*parameters, *results};
}

// Kills the leading coordinator and waits until another leads; returns the one killed.
int KillLeader(testing::LocalCluster* cluster) {
  const int leader = cluster->LeaderIndex();
  REQUIRE(leader >= 0);
  cluster->KillCoordinator(leader);
  REQUIRE(testing::Eventually([&] { return cluster->LeaderIndex() >= 0; }, absl::Seconds(30),
                              absl::Milliseconds(20)));
  CHECK(cluster->LeaderIndex() != leader);
  return leader;
}

struct Data {
  std::string train;
  std::vector<uint64_t> keys;
};

const Data& TrainingData() {
  static const Data* data = [] {
    worker::SyntheticOptions data_options;
    data_options.cardinalities = {200};
    data_options.seed = 21;
    auto synthetic = worker::SyntheticData::Create(data_options);
    REQUIRE(synthetic.ok());
    auto* d = new Data;
    d->train = absl::StrCat(testing::TempDir(), "/coordinator_failover.tsv");
    REQUIRE(worker::WriteSyntheticFile(**synthetic, worker::SyntheticData::kTrainStream,
                                       2 * kBatch * kSteps, d->train, false)
                .ok());
    absl::StatusOr<std::vector<uint64_t>> keys = testing::KeysOfFile(d->train);
    REQUIRE(keys.ok());
    d->keys = *keys;
    return d;
  }();
  return *data;
}

const testing::ModelParameters& Reference() {
  static const testing::ModelParameters* reference = [] {
    const Data& data = TrainingData();
    return new testing::ModelParameters(
        Train("uninterrupted", data.train, data.keys, nullptr).parameters);
  }();
  return *reference;
}

// The parameters equal the uninterrupted run's: bit for bit when only coordinators and etcd
// members were killed (nothing of the training's arithmetic changes), within the equivalence
// test's bound when a server was too (failover_training_test's: a promoted replica's rows were
// streamed, not computed, and sums may meet in another order).
void CheckSameAsReference(const testing::ModelParameters& got, double bound = 0) {
  const testing::ModelParameters& reference = Reference();
  const double dense = testing::MaxRelativeDifference(reference.dense, got.dense);
  const double rows = testing::MaxRelativeDifference(reference.rows, got.rows);
  std::printf("max relative difference to the uninterrupted run: dense %.3g, embeddings %.3g\n",
              dense, rows);
  CHECK(dense <= bound);
  CHECK(rows <= bound);
}

TEST_CASE("sync training through a kill -9 of the leading coordinator ends as without it",
          "[integration][coordinator_failover]") {
  const Data& data = TrainingData();
  Run run = Train("leader_killed", data.train, data.keys,
                  [](testing::LocalCluster* cluster, testing::EtcdCluster*) {
                    const int killed = KillLeader(cluster);
                    // Back as a standby; then the new leader is killed too.
                    REQUIRE(cluster->RestartCoordinator(killed).ok());
                    KillLeader(cluster);
                  });
  CheckSameAsReference(run.parameters);
}

TEST_CASE("the leader and a server killed at once: the server fails over under the new leader",
          "[integration][coordinator_failover]") {
  const Data& data = TrainingData();
  uint64_t failovers = 0;
  Run run = Train("leader_and_server_killed", data.train, data.keys,
                  [&](testing::LocalCluster* cluster, testing::EtcdCluster*) {
                    const int leader = cluster->LeaderIndex();
                    REQUIRE(leader >= 0);
                    // Both gone before anyone notices either.
                    cluster->KillCoordinator(leader);
                    cluster->servers()[1]->Kill();
                    REQUIRE(testing::Eventually(
                        [&] {
                          std::optional<rpc::ClusterStatus> s = ClusterStatusOf(*cluster);
                          if (s.has_value()) failovers = s->failovers();
                          return failovers > 0;
                        },
                        absl::Seconds(30), absl::Milliseconds(20)));
                  });
  CHECK(failovers > 0);
  CheckSameAsReference(run.parameters, 1e-4);
}

TEST_CASE("etcd members killed: one changes nothing; two stop decisions until one is back",
          "[integration][coordinator_failover]") {
  const Data& data = TrainingData();
  Run run = Train("etcd_members_killed", data.train, data.keys,
                  [](testing::LocalCluster* cluster, testing::EtcdCluster* etcd) {
                    const int leader = cluster->LeaderIndex();
                    etcd->Kill(0);
                    // A quorum is left: the leader keeps its lease and leads on.
                    const absl::Time until = absl::Now() + absl::Seconds(3);
                    while (absl::Now() < until) {
                      REQUIRE(cluster->LeaderIndex() == leader);
                    }
                    // No quorum: no coordinator can be sure of a lease, so none answers (no
                    // split brain); the servers keep serving pulls and pushes meanwhile.
                    etcd->Kill(1);
                    REQUIRE(testing::Eventually([&] { return cluster->LeaderIndex() < 0; },
                                                absl::Seconds(10), absl::Milliseconds(20)));
                    REQUIRE(etcd->Restart(1).ok());
                    REQUIRE(testing::Eventually([&] { return cluster->LeaderIndex() >= 0; },
                                                absl::Seconds(30), absl::Milliseconds(20)));
                    REQUIRE(etcd->Restart(0).ok());
                  });
  CheckSameAsReference(run.parameters);
}

TEST_CASE("a deposed leader (paused past its lease) changes nothing and stands by",
          "[integration][coordinator_failover]") {
  const Data& data = TrainingData();
  Run run = Train(
      "leader_paused", data.train, data.keys,
      [](testing::LocalCluster* cluster, testing::EtcdCluster*) {
        const int leader = cluster->LeaderIndex();
        REQUIRE(leader >= 0);
        testing::Daemon* paused = cluster->coordinator(leader);
        REQUIRE(kill(paused->pid(), SIGSTOP) == 0);
        // Another takes over while it is paused, and a server dies: the new leader fails it
        // over, a new map version.
        REQUIRE(testing::Eventually(
            [&] {
              const int now = cluster->LeaderIndex();
              return now >= 0 && now != leader;
            },
            absl::Seconds(30), absl::Milliseconds(20)));
        cluster->servers()[2]->Kill();
        std::optional<rpc::ClusterStatus> after;
        REQUIRE(testing::Eventually(
            [&] {
              after = ClusterStatusOf(*cluster);
              return after.has_value() && after->failovers() > 0;
            },
            absl::Seconds(30), absl::Milliseconds(20)));
        // Woken, the old leader finds its lease gone: it answers nothing as a leader, writes
        // nothing, and stands by.
        REQUIRE(kill(paused->pid(), SIGCONT) == 0);
        REQUIRE(testing::Eventually(
            [&] { return paused->ReadLog().find("standing by again") != std::string::npos; },
            absl::Seconds(10), absl::Milliseconds(20)));
        CHECK(cluster->LeaderIndex() != leader);
        std::optional<rpc::ClusterStatus> later = ClusterStatusOf(*cluster);
        REQUIRE(later.has_value());
        CHECK(later->shard_map().version() >= after->shard_map().version());
      });
  CheckSameAsReference(run.parameters, 1e-4);
}

}  // namespace
}  // namespace ps

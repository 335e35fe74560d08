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
#include "absl/synchronization/notification.h"
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
constexpr int kSteps = 600;

// Disruptions run on a thread of their own, where Catch's assertions must not be used: they
// return what went wrong instead.
#define EXPECT_OR_RETURN(condition, what)                                              \
  do {                                                                                 \
    if (!(condition)) return absl::InternalError(absl::StrCat(what, ": " #condition)); \
  } while (false)

rpc::ServerStatus StatusOf(const std::string& address) {
  auto stub = rpc::ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  rpc::ServerStatus status;
  if (!stub->GetStatus(&context, rpc::ServerStatusRequest(), &status).ok()) return {};
  return status;
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

// What happens to the cluster once training is a third done; it runs on a thread of its own.
// Its error fails the test.
using Disruption = std::function<absl::Status(testing::LocalCluster*, testing::EtcdCluster*)>;

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
  // The default lease: a 1 s one is granted by these etcd members too, but on a loaded 2-core
  // machine etcd's answers can take long enough to cost a leader its lease now and then.
  options.coordinator_args = {"--lease_ttl_s=2"};
  absl::StatusOr<std::unique_ptr<testing::LocalCluster>> cluster =
      testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  absl::Status disrupted = absl::UnknownError("not disrupted");
  absl::Notification release;
  int64_t disrupted_at = -1, done_at = -1;
  std::thread disruptor;
  if (disrupt) {
    disruptor = std::thread([&] {
      const std::string server = (*cluster)->servers()[0]->address();
      if (!testing::Eventually([&] { return StatusOf(server).applied_step() >= kSteps / 3; },
                               absl::Minutes(3), absl::Milliseconds(2))) {
        return;
      }
      disrupted_at = StatusOf(server).applied_step();
      disrupted = disrupt(cluster->get(), etcd->get());
      done_at = StatusOf(server).applied_step();
      // What this thread started again dies with it (Daemon): it lives until the run is over.
      release.WaitForNotification();
    });
  }
  absl::StatusOr<std::vector<testing::ProcessResult>> results = (*cluster)->RunWorkers(
      std::vector<std::vector<std::string>>(2, {"--progress_s=60"}), absl::Minutes(5));
  INFO(results.status().ToString());
  if (!results.ok()) {
    release.Notify();
    if (disruptor.joinable()) disruptor.join();
    INFO(disrupted.ToString());
    REQUIRE(results.ok());
  }
  if (disrupt) {
    INFO(disrupted.ToString());
    CHECK(disrupted.ok());
    // The disruption happened while the workers trained.
    std::printf("disrupted from step %lld to step %lld of %d\n",
                static_cast<long long>(disrupted_at), static_cast<long long>(done_at), kSteps);
    CHECK(done_at < kSteps - 1);
  }
  // A leader to ask for the parameters.
  REQUIRE(testing::Eventually([&] { return (*cluster)->LeaderIndex() >= 0; }, absl::Seconds(30),
                              absl::Milliseconds(20)));
  absl::StatusOr<testing::ModelParameters> parameters =
      testing::PullModelParameters((*cluster)->coordinator_addresses(), "emb", keys);
  release.Notify();
  if (disruptor.joinable()) disruptor.join();
  INFO(parameters.status().ToString());
  REQUIRE(parameters.ok());
  return {*parameters, *results};
}

// Kills the leading coordinator and waits until another leads; returns the one killed.
absl::StatusOr<int> KillLeader(testing::LocalCluster* cluster) {
  const int leader = cluster->LeaderIndex();
  EXPECT_OR_RETURN(leader >= 0, "a leader before the kill");
  cluster->KillCoordinator(leader);
  int now = -1;
  EXPECT_OR_RETURN(testing::Eventually(
                       [&] {
                         now = cluster->LeaderIndex();
                         return now >= 0;
                       },
                       absl::Seconds(30), absl::Milliseconds(20)),
                   "a new leader within 30 s");
  EXPECT_OR_RETURN(now != leader, "another leader");
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
                  [](testing::LocalCluster* cluster, testing::EtcdCluster*) -> absl::Status {
                    absl::StatusOr<int> killed = KillLeader(cluster);
                    if (!killed.ok()) return killed.status();
                    // Back as a standby; then the new leader is killed too.
                    absl::Status restarted = cluster->RestartCoordinator(*killed);
                    if (!restarted.ok()) return restarted;
                    return KillLeader(cluster).status();
                  });
  CheckSameAsReference(run.parameters);
}

TEST_CASE("the leader and a server killed at once: the server fails over under the new leader",
          "[integration][coordinator_failover]") {
  const Data& data = TrainingData();
  uint64_t failovers = 0;
  Run run = Train("leader_and_server_killed", data.train, data.keys,
                  [&](testing::LocalCluster* cluster, testing::EtcdCluster*) -> absl::Status {
                    const int leader = cluster->LeaderIndex();
                    EXPECT_OR_RETURN(leader >= 0, "a leader before the kill");
                    // Both gone before anyone notices either.
                    cluster->KillCoordinator(leader);
                    cluster->servers()[1]->Kill();
                    EXPECT_OR_RETURN(testing::Eventually(
                                         [&] {
                                           std::optional<rpc::ClusterStatus> s =
                                               cluster->LeaderStatus();
                                           if (s.has_value()) failovers = s->failovers();
                                           return failovers > 0;
                                         },
                                         absl::Seconds(30), absl::Milliseconds(20)),
                                     "the server failed over under a new leader");
                    return absl::OkStatus();
                  });
  CHECK(failovers > 0);
  CheckSameAsReference(run.parameters, 1e-4);
}

TEST_CASE("etcd members killed: one changes nothing; two stop decisions until one is back",
          "[integration][coordinator_failover]") {
  const Data& data = TrainingData();
  Run run =
      Train("etcd_members_killed", data.train, data.keys,
            [](testing::LocalCluster* cluster, testing::EtcdCluster* etcd) -> absl::Status {
              const int leader = cluster->LeaderIndex();
              EXPECT_OR_RETURN(leader >= 0, "a leader before the kills");
              // A member that is not raft's leader goes: the leader keeps its lease and
              // leads on.
              const int member = etcd->RaftFollower();
              EXPECT_OR_RETURN(member >= 0, "an etcd follower");
              etcd->Kill(member);
              const absl::Time until = absl::Now() + absl::Seconds(1);
              while (absl::Now() < until) {
                EXPECT_OR_RETURN(cluster->LeaderIndex() == leader,
                                 "the same leader with one etcd member down");
              }
              // No quorum: no coordinator can be sure of a lease, so none answers (no
              // split brain); the servers keep serving pulls and pushes meanwhile.
              const int second = (member + 1) % 3;
              etcd->Kill(second);
              EXPECT_OR_RETURN(testing::Eventually([&] { return cluster->LeaderIndex() < 0; },
                                                   absl::Seconds(10), absl::Milliseconds(20)),
                               "no leader without etcd's quorum");
              absl::Status back = etcd->Restart(second);
              if (!back.ok()) return back;
              EXPECT_OR_RETURN(testing::Eventually([&] { return cluster->LeaderIndex() >= 0; },
                                                   absl::Seconds(30), absl::Milliseconds(20)),
                               "a leader once the quorum is back");
              return etcd->Restart(member);
            });
  CheckSameAsReference(run.parameters);
}

TEST_CASE("a deposed leader (paused past its lease) changes nothing and stands by",
          "[integration][coordinator_failover]") {
  const Data& data = TrainingData();
  Run run = Train(
      "leader_paused", data.train, data.keys,
      [](testing::LocalCluster* cluster, testing::EtcdCluster*) -> absl::Status {
        const int leader = cluster->LeaderIndex();
        EXPECT_OR_RETURN(leader >= 0, "a leader before the pause");
        testing::Daemon* paused = cluster->coordinator(leader);
        EXPECT_OR_RETURN(kill(paused->pid(), SIGSTOP) == 0, "SIGSTOP");
        // Another takes over while it is paused, and a server dies: the new leader fails it
        // over, a new map version.
        EXPECT_OR_RETURN(testing::Eventually(
                             [&] {
                               const int now = cluster->LeaderIndex();
                               return now >= 0 && now != leader;
                             },
                             absl::Seconds(30), absl::Milliseconds(20)),
                         "another leader while the first is paused");
        cluster->servers()[2]->Kill();
        std::optional<rpc::ClusterStatus> after;
        EXPECT_OR_RETURN(testing::Eventually(
                             [&] {
                               after = cluster->LeaderStatus();
                               return after.has_value() && after->failovers() > 0;
                             },
                             absl::Seconds(30), absl::Milliseconds(20)),
                         "the server failed over by the new leader");
        // Woken, the old leader finds its lease gone: it answers nothing as a leader, writes
        // nothing, and stands by.
        EXPECT_OR_RETURN(kill(paused->pid(), SIGCONT) == 0, "SIGCONT");
        EXPECT_OR_RETURN(
            testing::Eventually(
                [&] { return paused->ReadLog().find("standing by again") != std::string::npos; },
                absl::Seconds(10), absl::Milliseconds(20)),
            "the deposed leader stands by");
        EXPECT_OR_RETURN(cluster->LeaderIndex() != leader, "the deposed leader does not lead");
        std::optional<rpc::ClusterStatus> later = cluster->LeaderStatus();
        EXPECT_OR_RETURN(later.has_value(), "a leader's status");
        EXPECT_OR_RETURN(later->shard_map().version() >= after->shard_map().version(),
                         "the map never went back");
        return absl::OkStatus();
      });
  CheckSameAsReference(run.parameters, 1e-4);
}

}  // namespace
}  // namespace ps

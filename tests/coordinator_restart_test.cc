// A coordinator killed mid-training and restarted on its --data_dir carries the job on: the
// servers and workers reconnect, and the job ends where it would have without the restart.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/coordinator_client.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/model_parameters.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/synthetic.h"

namespace ps {
namespace {

constexpr int kWorkers = 2;

// With checkpoints every 40 steps, so that the workers report their clocks to the coordinator
// and wait for its answers (the checkpoints ask for their state) at every step, through the
// restart too.
std::string WriteJob(const std::string& name, const std::string& data) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream(path) << absl::StrFormat(
      R"pb(name: "restart"
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
             batch_size: 32
             steps: 150
             dense_optimizer { type: "adam" learning_rate: 0.01 }
             seed: 3
           }
           cluster {
             num_shards: 8
             num_servers: 2
             num_workers: %d
             checkpoint_dir: "%s/%s_checkpoints"
             checkpoint_every_steps: 40
           })pb",
      data, kWorkers, testing::TempDir(), name);
  return path;
}

testing::ModelParameters Run(const std::string& job_path, const std::vector<uint64_t>& keys,
                             const std::string& data_dir) {
  testing::LocalClusterOptions options;
  // Members must heartbeat within dead_after of the restarted coordinator's listening
  // (Coordinator::StartServing): 10 s rather than the default 3, because on a machine running
  // other tests beside this one (2 cores, 4 test processes) a worker's channel has been seen to
  // take longer than 3 s to reach it again, which fails the job; what this test checks is that
  // the job is carried on, not how fast a loaded machine reconnects. (Under heavier load a
  // worker has also been seen never to reach the restarted coordinator: an open bug.)
  options.coordinator_args = {"--dead_after_ms=10000"};
  if (!data_dir.empty()) options.coordinator_args.push_back("--data_dir=" + data_dir);
  auto cluster = testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  absl::StatusOr<std::vector<testing::ProcessResult>> results;
  std::thread workers([&] {
    results = (*cluster)->RunWorkers(
        std::vector<std::vector<std::string>>(kWorkers, {"--progress_s=60"}), absl::Minutes(5));
  });
  if (!data_dir.empty()) {
    // Once every worker is past step 20, the coordinator is killed and started again.
    {
      auto watcher =
          CoordinatorClient::Connect((*cluster)->coordinator().address(), absl::Seconds(10));
      REQUIRE(watcher.ok());
      REQUIRE((*watcher)->WaitClock(20, absl::Minutes(2)).ok());
    }
    REQUIRE((*cluster)->RestartCoordinator().ok());
    CHECK_THAT((*cluster)->coordinator().ReadLog(), Catch::Contains("carrying on job"));
    // It knows the job as it was: the members, the map, the clocks.
    auto watcher =
        CoordinatorClient::Connect((*cluster)->coordinator().address(), absl::Seconds(10));
    REQUIRE(watcher.ok());
    absl::StatusOr<rpc::ClusterStatus> status = (*watcher)->GetStatus();
    REQUIRE(status.ok());
    CHECK(status->shard_map().version() >= 1);
    CHECK(status->shard_map().shards_size() == 8);
    CHECK(status->clocks().min_clock() >= 20);
    CHECK(status->members_size() >= 2 + kWorkers);
  }
  workers.join();
  INFO(results.status().ToString());
  REQUIRE(results.ok());
  absl::StatusOr<testing::ModelParameters> parameters =
      testing::PullModelParameters((*cluster)->coordinator().address(), "emb", keys);
  INFO(parameters.status().ToString());
  REQUIRE(parameters.ok());
  const absl::Status terminated = (*cluster)->Terminate(absl::Seconds(20));
  INFO(terminated.ToString());
  REQUIRE(terminated.ok());
  return *parameters;
}

TEST_CASE("a coordinator restarted on its data_dir mid-training carries the job on",
          "[integration][coordinator][restart]") {
  worker::SyntheticOptions data_options;
  data_options.cardinalities = {50};
  data_options.seed = 6;
  auto data = worker::SyntheticData::Create(data_options);
  REQUIRE(data.ok());
  const std::string train = absl::StrCat(testing::TempDir(), "/restart.tsv");
  REQUIRE(
      worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream, 10000, train, false)
          .ok());
  absl::StatusOr<std::vector<uint64_t>> keys = testing::KeysOfFile(train);
  REQUIRE(keys.ok());
  const testing::ModelParameters unstopped = Run(WriteJob("unstopped", train), *keys, "");
  const testing::ModelParameters restarted = Run(
      WriteJob("restarted", train), *keys, absl::StrCat(testing::TempDir(), "/coordinator_data"));
  CHECK(testing::MaxRelativeDifference(restarted.dense, unstopped.dense) <= 1e-4);
  CHECK(testing::MaxRelativeDifference(restarted.rows, unstopped.rows) <= 1e-4);
}

}  // namespace
}  // namespace ps

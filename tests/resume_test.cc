// A sync training job checkpointed, stopped and resumed from its checkpoint (the tables and
// optimizer state on the servers, the workers' dense model and optimizer state, the data
// position) ends where the same job run without a stop does.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_catalog.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/model_parameters.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/synthetic.h"

namespace ps {
namespace {

constexpr int kSteps = 30;
constexpr int kWorkers = 2;

std::string WriteJob(const std::string& name, const std::string& data) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream(path) << absl::StrFormat(
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
             batch_size: 32
             steps: %d
             dense_optimizer { type: "adam" learning_rate: 0.01 }
             seed: 3
           }
           cluster {
             num_shards: 8
             num_servers: 2
             num_workers: %d
             checkpoint_dir: "%s/%s_checkpoints"
           })pb",
      name, data, kSteps, kWorkers, testing::TempDir(), name);
  return path;
}

// Runs the job's workers (with `args`) on a cluster started with `coordinator_args`; returns the
// dense master copy and the rows of `keys` at the end, and each worker's steps in `steps`.
testing::ModelParameters Run(const std::string& job_path,
                             const std::vector<std::string>& coordinator_args,
                             const std::vector<std::string>& args,
                             const std::vector<uint64_t>& keys, std::vector<int64_t>* steps) {
  testing::LocalClusterOptions options;
  options.coordinator_args = coordinator_args;
  auto cluster = testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  std::vector<std::string> worker_args = {"--progress_s=60"};
  worker_args.insert(worker_args.end(), args.begin(), args.end());
  auto results = (*cluster)->RunWorkers(
      std::vector<std::vector<std::string>>(kWorkers, worker_args), absl::Minutes(5));
  INFO(results.status().ToString());
  REQUIRE(results.ok());
  steps->clear();
  for (const testing::ProcessResult& r : *results) {
    const std::string json = testing::ResultJson(r.stdout_text);
    INFO(json);
    steps->push_back(static_cast<int64_t>(testing::JsonField(json, "steps")));
  }
  absl::StatusOr<testing::ModelParameters> parameters =
      testing::PullModelParameters((*cluster)->coordinator().address(), "emb", keys);
  INFO(parameters.status().ToString());
  REQUIRE(parameters.ok());
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
  return *parameters;
}

TEST_CASE("a sync job stopped after a checkpoint and resumed ends where an unstopped one does",
          "[integration][checkpoint][resume]") {
  worker::SyntheticOptions data_options;
  data_options.cardinalities = {50};
  data_options.seed = 4;
  auto data = worker::SyntheticData::Create(data_options);
  REQUIRE(data.ok());
  const std::string train = absl::StrCat(testing::TempDir(), "/resume.tsv");
  REQUIRE(
      worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream, 3000, train, false)
          .ok());
  absl::StatusOr<std::vector<uint64_t>> keys = testing::KeysOfFile(train);
  REQUIRE(keys.ok());
  std::vector<int64_t> steps;

  const testing::ModelParameters unstopped =
      Run(WriteJob("unstopped", train), {}, {}, *keys, &steps);
  CHECK(steps == std::vector<int64_t>(kWorkers, kSteps));

  // Stopped at step 12 (its end-of-training checkpoint holds boundary 12), then resumed from the
  // job's checkpoint_dir: it trains the 18 steps left, on the data after the first 12 blocks.
  const std::string job = WriteJob("resumed", train);
  const testing::ModelParameters stopped = Run(job, {}, {"--max_steps=12"}, *keys, &steps);
  CHECK(steps == std::vector<int64_t>(kWorkers, 12));
  const std::string dir = absl::StrCat(testing::TempDir(), "/resumed_checkpoints");
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> list = ListCheckpoints(dir);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 1);
  CHECK(list->back().step() == 12);
  CHECK(list->back().workers_size() == 1);
  const testing::ModelParameters resumed = Run(job, {"--restore=" + dir}, {}, *keys, &steps);
  CHECK(steps == std::vector<int64_t>(kWorkers, kSteps - 12));

  // The same model up to float rounding (the equivalence tests' bound), where the model at the
  // stop is far from it.
  CHECK(testing::MaxRelativeDifference(resumed.dense, unstopped.dense) <= 1e-4);
  CHECK(testing::MaxRelativeDifference(resumed.rows, unstopped.rows) <= 1e-4);
  CHECK(testing::MaxRelativeDifference(stopped.dense, unstopped.dense) > 1e-3);
  CHECK(testing::MaxRelativeDifference(stopped.rows, unstopped.rows) > 1e-3);
}

}  // namespace
}  // namespace ps

// Sync mode's promise, checked end to end: 2 workers with batch B train the same model as 1 worker
// with batch 2B (the servers sum a step's gradients and apply them once; the dense gradients are
// summed by AllReduce), up to float rounding: maximum relative difference at most 1e-4, for SGD
// and for Adagrad on the embeddings.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ps_client.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/model_parameters.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/synthetic.h"
#include "worker/model/cpu_model.h"

namespace ps {
namespace {

// Trains `steps` steps with `workers` workers of batch `batch` on a fresh cluster; returns the
// dense master copy and the rows of `keys`.
testing::ModelParameters Train(const std::string& optimizer, int workers, int batch, int steps,
                               const std::string& data, const std::vector<uint64_t>& keys,
                               const std::string& name) {
  const std::string job_path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  {
    std::ofstream job(job_path);
    job << absl::StrFormat(R"pb(name: "%s"
tables {
  name: "emb"
  dim: 4
  initializer { kind: UNIFORM low: -0.1 high: 0.1 }
  optimizer { type: "%s" learning_rate: 0.05 }
}
model { bottom_mlp: [8, 4] top_mlp: [8] shared_table: "emb" }
data { train_paths: "%s" }
training {
  mode: SYNC
  batch_size: %d
  steps: %d
  dense_optimizer { type: "adam" learning_rate: 0.01 }
  dense_push_every: 0
  seed: 3
}
cluster { num_shards: 8 num_servers: 2 num_workers: %d }
)pb",
                           name, optimizer, data, batch, steps, workers);
  }
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  const std::string address = (*cluster)->coordinator().address();
  {
    auto results = (*cluster)->RunWorkers(
        std::vector<std::vector<std::string>>(workers, {"--progress_s=60"}), absl::Minutes(5));
    INFO(results.status().ToString());
    REQUIRE(results.ok());
  }
  absl::StatusOr<testing::ModelParameters> parameters =
      testing::PullModelParameters(address, "emb", keys);
  INFO(parameters.status().ToString());
  REQUIRE(parameters.ok());
  return *parameters;
}

TEST_CASE("sync: 2 workers with batch B end where 1 worker with batch 2B does",
          "[integration][sync]") {
  const std::string optimizer = GENERATE("sgd", "adagrad");
  constexpr int kBatch = 32;
  constexpr int kSteps = 12;
  worker::SyntheticOptions data_options;
  data_options.cardinalities = {50};
  data_options.seed = 9;
  auto data = worker::SyntheticData::Create(data_options);
  REQUIRE(data.ok());
  const std::string path = absl::StrCat(testing::TempDir(), "/equivalence.tsv");
  REQUIRE(worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream,
                                     2 * kBatch * kSteps, path, false)
              .ok());
  absl::StatusOr<std::vector<uint64_t>> keys_or = testing::KeysOfFile(path);
  REQUIRE(keys_or.ok());
  const std::vector<uint64_t> keys = *keys_or;
  const testing::ModelParameters one = Train(optimizer, 1, 2 * kBatch, kSteps, path, keys, "one_" + optimizer);
  const testing::ModelParameters two = Train(optimizer, 2, kBatch, kSteps, path, keys, "two_" + optimizer);
  const double dense = testing::MaxRelativeDifference(one.dense, two.dense);
  const double rows = testing::MaxRelativeDifference(one.rows, two.rows);
  std::printf("%s: max relative difference dense %.3g, embeddings %.3g (%zu rows)\n",
              optimizer.c_str(), dense, rows, keys.size());
  CHECK(dense <= 1e-4);
  CHECK(rows <= 1e-4);
  // The runs did train: the parameters moved away from their initial values.
  auto fresh = Train(optimizer, 1, 2 * kBatch, 1, path, keys, "fresh_" + optimizer);
  CHECK(testing::MaxRelativeDifference(fresh.rows, one.rows) > 1e-3);
}

}  // namespace
}  // namespace ps

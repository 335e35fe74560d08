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
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/model_parameters.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/binary_convert.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/synthetic.h"
#include "worker/model/cpu_model.h"

namespace ps {
namespace {

// Trains `steps` steps with `workers` workers of batch `batch` on a fresh cluster; returns the
// dense master copy and the rows of `keys`, and, when `read_bytes` is set, the bytes of training
// data each worker read.
testing::ModelParameters Train(const std::string& optimizer, int workers, int batch, int steps,
                               const std::string& data, const std::vector<uint64_t>& keys,
                               const std::string& name, const std::string& format = "CRITEO",
                               std::vector<double>* read_bytes = nullptr,
                               const std::vector<std::string>& worker_flags = {}) {
  const std::string job_path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  {
    std::ofstream job(job_path);
    // clang-format off
    job << absl::StrFormat(R"pb(name: "%s"
tables {
  name: "emb"
  dim: 4
  initializer { kind: UNIFORM low: -0.1 high: 0.1 }
  optimizer { type: "%s" learning_rate: 0.05 }
}
model { bottom_mlp: [8, 4] top_mlp: [8] shared_table: "emb" }
data { format: %s train_paths: "%s" }
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
                           name, optimizer, format, data, batch, steps, workers);
    // clang-format on
  }
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  const std::string address = (*cluster)->coordinator().address();
  {
    std::vector<std::string> flags = {"--progress_s=60"};
    flags.insert(flags.end(), worker_flags.begin(), worker_flags.end());
    auto results = (*cluster)->RunWorkers(std::vector<std::vector<std::string>>(workers, flags),
                                          absl::Minutes(5));
    INFO(results.status().ToString());
    REQUIRE(results.ok());
    for (const auto& result : *results) {
      if (read_bytes != nullptr) {
        read_bytes->push_back(
            testing::JsonField(testing::ResultJson(result.stdout_text), "read_bytes"));
      }
    }
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

TEST_CASE("sync with binary data: each of 2 workers reads half of it and they end where 1 "
          "worker with batch 2B over the text does",
          "[integration][sync][binary]") {
  constexpr int kBatch = 32;
  constexpr int kSteps = 12;
  worker::SyntheticOptions data_options;
  data_options.cardinalities = {50};
  data_options.seed = 10;
  auto data = worker::SyntheticData::Create(data_options);
  REQUIRE(data.ok());
  const std::string text = absl::StrCat(testing::TempDir(), "/equivalence_binary.tsv");
  const std::string binary = absl::StrCat(testing::TempDir(), "/equivalence.bin");
  // Exactly the steps' samples: one epoch, so each worker's share is half the file.
  REQUIRE(worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream,
                                     2 * kBatch * kSteps, text, false)
              .ok());
  REQUIRE(worker::ConvertToBinary({text}, worker::SchemaOptions{}, binary, 64).ok());
  absl::StatusOr<std::vector<uint64_t>> keys = testing::KeysOfFile(text);
  REQUIRE(keys.ok());
  std::vector<double> one_read, two_read;
  const testing::ModelParameters one =
      Train("adagrad", 1, 2 * kBatch, kSteps, text, *keys, "text_one", "CRITEO", &one_read);
  const testing::ModelParameters two =
      Train("adagrad", 2, kBatch, kSteps, binary, *keys, "binary_two", "BINARY", &two_read);
  const double dense = testing::MaxRelativeDifference(one.dense, two.dense);
  const double rows = testing::MaxRelativeDifference(one.rows, two.rows);
  std::printf("binary shares: max relative difference dense %.3g, embeddings %.3g; read bytes "
              "text %.0f, binary %.0f and %.0f\n",
              dense, rows, one_read[0], two_read[0], two_read[1]);
  CHECK(dense <= 1e-4);
  CHECK(rows <= 1e-4);
  // Each worker read its half of the samples' arrays (264 bytes a Criteo sample), no more.
  REQUIRE(two_read.size() == 2);
  for (double bytes : two_read) CHECK(bytes == 264.0 * kBatch * kSteps);
}

TEST_CASE("sync: the pipelined step trains exactly the model the unpipelined one does",
          "[integration][sync][pipeline]") {
  // Pipelined, each worker reads the next batch and starts its pull as soon as a step's push is
  // sent, and sums the dense gradients while the push is in flight; the servers hold the pull
  // until the step is applied. Two workers: a step's two gradients sum the same in either order,
  // so the runs must agree to the bit.
  constexpr int kBatch = 32;
  constexpr int kSteps = 12;
  worker::SyntheticOptions data_options;
  data_options.cardinalities = {50};
  data_options.seed = 11;
  auto data = worker::SyntheticData::Create(data_options);
  REQUIRE(data.ok());
  const std::string path = absl::StrCat(testing::TempDir(), "/equivalence_pipeline.tsv");
  REQUIRE(worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream,
                                     2 * kBatch * kSteps, path, false)
              .ok());
  absl::StatusOr<std::vector<uint64_t>> keys = testing::KeysOfFile(path);
  REQUIRE(keys.ok());
  const testing::ModelParameters pipelined =
      Train("adagrad", 2, kBatch, kSteps, path, *keys, "pipelined", "CRITEO", nullptr,
            {"--pipeline=true"});
  const testing::ModelParameters one_by_one =
      Train("adagrad", 2, kBatch, kSteps, path, *keys, "unpipelined", "CRITEO", nullptr,
            {"--pipeline=false"});
  REQUIRE(pipelined.dense.size() == one_by_one.dense.size());
  REQUIRE(pipelined.rows.size() == one_by_one.rows.size());
  CHECK(pipelined.dense == one_by_one.dense);
  CHECK(pipelined.rows == one_by_one.rows);
  // The runs did train.
  auto fresh = Train("adagrad", 2, kBatch, 1, path, *keys, "pipeline_fresh");
  CHECK(testing::MaxRelativeDifference(fresh.rows, pipelined.rows) > 1e-3);
}

}  // namespace
}  // namespace ps

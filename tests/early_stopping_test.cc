// Early stopping and evaluation during training, for real: a ps_coordinator, two ps_server and two
// ps_worker processes on loopback train a small synthetic click log built to overfit (ids seen
// a few times each, many epochs). Worker 0 evaluates the held-out data every epoch; the held-out
// log loss stops improving and every worker stops after the same step, well before the 20
// epochs asked for. Every worker's RESULT carries worker 0's held-out figures, and a run of a
// few seconds still writes its progress and its metrics file.
//
// The model kept is the best one (early_stopping.restore_best): its checkpoint, taken after the
// evaluation with the lowest log loss, is restored into the servers and the workers at the end.
// The final held-out figures are those of that evaluation, and the model left in the cluster
// (rows and dense master copy, pulled once the workers are done) and in the end-of-training
// checkpoint is the one of the best checkpoint, not the one trained two epochs past it. In SYNC
// all of it exactly; in BOUNDED_STALENESS the checkpoint is cut just after the evaluation, which
// pushes still in flight may separate, so the final figures are close to the best evaluation's.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "tests/testing/checkpoints.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/model_parameters.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/synthetic.h"

namespace ps {
namespace {

// The string value of `key` in a RESULT line (no escapes: the paths of these tests have none).
std::string JsonString(const std::string& json, const std::string& key) {
  const std::string start = absl::StrCat("\"", key, "\":\"");
  const size_t at = json.find(start);
  if (at == std::string::npos) return "";
  const size_t from = at + start.size();
  return json.substr(from, json.find('"', from) - from);
}

// The evaluations of a metrics file: step -> (auc, logloss).
std::map<int64_t, std::pair<double, double>> Evaluations(const std::string& path) {
  std::map<int64_t, std::pair<double, double>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StrContains(line, "\"heldout_auc\"")) continue;
    out[static_cast<int64_t>(testing::JsonField(line, "step"))] = {
        testing::JsonField(line, "heldout_auc"), testing::JsonField(line, "heldout_logloss")};
  }
  return out;
}

// How many elements of `a` and `b` differ (all of the longer one's extra elements count), so that
// a failing comparison of large vectors or maps prints a number, not their contents.
template <typename T>
size_t Differences(const T& a, const T& b) {
  size_t n = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  auto x = a.begin();
  auto y = b.begin();
  for (; x != a.end() && y != b.end(); ++x, ++y) n += *x == *y ? 0 : 1;
  return n;
}

// The dense parameters of worker 0's state in the checkpoint in `folder`.
std::vector<float> WorkerParams(const std::string& folder) {
  rpc::CheckpointWorkerState state;
  std::ifstream in(absl::StrCat(folder, "/worker-00000.pb"), std::ios::binary);
  REQUIRE(in);
  REQUIRE(state.ParseFromIstream(&in));
  std::vector<float> params(state.params().size() / sizeof(float));
  std::memcpy(params.data(), state.params().data(), params.size() * sizeof(float));
  return params;
}

int CountLines(const std::string& path, absl::string_view containing) {
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += absl::StrContains(line, containing) ? 1 : 0;
  return n;
}

TEST_CASE("early stopping ends every worker at the same step on data built to overfit",
          "[integration][early_stopping]") {
  const bool sync = GENERATE(true, false);
  const std::string mode = sync ? "SYNC" : "BOUNDED_STALENESS staleness: 2";
  INFO("mode " << mode);
  const std::string dir = absl::StrCat(testing::TempDir(), sync ? "/sync" : "/bounded");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  worker::SyntheticOptions data_options;
  data_options.cardinalities = {100000};  // most ids are seen once or twice: easy to memorise
  data_options.seed = 11;
  auto data = worker::SyntheticData::Create(data_options);
  REQUIRE(data.ok());
  const std::string train = absl::StrCat(dir, "/es_train.tsv");
  const std::string heldout = absl::StrCat(dir, "/es_heldout.tsv");
  REQUIRE(worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream, 8000, train,
                                     false)
              .ok());
  REQUIRE(worker::WriteSyntheticFile(**data, worker::SyntheticData::kHeldoutStream, 2000, heldout,
                                     false)
              .ok());

  const std::string job_path = absl::StrCat(dir, "/es_job.pbtxt");
  {
    std::ofstream job(job_path);
    // Not formatted: clang-format would indent the job's text, its checkpoint_dir included.
    // clang-format off
    job << R"pb(name: "early_stopping_test"
tables {
  name: "emb"
  dim: 16
  initializer { kind: ZEROS }
  optimizer { type: "adagrad" learning_rate: 0.1 initial_accumulator: 0.01 }
}
model { bottom_mlp: [64, 16] top_mlp: [64, 32] shared_table: "emb" }
data { train_paths: ")pb" << train << R"pb(" eval_paths: ")pb" << heldout << R"pb(" }
training {
  mode: )pb" << mode << R"pb(
  batch_size: 64
  epochs: 20
  eval_every_epochs: 1
  early_stopping { metric: LOGLOSS patience: 2 }
  dense_optimizer { type: "adam" learning_rate: 0.001 }
  seed: 7
}
cluster {
  num_shards: 16
  num_servers: 2
  num_workers: 2
  checkpoint_dir: ")pb" << dir << R"pb(/es_checkpoints"
}
)pb";
    // clang-format on
  }
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  const std::string metrics0 = absl::StrCat(dir, "/es_metrics0.jsonl");
  const std::string metrics1 = absl::StrCat(dir, "/es_metrics1.jsonl");
  std::remove(metrics0.c_str());
  std::remove(metrics1.c_str());
  // The default progress interval (5 s) is longer than the run.
  auto workers = (*cluster)->RunWorkers(
      {{absl::StrCat("--metrics_file=", metrics0)}, {absl::StrCat("--metrics_file=", metrics1)}},
      absl::Minutes(5));
  INFO(workers.status().ToString());
  REQUIRE(workers.ok());
  const std::string r0 = testing::ResultJson((*workers)[0].stdout_text);
  const std::string r1 = testing::ResultJson((*workers)[1].stdout_text);
  std::printf("worker 0: %s\nworker 1: %s\n%s", r0.c_str(), r1.c_str(),
              (*workers)[0].stderr_text.c_str());
  INFO("worker 0: " << r0 << "\nworker 1: " << r1 << "\n" << (*workers)[0].stderr_text);

  // 8000 lines / (64 x 2) = 63 steps an epoch; 20 epochs would be 1260 steps.
  const double stopped = testing::JsonField(r0, "stopped_early_at");
  CHECK(stopped > 0);
  CHECK(stopped < 1260);
  CHECK(std::fmod(stopped, 63) == 0);  // at an epoch's end, where evaluations are
  CHECK(testing::JsonField(r1, "stopped_early_at") == stopped);
  CHECK(testing::JsonField(r0, "steps") == stopped);
  CHECK(testing::JsonField(r1, "steps") == stopped);
  const double evaluations = testing::JsonField(r0, "evaluations");
  CHECK(evaluations >= 3);  // the best, then `patience` worse ones
  CHECK(evaluations == stopped / 63);
  CHECK(testing::JsonField(r1, "evaluations") == evaluations);
  CHECK(absl::StrContains((*workers)[0].stderr_text, "early stopping after step"));

  // Worker 1 reports worker 0's held-out figures.
  CHECK(testing::JsonField(r0, "heldout_samples") == 2000);
  CHECK(testing::JsonField(r1, "heldout_samples") == 2000);
  CHECK(testing::JsonField(r1, "heldout_auc") == Approx(testing::JsonField(r0, "heldout_auc")).epsilon(1e-6));
  CHECK(testing::JsonField(r1, "heldout_by_rank") == 0);

  // A short run: progress from the first step, and a metrics line per report and evaluation.
  CHECK(absl::StrContains((*workers)[1].stderr_text, "worker 1: step 1/"));
  CHECK(CountLines(metrics0, "\"heldout_auc\"") == evaluations);
  CHECK(CountLines(metrics0, "\"loss\"") >= 2);  // after the first step, and at the end
  CHECK(CountLines(metrics1, "\"loss\"") >= 2);

  // The model kept is the one of the evaluation with the lowest log loss (the job's metric),
  // `patience` evaluations before the stop.
  const std::map<int64_t, std::pair<double, double>> evals = Evaluations(metrics0);
  REQUIRE(evals.size() == evaluations);
  int64_t best_step = -1;
  double best_logloss = std::numeric_limits<double>::infinity();
  for (const auto& [step, figures] : evals) {
    if (figures.second < best_logloss) {
      best_logloss = figures.second;
      best_step = step;
    }
  }
  CHECK(best_step == stopped - 2 * 63);
  CHECK(testing::JsonField(r0, "kept_step") == best_step);
  CHECK(testing::JsonField(r1, "kept_step") == best_step);
  CHECK(absl::StrContains((*workers)[0].stderr_text, "restored the best model"));
  // The final evaluation, after the restore, sees exactly the best evaluation's model in SYNC
  // (the metrics file's figures have 6 decimals); the last model was 2 epochs of overfitting past
  // it (log loss 0.624 against 0.501 in SYNC, 0.540 against 0.501 in BOUNDED_STALENESS, where
  // the final evaluation was 0.0002 from the best one's).
  const double best_auc = evals.at(best_step).first;
  const double margin = sync ? 2e-6 : 2e-3;
  CHECK(testing::JsonField(r0, "heldout_auc") == Approx(best_auc).margin(margin));
  CHECK(testing::JsonField(r0, "heldout_logloss") == Approx(best_logloss).margin(margin));
  CHECK(testing::JsonField(r1, "heldout_auc") == Approx(best_auc).margin(margin));
  CHECK(evals.at(static_cast<int64_t>(stopped)).second - best_logloss > 0.01);

  // The model in the cluster is the best checkpoint's: its rows (the embeddings, without the
  // optimizer's state) and worker 0's dense parameters, which it pushed as the dense master copy.
  const std::string kept = JsonString(r0, "kept_checkpoint");
  const std::string final_checkpoint = JsonString(r0, "checkpoint");
  INFO("kept " << kept << ", final " << final_checkpoint);
  REQUIRE(!kept.empty());
  REQUIRE(!final_checkpoint.empty());
  CHECK(kept != final_checkpoint);
  const testing::CheckpointStore best = testing::ReadCheckpointStore(kept, job_path);
  REQUIRE(best.rows.size() > 1000);
  std::vector<uint64_t> keys;
  std::vector<float> best_rows;
  for (const auto& [key, row] : best.rows) {
    if (keys.size() == 20000) break;
    keys.push_back(key.second);
    const float* values = reinterpret_cast<const float*>(row.data());
    best_rows.insert(best_rows.end(), values, values + 16);
  }
  absl::StatusOr<testing::ModelParameters> live =
      testing::PullModelParameters((*cluster)->coordinator_addresses(), "emb", keys);
  INFO(live.status().ToString());
  REQUIRE(live.ok());
  CHECK(Differences(live->rows, best_rows) == 0);
  // So is the end-of-training checkpoint's.
  CHECK(Differences(testing::ReadCheckpointStore(final_checkpoint, job_path).rows, best.rows) == 0);
  if (sync) {  // only SYNC checkpoints hold the workers' state
    const std::vector<float> best_dense = WorkerParams(kept);
    REQUIRE(!best_dense.empty());
    CHECK(Differences(live->dense, best_dense) == 0);
    CHECK(Differences(WorkerParams(final_checkpoint), best_dense) == 0);
  }
  CHECK((*cluster)->Terminate(absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace ps

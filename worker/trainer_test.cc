// Train in one process: a LocalClient's in-process store, a group of one, seeded data. What the
// cluster tests check across processes (tests/training_integration_test.cc and others), here for
// the loop itself: that a run is deterministic, what its progress lines, metrics lines and
// evaluations are, and that early stopping ends it.
#include "worker/trainer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tests/testing/local/local_client.h"
#include "tests/testing/temp_dir.h"
#include "worker/collective/allreduce.h"
#include "worker/testing/tiny_model.h"

namespace ps {
namespace worker {
namespace {

// `lines` Criteo-format lines with 2 integer and 3 categorical features, seeded; the label
// leans on the first categorical so that there is something to learn.
void WriteData(const std::string& path, int lines, uint64_t seed) {
  std::ofstream out(path);
  uint64_t x = seed;
  for (int i = 0; i < lines; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const uint64_t c0 = (x >> 20) % 23;
    const int label = (c0 % 3 == 0) != (((x >> 61) & 7) == 0) ? 1 : 0;
    out << label << "\t" << ((x >> 40) % 50) << "\t" << i % 9;
    out << "\t" << absl::StrFormat("%08x", c0);
    for (int f = 1; f < 3; ++f) out << "\t" << absl::StrFormat("%08x", (x >> (8 * f)) % 97);
    out << "\n";
  }
}

struct Case {
  const char* name;
  config::Training::Mode mode;
  int dense_sync_every;
  int eval_every_steps;
  bool early_stopping;
};

config::Job TinyJob(const Case& c, const std::string& train, const std::string& heldout) {
  config::Job job;
  job.set_name("trainer_test");
  config::Table* t = AddTinyModel(&job);
  t->mutable_initializer()->set_kind(config::Initializer::UNIFORM);
  t->mutable_initializer()->set_low(-0.05f);
  t->mutable_initializer()->set_high(0.05f);
  t->mutable_optimizer()->set_type("adagrad");
  t->mutable_optimizer()->set_learning_rate(0.1f);
  job.mutable_data()->add_train_paths(train);
  job.mutable_data()->add_eval_paths(heldout);
  config::Training* tr = job.mutable_training();
  tr->set_mode(c.mode);
  tr->set_batch_size(64);
  tr->set_epochs(2);
  tr->set_dense_sync_every(c.dense_sync_every);
  tr->mutable_dense_optimizer()->set_type("adam");
  tr->mutable_dense_optimizer()->set_learning_rate(0.01f);
  tr->set_seed(7);
  if (c.eval_every_steps > 0) tr->set_eval_every_steps(c.eval_every_steps);
  if (c.early_stopping) {
    // A min_delta no evaluation can beat: training stops after the patience's evaluations.
    tr->mutable_early_stopping()->set_patience(2);
    tr->mutable_early_stopping()->set_min_delta(1.0f);
    // In process, without a coordinator to keep the best model in a checkpoint: the last stays.
    tr->mutable_early_stopping()->set_restore_best(false);
  }
  job.mutable_cluster()->set_num_workers(1);
  job.mutable_cluster()->set_num_shards(4);
  return job;
}

struct Run {
  TrainResult result;
  std::vector<float> params;  // the dense model pushed to the servers at the end
  std::string progress;
  std::vector<std::string> metrics_lines;
};

Run TrainOnce(const config::Job& job, const std::string& metrics_path) {
  auto client = testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  auto group = AllReduce::CreateGloo(nullptr, "trainer_test", 0, 1, absl::Seconds(10));
  REQUIRE(group.ok());
  char* buffer = nullptr;
  size_t size = 0;
  FILE* progress = open_memstream(&buffer, &size);
  REQUIRE(progress != nullptr);
  std::remove(metrics_path.c_str());
  TrainerOptions options;
  options.progress = progress;
  options.progress_interval = absl::Hours(1);  // the first step's line, then the last's
  options.metrics_path = metrics_path;
  options.backend = Backend::kCpu;
  absl::StatusOr<TrainResult> result =
      Train(job, client->get(), nullptr, 1, group->get(), options);
  std::fclose(progress);
  Run run;
  run.progress.assign(buffer, size);
  std::free(buffer);
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  run.result = *result;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) run.metrics_lines.push_back(line);
  // The dense model's size: what the CPU model of this shape holds.
  absl::StatusOr<std::unique_ptr<Model>> model =
      CreateModel(*ModelSpec::FromJob(job), job.training().seed(), Backend::kCpu);
  REQUIRE(model.ok());
  run.params.resize((*model)->num_params());
  REQUIRE((*client)->PullDense("dense/model", absl::MakeSpan(run.params)).ok());
  return run;
}

TEST_CASE("Train in process is deterministic and reports every step, evaluation and stop",
          "[worker][trainer]") {
  const Case c = GENERATE(values<Case>({
      {"sync", config::Training::SYNC, 1, 0, false},
      {"sync evaluating", config::Training::SYNC, 1, 10, false},
      {"sync stopping early", config::Training::SYNC, 1, 5, true},
      {"async local SGD (pipelined)", config::Training::ASYNC, 4, 8, false},
  }));
  INFO(c.name);
  auto dir = testing::ScopedTempDir::Create("trainer_test");
  REQUIRE(dir.ok());
  const std::string train = absl::StrCat((*dir)->path(), "/train.tsv");
  const std::string heldout = absl::StrCat((*dir)->path(), "/heldout.tsv");
  WriteData(train, 64 * 20 + 17, 1);  // 21 blocks of 64, the last one short
  WriteData(heldout, 500, 2);
  const config::Job job = TinyJob(c, train, heldout);
  const std::string metrics = absl::StrCat((*dir)->path(), "/metrics.jsonl");

  const Run first = TrainOnce(job, metrics);
  const Run second = TrainOnce(job, metrics);
  const TrainResult& r = first.result;
  // The same numbers, bit for bit, and the same progress (but for the rates).
  CHECK(second.params == first.params);
  CHECK(second.result.final_loss == r.final_loss);
  CHECK(second.result.heldout_auc == r.heldout_auc);
  CHECK(second.result.heldout_logloss == r.heldout_logloss);
  CHECK(second.result.steps == r.steps);
  CHECK(second.result.evaluations.size() == r.evaluations.size());
  // For comparing runs of different builds of the loop (a refactoring must not move them).
  double checksum = 0;
  for (size_t i = 0; i < first.params.size(); ++i) checksum += first.params[i] * (1.0 + i % 7);
  std::printf("trainer_test %s: steps %lld final_loss %.9g heldout auc %.9g logloss %.9g params %.9g"
              " evaluations %zu stopped %lld\n",
              c.name, static_cast<long long>(r.steps), r.final_loss, r.heldout_auc,
              r.heldout_logloss, checksum, r.evaluations.size(),
              static_cast<long long>(r.stopped_early_at));

  CHECK(r.backend == "cpu");
  CHECK(r.samples == (c.early_stopping ? r.steps * 64 : 64 * 20 * 2 + 17 * 2));
  CHECK(r.heldout_samples == 500);
  CHECK(std::isfinite(r.final_loss));
  CHECK(r.mean_batch > 0);
  CHECK(r.checkpoint.empty());
  if (c.early_stopping) {
    // Evaluations after steps 5, 10 and 15: no improvement by 1.0 twice after the first.
    CHECK(r.stopped_early_at == 15);
    CHECK(r.kept_step == -1);  // restore_best: false
    CHECK(r.steps == 15);
    REQUIRE(r.evaluations.size() == 3);
    CHECK(absl::StrContains(first.progress, "worker 0: early stopping after step 15"));
  } else {
    CHECK(r.stopped_early_at == -1);
    CHECK(r.steps == 42);
  }
  if (c.eval_every_steps > 0) {
    for (size_t i = 0; i < r.evaluations.size(); ++i) {
      CHECK(r.evaluations[i].step == static_cast<int64_t>(i + 1) * c.eval_every_steps);
      CHECK(r.evaluations[i].metrics.samples == 500);
    }
    CHECK(absl::StrContains(first.progress, absl::StrFormat("worker 0: held-out after step %d: ",
                                                            c.eval_every_steps)));
  } else {
    CHECK(r.evaluations.empty());
  }
  // The step breakdown: its parts add up to its total, which is the training's time (from the
  // start to `seconds`), so the mean step is seconds / steps. No backend measures copy.
  absl::Duration parts;
  for (const absl::Duration part : r.step_times.parts) {
    CHECK(part >= absl::ZeroDuration());
    parts += part;
  }
  CHECK(parts == r.step_times.total);
  CHECK(r.step_times[StepPart::kCopy] == absl::ZeroDuration());
  CHECK(!r.copy_measured);
  CHECK(r.step_times[StepPart::kCompute] > absl::ZeroDuration());
  CHECK(r.step_times[StepPart::kPull] > absl::ZeroDuration());
  CHECK(r.step_times[StepPart::kRead] > absl::ZeroDuration());
  CHECK(absl::ToDoubleSeconds(r.step_times.total) <= r.seconds);
  CHECK(absl::ToDoubleSeconds(r.step_times.total) >= 0.95 * r.seconds);
  CHECK(absl::StrContains(first.progress, "  per step: read "));
  CHECK(!absl::StrContains(first.progress, " copy "));
  // Progress: the first step's line and the last's; the metrics file, one JSON line for each
  // and one per evaluation.
  // The first line counts the steps the job asks for; early stopping ends training before.
  CHECK(absl::StrContains(first.progress, "worker 0: step 1/42  batch 64  "));
  CHECK(absl::StrContains(first.progress,
                          absl::StrFormat("worker 0: step %d/%d  batch ", r.steps, r.steps)));
  REQUIRE(first.metrics_lines.size() == 2 + r.evaluations.size());
  CHECK(absl::StartsWith(first.metrics_lines.front(), "{\"rank\":0,\"step\":1,\"batch\":64,"));
  CHECK(absl::StartsWith(first.metrics_lines.back(),
                         absl::StrCat("{\"rank\":0,\"step\":", r.steps, ",\"batch\":")));
}

}  // namespace
}  // namespace worker
}  // namespace ps

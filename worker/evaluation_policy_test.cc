#include "worker/evaluation_policy.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace ps {
namespace worker {
namespace {

// Rank `rank` of a group of two whose other rank adds `other` (worker 0's figures, as rank 1
// sees them) to the one collective of each evaluation; it counts the collectives.
class FakeGroup final : public AllReduce {
 public:
  FakeGroup(int rank, std::vector<float> other) : rank_(rank), other_(std::move(other)) {}
  absl::Status SumInPlace(absl::Span<float> data) override {
    ++collectives;
    for (size_t i = 0; i < data.size() && i < other_.size(); ++i) data[i] += other_[i];
    return absl::OkStatus();
  }
  int rank() const override { return rank_; }
  int size() const override { return 2; }

  int collectives = 0;

 private:
  const int rank_;
  const std::vector<float> other_;
};

// Captures what a FILE* receives.
class Captured {
 public:
  Captured() : file_(open_memstream(&buffer_, &size_)) { REQUIRE(file_ != nullptr); }
  ~Captured() {
    if (file_ != nullptr) std::fclose(file_);
    std::free(buffer_);
  }
  FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(buffer_, size_);
  }

 private:
  char* buffer_ = nullptr;
  size_t size_ = 0;
  FILE* file_;
};

TEST_CASE("EvaluationPolicy: worker 0 evaluates when due, and early stopping ends training",
          "[worker][evaluation_policy]") {
  config::Training training;
  training.set_eval_every_steps(5);
  training.mutable_early_stopping()->set_patience(2);
  FakeGroup group(0, {});
  // AUC 0.7 after step 5, then no better: training stops after the second evaluation without
  // improvement (step 15).
  const std::vector<double> aucs = {0.7, 0.65, 0.7};
  std::vector<int64_t> clocks;
  Captured progress, metrics;
  EvaluationPolicy::Options options;
  options.sync_clock = true;
  options.epoch_steps = 10;
  options.progress = progress.file();
  options.metrics = metrics.file();
  options.start = absl::Now();
  std::vector<int64_t> best;  // the evaluations that improved the metric
  options.on_best = [&](int64_t steps_done) {
    best.push_back(steps_done);
    return absl::OkStatus();
  };
  EvaluationPolicy policy(
      training, &group,
      [&](int64_t clock) -> absl::StatusOr<HeldoutMetrics> {
        const double auc = aucs[clocks.size()];
        clocks.push_back(clock);
        return HeldoutMetrics{auc, 0.5, 100};
      },
      options);
  CHECK(policy.interval() == 5);
  for (int64_t done = 1; done < 5; ++done) CHECK(*policy.AfterSteps(done) == false);
  CHECK(clocks.empty());
  CHECK(*policy.AfterSteps(5) == false);
  CHECK(*policy.AfterSteps(7) == false);  // not due
  CHECK(*policy.AfterSteps(10) == false);
  CHECK(*policy.AfterSteps(15) == true);
  CHECK(clocks == std::vector<int64_t>{5, 10, 15});  // SYNC: as of the steps done
  CHECK(best == std::vector<int64_t>{5});
  CHECK(group.collectives == 3);
  CHECK(policy.stopped_at() == 15);
  REQUIRE(policy.evaluations().size() == 3);
  CHECK(policy.evaluations()[1].step == 10);
  CHECK(policy.evaluations()[1].metrics.auc == 0.65);
  const std::string lines = progress.text();
  CHECK(absl::StrContains(lines,
                          "worker 0: held-out after step 5: auc 0.7000  logloss 0.5000  (100 "
                          "samples)\n"));
  CHECK(absl::StrContains(lines, "worker 0: held-out after step 10 (epoch 1): auc 0.6500"));
  CHECK(absl::StrContains(lines,
                          "worker 0: early stopping after step 15: no better held-out auc for 2 "
                          "evaluations (best 0.7000 after step 5)\n"));
  CHECK(absl::StrContains(metrics.text(), "{\"rank\":0,\"step\":10,\"seconds\":"));
  CHECK(absl::StrContains(metrics.text(),
                          "\"heldout_auc\":0.650000,\"heldout_logloss\":0.500000,"
                          "\"heldout_samples\":100}\n"));

  const absl::StatusOr<HeldoutMetrics> final_figures = policy.Final(true);
  REQUIRE(final_figures.ok());
  CHECK(clocks.back() == -1);  // as the servers are
  const absl::StatusOr<HeldoutMetrics> none = policy.Final(false);
  REQUIRE(none.ok());
  CHECK(std::isnan(none->auc));
  CHECK(none->samples == 0);
}

TEST_CASE("EvaluationPolicy: the other workers get worker 0's figures and decision",
          "[worker][evaluation_policy]") {
  config::Training training;
  training.set_eval_every_epochs(2);
  FakeGroup group(1, {0.75f, 0.25f, 300.0f, 1.0f});  // worker 0 says: stop
  Captured progress;
  EvaluationPolicy::Options options;
  options.epoch_steps = 4;
  options.start_step = 9;  // resumed: the first evaluation due is after step 16
  options.progress = progress.file();
  EvaluationPolicy policy(
      training, &group,
      [](int64_t) -> absl::StatusOr<HeldoutMetrics> {
        FAIL("only worker 0 evaluates");
        return HeldoutMetrics{};
      },
      options);
  CHECK(policy.interval() == 8);
  CHECK(*policy.AfterSteps(12) == false);
  CHECK(group.collectives == 0);
  CHECK(*policy.AfterSteps(16) == true);
  CHECK(policy.stopped_at() == 16);
  REQUIRE(policy.evaluations().size() == 1);
  CHECK(policy.evaluations()[0].metrics.auc == 0.75);
  CHECK(policy.evaluations()[0].metrics.logloss == 0.25);
  CHECK(policy.evaluations()[0].metrics.samples == 300);
  CHECK(progress.text().empty());  // worker 0 writes the lines
}

TEST_CASE("EvaluationPolicy: keeping the best model fails the evaluation that improved",
          "[worker][evaluation_policy]") {
  config::Training training;
  training.set_eval_every_steps(5);
  training.mutable_early_stopping()->set_metric(config::EarlyStopping::LOGLOSS);
  FakeGroup group(0, {});
  EvaluationPolicy::Options options;
  std::vector<int64_t> best;
  options.on_best = [&](int64_t steps_done) {
    best.push_back(steps_done);
    return steps_done == 15 ? absl::FailedPreconditionError("no checkpoint") : absl::OkStatus();
  };
  const std::vector<double> loglosses = {0.5, 0.6, 0.4};
  size_t evaluated = 0;
  EvaluationPolicy policy(
      training, &group,
      [&](int64_t) -> absl::StatusOr<HeldoutMetrics> {
        return HeldoutMetrics{0.7, loglosses[evaluated++], 100};
      },
      options);
  CHECK(*policy.AfterSteps(5) == false);
  CHECK(*policy.AfterSteps(10) == false);
  // Its error is the evaluation's, before the other workers get the figures.
  CHECK(policy.AfterSteps(15).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(best == std::vector<int64_t>{5, 15});
  CHECK(group.collectives == 2);
}

TEST_CASE("EvaluationPolicy without an interval never evaluates during training",
          "[worker][evaluation_policy]") {
  FakeGroup group(0, {});
  EvaluationPolicy policy(
      config::Training(), &group,
      [](int64_t) -> absl::StatusOr<HeldoutMetrics> { return absl::UnavailableError("gone"); },
      {});
  CHECK(policy.interval() == 0);
  CHECK(*policy.AfterSteps(1000000) == false);
  CHECK(policy.stopped_at() == -1);
  // A failed evaluation is the result's error.
  CHECK(policy.Final(true).status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace worker
}  // namespace ps

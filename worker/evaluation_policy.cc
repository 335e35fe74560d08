#include "worker/evaluation_policy.h"

#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace ps {
namespace worker {

EvaluationPolicy::EvaluationPolicy(const config::Training& training, AllReduce* group,
                                   Evaluate evaluate, Options options)
    : training_(training),
      group_(group),
      evaluate_(std::move(evaluate)),
      options_(options),
      interval_(training.eval_every_steps() > 0
                    ? static_cast<int64_t>(training.eval_every_steps())
                    : int64_t{training.eval_every_epochs()} * options.epoch_steps),
      next_eval_(interval_ > 0 ? (options.start_step / interval_ + 1) * interval_
                               : std::numeric_limits<int64_t>::max()) {
  if (training.has_early_stopping()) early_stopping_.emplace(training.early_stopping());
}

absl::StatusOr<bool> EvaluationPolicy::AfterSteps(int64_t steps_done) {
  if (steps_done < next_eval_) return false;
  while (next_eval_ <= steps_done) next_eval_ += interval_;
  const bool zero = group_->rank() == 0;
  HeldoutMetrics m;
  bool stop = false;
  if (zero) {
    PS_ASSIGN_OR_RETURN(m, evaluate_(options_.sync_clock ? steps_done : -1));
    if (early_stopping_.has_value()) {
      stop = early_stopping_->Update(steps_done, m.auc, m.logloss);
      if (early_stopping_->best_step() == steps_done && options_.on_best) {
        PS_RETURN_IF_ERROR(options_.on_best(steps_done));
      }
    }
  }
  PS_RETURN_IF_ERROR(ShareFromWorkerZero(&m, &stop));
  evaluations_.push_back(Evaluation{steps_done, m});
  if (zero) Report(steps_done, m);
  if (!stop) return false;
  stopped_at_ = steps_done;
  if (zero && options_.progress != nullptr) {
    absl::FPrintF(options_.progress,
                  "worker 0: early stopping after step %d: no better held-out %s for %d "
                  "evaluations (best %.4f after step %d)\n",
                  steps_done,
                  training_.early_stopping().metric() == config::EarlyStopping::AUC ? "auc"
                                                                                    : "logloss",
                  training_.early_stopping().patience(), early_stopping_->best(),
                  early_stopping_->best_step());
  }
  return true;
}

absl::StatusOr<HeldoutMetrics> EvaluationPolicy::Final(bool evaluate) {
  HeldoutMetrics m;
  if (group_->rank() == 0 && evaluate) {
    PS_ASSIGN_OR_RETURN(m, evaluate_(-1));
  }
  bool no_stop = false;
  PS_RETURN_IF_ERROR(ShareFromWorkerZero(&m, &no_stop));
  return m;
}

absl::Status EvaluationPolicy::ShareFromWorkerZero(HeldoutMetrics* metrics, bool* stop) {
  // One collective, in which the others' inputs count for nothing; a group of one has nothing
  // to do.
  const bool zero = group_->rank() == 0;
  std::vector<float> figures(4, 0.0f);
  if (zero) {
    figures = {static_cast<float>(metrics->auc), static_cast<float>(metrics->logloss),
               static_cast<float>(metrics->samples), *stop ? 1.0f : 0.0f};
  }
  PS_RETURN_IF_ERROR(group_->SumInPlace(absl::MakeSpan(figures)));
  if (!zero) {
    *metrics = HeldoutMetrics{figures[0], figures[1], static_cast<int64_t>(figures[2])};
    *stop = figures[3] > 0.5f;
  }
  return absl::OkStatus();
}

void EvaluationPolicy::Report(int64_t steps_done, const HeldoutMetrics& m) {
  const int64_t epoch_steps = options_.epoch_steps;
  if (options_.progress != nullptr) {
    absl::FPrintF(options_.progress,
                  "worker 0: held-out after step %d%s: auc %.4f  logloss %.4f  (%d samples)\n",
                  steps_done,
                  epoch_steps > 0 && steps_done % epoch_steps == 0
                      ? absl::StrFormat(" (epoch %d)", steps_done / epoch_steps)
                      : std::string(),
                  m.auc, m.logloss, m.samples);
  }
  if (options_.metrics != nullptr) {
    absl::FPrintF(options_.metrics,
                  "{\"rank\":0,\"step\":%d,\"seconds\":%.3f,\"heldout_auc\":%.6f,"
                  "\"heldout_logloss\":%.6f,\"heldout_samples\":%d}\n",
                  steps_done, absl::ToDoubleSeconds(absl::Now() - options_.start), m.auc,
                  m.logloss, m.samples);
    std::fflush(options_.metrics);
  }
}

}  // namespace worker
}  // namespace ps

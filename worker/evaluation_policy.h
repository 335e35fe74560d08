// The held-out evaluations of a training job and the early-stopping decision: when to evaluate,
// who evaluates, and how every worker learns the figures and the decision.
//
// With training.eval_every_steps or eval_every_epochs, worker 0 evaluates the held-out data after
// every such number of steps (a SYNC evaluation sees exactly the steps before it) and hands its
// figures, and with training.early_stopping its decision to stop (EarlyStopping), to every worker
// through one collective of the dense group, in which the others' inputs count for nothing; all
// workers then stop after the same step. At the end worker 0 evaluates once more, and every
// worker gets the figures the same way. Worker 0 writes a progress line and a JSON line of the
// metrics file for each evaluation, and a line when early stopping ends training.
#ifndef PS_WORKER_EVALUATION_POLICY_H_
#define PS_WORKER_EVALUATION_POLICY_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "worker/collective/allreduce.h"
#include "worker/early_stopping.h"
#include "worker/heldout_eval.h"

namespace ps {
namespace worker {

// A held-out evaluation during training.
struct Evaluation {
  int64_t step = 0;  // after this many steps
  HeldoutMetrics metrics;
};

// An EvaluationPolicy runs one worker's part of the evaluations. Thread-compatible.
class EvaluationPolicy {
 public:
  // Evaluates the model on the held-out data as of step clock `clock` (-1: whatever the servers
  // hold): EvaluateHeldout, in the trainer. Called on worker 0 only.
  using Evaluate = std::function<absl::StatusOr<HeldoutMetrics>(int64_t clock)>;

  struct Options {
    // Steps in one pass over the data (0: not counted): eval_every_epochs needs it, and an
    // evaluation at the end of an epoch says so in its progress line.
    int64_t epoch_steps = 0;
    // The step training starts at (> 0 for a resumed job): the first evaluation is the first due
    // after it.
    int64_t start_step = 0;
    // SYNC jobs evaluate as of the clock of the steps done; the others as the servers are.
    bool sync_clock = false;
    // Worker 0's progress lines and JSON lines (not owned; null: none), and the time training
    // started (the JSON lines' "seconds").
    FILE* progress = nullptr;
    FILE* metrics = nullptr;
    absl::Time start;
    // Worker 0, after an evaluation that improved early stopping's metric, before the other
    // workers get its figures: keeps that model (BestModel::Keep), with the steps done. Its error
    // is AfterSteps'. Null: nothing.
    std::function<absl::Status(int64_t steps_done)> on_best;
  };

  // `group` (the dense collective group of every worker) is not owned and outlives this.
  EvaluationPolicy(const config::Training& training, AllReduce* group, Evaluate evaluate,
                   Options options);

  // Steps between evaluations (0: none).
  int64_t interval() const { return interval_; }

  // After the dense collective that ends `steps_done` steps, in the same order on every worker:
  // when an evaluation is due, worker 0 evaluates and every worker gets the figures (appended to
  // evaluations()) and the early-stopping decision; an improvement of the metric goes to
  // Options::on_best first. Returns whether training ends after steps_done (then stopped_at() is
  // steps_done). Errors of the evaluation and of on_best (on worker 0) and of the collective.
  absl::StatusOr<bool> AfterSteps(int64_t steps_done);

  // At the end of training: with `evaluate`, worker 0 evaluates as the servers are (NaN figures
  // and no samples otherwise), and every worker gets its figures. Errors as AfterSteps.
  absl::StatusOr<HeldoutMetrics> Final(bool evaluate);

  // The evaluations during training, in order; the same on every worker.
  const std::vector<Evaluation>& evaluations() const { return evaluations_; }
  // The step after which early stopping ended training, or -1.
  int64_t stopped_at() const { return stopped_at_; }

 private:
  // Hands worker 0's figures and its `stop` decision to every worker.
  absl::Status ShareFromWorkerZero(HeldoutMetrics* metrics, bool* stop);
  // Worker 0's progress and JSON lines of the evaluation after `steps_done`.
  void Report(int64_t steps_done, const HeldoutMetrics& m);

  // Constant after construction.
  const config::Training training_;
  AllReduce* const group_;
  const Evaluate evaluate_;
  const Options options_;
  const int64_t interval_;

  std::optional<EarlyStopping> early_stopping_;
  int64_t next_eval_;
  std::vector<Evaluation> evaluations_;
  int64_t stopped_at_ = -1;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_EVALUATION_POLICY_H_

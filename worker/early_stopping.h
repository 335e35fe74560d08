// Early stopping: the decision to end training when a held-out metric stops improving.
#ifndef PS_WORKER_EARLY_STOPPING_H_
#define PS_WORKER_EARLY_STOPPING_H_

#include <cstdint>

#include "proto/job.pb.h"

namespace ps {
namespace worker {

// An EarlyStopping watches the held-out metric of successive evaluations (the job's
// training.early_stopping) and says when `patience` evaluations in a row have brought no
// improvement larger than `min_delta` over the best so far. A NaN metric (no samples) never
// improves. Thread-compatible.
class EarlyStopping {
 public:
  explicit EarlyStopping(const config::EarlyStopping& options);

  // Records the metric of the evaluation after `step` steps; true when training should stop now.
  // `auc` and `logloss` are the evaluation's figures; the option's metric picks one.
  bool Update(int64_t step, double auc, double logloss);

  // The best metric so far and the step of its evaluation (-1 before any improvement).
  double best() const { return best_; }
  int64_t best_step() const { return best_step_; }
  // Evaluations since the best one.
  uint32_t since_best() const { return since_best_; }

 private:
  // Constant after construction.
  const config::EarlyStopping options_;

  double best_;
  int64_t best_step_ = -1;
  uint32_t since_best_ = 0;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_EARLY_STOPPING_H_

// The held-out evaluation: the model's AUC and log loss on the job's eval_paths, with the
// embedding rows the servers hold at the time.
#ifndef PS_WORKER_HELDOUT_EVAL_H_
#define PS_WORKER_HELDOUT_EVAL_H_

#include <cstdint>
#include <limits>

#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "proto/job.pb.h"
#include "worker/model/model.h"

namespace ps {
namespace worker {

struct HeldoutMetrics {
  // NaN when nothing was evaluated (no eval_paths, or files without a valid line).
  double auc = std::numeric_limits<double>::quiet_NaN();
  double logloss = std::numeric_limits<double>::quiet_NaN();
  int64_t samples = 0;
};

// Predicts every line of the job's data.eval_paths with `model` (its current dense parameters)
// and rows pulled through `client` as step `clock` (SYNC: a pull for step t sees exactly the
// steps before t; -1 for whatever the servers hold), in batches of 4096. The client's clock is
// left at `clock`. Returns AUC, log loss and the number of samples (NaN, NaN, 0 without
// eval_paths); errors: those of the data (NOT_FOUND for a missing file, ...) and the client's.
absl::StatusOr<HeldoutMetrics> EvaluateHeldout(const config::Job& job, Client* client,
                                               Model* model, int64_t clock);

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_HELDOUT_EVAL_H_

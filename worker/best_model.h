// Early stopping's best model (training.early_stopping.restore_best, with a checkpoint_dir): the
// model of the evaluation with the best held-out metric is kept in a checkpoint, and when early
// stopping ends training it is put back into the cluster, so that the model left on the servers
// and the workers (and in the end-of-training checkpoint) is the best one, not the one trained
// `patience` evaluations past it.
#ifndef PS_WORKER_BEST_MODEL_H_
#define PS_WORKER_BEST_MODEL_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/coordinator_client.h"
#include "proto/job.pb.h"
#include "worker/collective/allreduce.h"

namespace ps {
namespace worker {

// A BestModel keeps one worker's part of the best model. Thread-compatible.
//
// Worker 0 has the coordinator take a checkpoint after each evaluation that improved the metric
// (Keep), while every other worker waits for that evaluation's figures: in SYNC at that step
// boundary, with worker 0's dense state, so exactly the model evaluated; in the other modes of the
// servers as they are then (the pushes of earlier steps still in flight may land first, as they
// may during the evaluation). It keeps a copy of its dense parameters and dense optimizer state.
// When early stopping ended training, every worker calls Restore once it has finished pushing:
// the coordinator restores that checkpoint into the servers' tables, and every worker takes worker
// 0's dense state, through the dense collective group.
class BestModel {
 public:
  // `coordinator` (called by worker 0 only: null on the others, or for a job that does not keep
  // the best model) and `group` (the dense collective group of every worker) are not owned and
  // outlive this. `progress` (null: none) gets worker 0's lines.
  BestModel(const config::Job& job, CoordinatorClient* coordinator, AllReduce* group,
            FILE* progress);

  // Whether the job keeps the best model: early stopping with restore_best and a checkpoint_dir
  // (ValidateJob refuses restore_best without one).
  bool enabled() const { return enabled_; }

  // Worker 0, after the evaluation after `steps_done` steps improved the metric, while the other
  // workers wait for its figures: has the coordinator checkpoint the cluster (SYNC: at boundary
  // `steps_done`, with `params` and `optimizer_state` as the workers' state), and keeps copies of
  // them. The coordinator's error, with its code, as "keeping the best model after step N: ...";
  // then the best model kept before stays. Nothing when !enabled().
  absl::Status Keep(int64_t steps_done, absl::Span<const float> params,
                    absl::Span<const float> optimizer_state);

  // Every worker, when training ended, once its pushes are acknowledged: when `stopped_early` and
  // a best model was kept, worker 0 (after a collective that says every worker is done) has the
  // coordinator restore its checkpoint into the servers, and every worker's `params` and
  // `optimizer_state` become worker 0's kept copies. Returns the step after which the restored
  // model was evaluated, or -1 when nothing was restored (not enabled, not stopped early, or no
  // evaluation improved: the last model stays). Errors of the collective; the coordinator's, with
  // its code, as "restoring the best model of step N from P: ..." (on worker 0; the other workers
  // get FAILED_PRECONDITION saying that worker 0 could not), with `params` and `optimizer_state`
  // unchanged and the servers possibly partly restored.
  absl::StatusOr<int64_t> Restore(bool stopped_early, absl::Span<float> params,
                                  absl::Span<float> optimizer_state);

  // Worker 0: the folder of the checkpoint of the best model kept so far; empty on the others
  // and before any.
  const std::string& checkpoint() const { return checkpoint_; }

 private:
  // Constant after construction.
  CoordinatorClient* const coordinator_;
  AllReduce* const group_;
  FILE* const progress_;
  const bool enabled_;
  const bool sync_;
  const std::string optimizer_;  // the dense optimizer's type

  // Worker 0: the best model kept so far.
  int64_t step_ = -1;
  std::string checkpoint_;
  std::vector<float> params_;
  std::vector<float> optimizer_state_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_BEST_MODEL_H_

// A worker's part in the checkpoints of its training job: in SYNC jobs with a checkpoint_dir, its
// state (dense parameters and the dense optimizer's state) at each step boundary for the
// checkpoints that ask for it (WorkerCheckpointer), the state a restored job resumes from, and,
// on worker 0 of a job with checkpoint_at_end, the checkpoint the coordinator takes once every
// worker finished. Jobs in the other modes have no worker state in their checkpoints (no step
// boundary holds it); worker 0 still has their end-of-training checkpoint taken.
#ifndef PS_WORKER_CHECKPOINT_POLICY_H_
#define PS_WORKER_CHECKPOINT_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/coordinator_client.h"
#include "proto/job.pb.h"
#include "worker/step_sync.h"
#include "worker/worker_checkpoint.h"

namespace ps {
namespace worker {

// A CheckpointPolicy follows one worker's step boundaries. Thread-compatible.
class CheckpointPolicy {
 public:
  // `coordinator` and `sync` (whose clock answers carry the checkpoints' notices) are not owned
  // and outlive this; `coordinator` may be null for a job without a checkpoint_dir.
  CheckpointPolicy(const config::Job& job, CoordinatorClient* coordinator, StepSync* sync,
                   int rank);

  // A restored job's state: the checkpoint in `folder`'s state of worker `rank` copied into
  // `params` and `optimizer_state` (the job's dense optimizer's). Errors of
  // WorkerCheckpointer::Load (FAILED_PRECONDITION when it holds no state or one that does not
  // fit, DATA_LOSS, ...), with the outputs unchanged.
  static absl::Status Restore(const config::Job& job, const std::string& folder, int rank,
                              absl::Span<float> params, absl::Span<float> optimizer_state);

  // At boundary `step` (before the step): keeps the state, and answers the checkpoint the latest
  // clock answer asks for. Errors of WorkerCheckpointer::Answer. Nothing for jobs without worker
  // state in their checkpoints.
  absl::Status AtBoundary(int64_t step, absl::Span<const float> params,
                          absl::Span<const float> optimizer_state);

  // Once training is done, at boundary `boundary` after the last step `last_step`: keeps the
  // final state, reports the clock again and answers a checkpoint at the last boundary that may
  // still ask. Errors of StepSync::Refresh and WorkerCheckpointer::Answer.
  absl::Status AtEnd(int64_t boundary, int64_t last_step, absl::Span<const float> params,
                     absl::Span<const float> optimizer_state);

  // Worker 0 of a job with a checkpoint_dir and checkpoint_at_end, once every worker's pushes
  // are acknowledged: has the coordinator take a checkpoint (SYNC: at `boundary`, with this
  // worker's final state; otherwise of whatever the servers hold), prints a line about it on
  // stderr and returns its folder. Everyone else: "". Errors of the coordinator, with their code,
  // as "the end-of-training checkpoint failed: ...".
  absl::StatusOr<std::string> TakeFinal(int64_t boundary);

 private:
  // Constant after construction.
  CoordinatorClient* const coordinator_;
  StepSync* const sync_;
  const int rank_;
  const bool sync_mode_;
  const bool at_end_;  // a checkpoint_dir and checkpoint_at_end

  // SYNC jobs with a checkpoint_dir.
  std::optional<WorkerCheckpointer> checkpointer_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_CHECKPOINT_POLICY_H_

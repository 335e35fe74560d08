// The sparse side of a worker's training step: reading the batch, pulling its embedding rows and
// pushing their gradients, under the job's consistency protocol (StepSync). In the modes where
// StepSync::can_prefetch() (ASYNC, and BOUNDED_STALENESS with staleness >= 2) the pipeline
// overlaps steps: the next batch is read and its rows pulled while this step computes, and a
// step's push is waited for only when the next step pushes. Otherwise each step reads and pulls
// after the previous push was acknowledged.
//
// A step, as the trainer drives it:
//   AwaitRows(&step, ...)   the current batch's rows (SYNC: catching up when the cluster went on)
//   Prefetch(step + 1, end) pipelined modes: the next batch's read and pull start now
//   ... compute on batch() and rows() ...
//   step = Push(step, emb_grad)
//   Advance(step, end)      otherwise: the next batch's read and pull start now; then it is current
#ifndef PS_WORKER_STEP_PIPELINE_H_
#define PS_WORKER_STEP_PIPELINE_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "worker/batch_reader.h"
#include "worker/data/batch.h"
#include "worker/embedding_io.h"
#include "worker/step_breakdown.h"
#include "worker/step_sync.h"
#include "worker/wait_time.h"

namespace ps {
namespace worker {

// A StepPipeline holds two batches (the current one and the next, in flight) and one push in
// flight. Thread-compatible. `client`, `sync`, `reader`, `waited` and `breakdown` are not owned
// and outlive it; `waited` receives the time spent in StepSync::BeforePull (waiting for the other
// workers); `breakdown`, when not null, the time spent reading batches (StepPart::kRead, measured
// inside the caller's laps: every call that reads is Start, Prefetch or Advance). `cache`, when
// not null (not owned, outliving it; training.row_cache), serves the pulls' fresh rows
// (StartPull).
class StepPipeline {
 public:
  StepPipeline(Client* client, StepSync* sync, BatchReader* reader, EmbeddingLayout layout,
               WaitTime* waited, StepBreakdown* breakdown = nullptr, RowCache* cache = nullptr);

  StepPipeline(const StepPipeline&) = delete;
  StepPipeline& operator=(const StepPipeline&) = delete;

  // Whether steps overlap (StepSync::can_prefetch()).
  bool pipelined() const { return pipelined_; }

  // Reads the first batch and starts the pull of its rows for step `step`. Errors of the reader
  // and of StepSync::BeforePull.
  absl::Status Start(int64_t step);

  // Waits for the rows of the current batch, pulled for step *step. SYNC: when the cluster
  // applied that step without this worker (a straggler outside the quorum, the pull ABORTED),
  // ends it (StepSync::AfterPush), sets *step to the step the cluster is at, calls
  // `catch_up(*step)` (the dense collectives of the steps skipped; it returns the steps training
  // now runs) and pulls the same batch again for *step, until a pull succeeds. Returns true with
  // the rows in rows(); false when *step reached the steps training runs (nothing pulled); the
  // error of the pull, of StepSync, or of catch_up.
  absl::StatusOr<bool> AwaitRows(int64_t* step,
                                 absl::FunctionRef<absl::StatusOr<int64_t>(int64_t)> catch_up);

  // The current batch and its rows (valid after AwaitRows returned true, until Advance).
  const Batch& batch() const { return slots_[cur_].batch; }
  const std::vector<float>& rows() const { return slots_[cur_].emb; }

  // Pipelined: reads the next batch and starts its pull for `next_step`, when next_step < end.
  // Otherwise nothing. Errors as Start.
  absl::Status Prefetch(int64_t next_step, int64_t end);

  // Pushes `emb_grad` (laid out as rows()) for the current batch as step `step`. Pipelined: first
  // waits for the previous step's push and ends that step (StepSync::AfterPush), and returns
  // step + 1 at once; otherwise waits for this push, ends the step and returns the step to
  // continue with (StepSync::AfterPush). Errors of the pushes and of StepSync.
  absl::StatusOr<int64_t> Push(int64_t step, const std::vector<float>& emb_grad);

  // Not pipelined: reads the next batch and starts its pull for `next_step`, when next_step <
  // end. Then the next batch becomes the current one. Errors as Start.
  absl::Status Advance(int64_t next_step, int64_t end);

  // Waits for the push still in flight and ends its step, then for any pull still in flight (a
  // prefetch past an early stop), ignoring its outcome. Errors of the push and of StepSync.
  absl::Status Finish();

 private:
  // Reads the next batch into `d` and starts its pull for `step`, after StepSync::BeforePull.
  absl::Status ReadAndPull(StepData* d, int64_t step);
  // Starts the pull of `d`'s batch for `step`, after StepSync::BeforePull.
  absl::Status BeginPull(StepData* d, int64_t step);
  // Waits for the push in flight, if any, and ends its step.
  absl::Status FinishPendingPush();

  // Constant after construction.
  Client* const client_;
  StepSync* const sync_;
  BatchReader* const reader_;
  WaitTime* const waited_;
  StepBreakdown* const breakdown_;
  RowCache* const cache_;
  const EmbeddingLayout layout_;
  const bool pipelined_;

  StepData slots_[2];
  int cur_ = 0;
  PushData push_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_STEP_PIPELINE_H_

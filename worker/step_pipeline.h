// The sparse side of a worker's training step: reading the batch, pulling its embedding rows and
// pushing their gradients, under the job's consistency protocol (StepSync), with the next step's
// read and pull overlapped with this one as far as the mode allows (Overlap):
//   kPrefetch   ASYNC, and BOUNDED_STALENESS with staleness >= 2 (StepSync::can_prefetch()): the
//               next batch is read and its rows pulled while this step computes, and a step's
//               push is waited for only when the next step pushes.
//   kPullAhead  SYNC: the next batch is read and its rows pulled as soon as this step's push is
//               sent. The servers hold a pull of step t + 1 until step t is applied, so the rows
//               are exactly those of the unpipelined step; the pull's round trip and the read
//               overlap the push, the dense AllReduce and the wait for the other workers.
//   kNone       BOUNDED_STALENESS with staleness < 2, or pipelining turned off: each step reads
//               and pulls after the previous push was acknowledged and the step ended.
// In every mode the push is started before, and waited for after, what the caller does between
// BeginPush and EndPush (the dense AllReduce), so the two overlap.
//
// A step, as the trainer drives it:
//   AwaitRows(&step, ...)    the current batch's rows (SYNC: catching up when the cluster went on)
//   Prefetch(step + 1, end)  kPrefetch: the next batch's read and pull start now
//   ... compute on current() (the batch, its rows) ...
//   BeginPush(step, grad)    the push starts (kPrefetch: after the previous step's is done), or
//                            BeginPushRows(step, row_grads) for a model that pools on its device
//   PullAhead(step + 1, end) kPullAhead: the next batch's read and pull start now
//   ... the dense AllReduce ...
//   step = EndPush(end)      kPrefetch: step + 1 at once; otherwise waits for the push, ends the
//   step Advance(step, end)       kNone: the next batch's read and pull start now; then it is
//   current
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
//
// `pipeline` false turns the overlap of steps off (kNone in every mode), for comparison: a SYNC
// run trains exactly the same model either way.
class StepPipeline {
 public:
  // How far the next step's read and pull overlap this step (the file comment).
  enum class Overlap { kNone, kPullAhead, kPrefetch };

  // The overlap the mode of `sync` allows, or kNone when not `pipeline`.
  static Overlap OverlapOf(const StepSync& sync, bool pipeline);

  StepPipeline(Client* client, StepSync* sync, BatchReader* reader, EmbeddingLayout layout,
               WaitTime* waited, StepBreakdown* breakdown = nullptr, bool pipeline = true,
               RowCache* cache = nullptr);

  StepPipeline(const StepPipeline&) = delete;
  StepPipeline& operator=(const StepPipeline&) = delete;

  Overlap overlap() const { return overlap_; }
  // Whether a step's push is still in flight when the next step computes (kPrefetch).
  bool pipelined() const { return overlap_ == Overlap::kPrefetch; }

  // Whether the rows of the batches AwaitRows waits for from now on stay unpooled, for a model
  // that pools them on its device (AwaitPull instead of FinishPull; current()->emb is then unset
  // but for direct batches). False until set.
  void set_pool_on_device(bool on) { pool_on_device_ = on; }
  const EmbeddingLayout& layout() const { return layout_; }

  // Reads the first batch and starts the pull of its rows for step `step`. Errors of the reader
  // and of StepSync::BeforePull.
  absl::Status Start(int64_t step);

  // Waits for the rows of the current batch, pulled for step *step. SYNC: when the cluster
  // applied that step without this worker (a straggler outside the quorum, the pull ABORTED),
  // ends it (StepSync::AfterPush), sets *step to the step the cluster is at, calls
  // `catch_up(*step)` (the dense collectives of the steps skipped; it returns the steps training
  // now runs) and pulls the same batch again for *step, until a pull succeeds. Returns true with
  // the rows in current(); false when *step reached the steps training runs (nothing pulled); the
  // error of the pull, of StepSync, or of catch_up.
  absl::StatusOr<bool> AwaitRows(int64_t* step,
                                 absl::FunctionRef<absl::StatusOr<int64_t>(int64_t)> catch_up);

  // The current batch and its rows, pooled into current()->emb or not (pool_on_device), valid
  // after AwaitRows returned true, until Advance (StepCompute::ForwardBackward(layout(), ...)).
  const Batch& batch() const { return slots_[cur_].batch; }
  StepData* current() { return &slots_[cur_]; }

  // kPrefetch: reads the next batch and starts its pull for `next_step`, when next_step < end.
  // Otherwise nothing. Errors as Start.
  absl::Status Prefetch(int64_t next_step, int64_t end);

  // Starts the push of `emb_grad` (laid out as current()->emb) for the current batch as step
  // `step`. kPrefetch: first waits for the previous step's push and ends that step
  // (StepSync::AfterPush). Errors of that push and of StepSync. `emb_grad` may change once this
  // returns.
  absl::Status BeginPush(int64_t step, const std::vector<float>& emb_grad);
  // As BeginPush, with the gradients of the current batch's distinct rows per table, from a model
  // that pooled on its device (StartPushRows; takes the contents of *row_grads).
  absl::Status BeginPushRows(int64_t step, std::vector<std::vector<float>>* row_grads);

  // kPullAhead, after BeginPush(next_step - 1): reads the next batch and starts its pull for
  // `next_step`, when next_step < end (the servers answer it once the step pushed is applied).
  // Otherwise nothing. Errors as Start.
  absl::Status PullAhead(int64_t next_step, int64_t end);

  // After BeginPush: returns the step to continue with. kPrefetch: that step + 1 at once (its push
  // is waited for by the next BeginPush, or Finish). Otherwise waits for the push and ends the
  // step (StepSync::AfterPush, which may skip steps in SYNC: a straggler outside the quorum); a
  // pull PullAhead started for another step than the one returned is then started again, for
  // that one when it is < `end`. Errors of the pushes and of StepSync.
  absl::StatusOr<int64_t> EndPush(int64_t end);

  // kNone: reads the next batch and starts its pull for `next_step`, when next_step < end. Then
  // the next batch becomes the current one. Errors as Start.
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
  // Waits for `d`'s pulls: FinishPull, or AwaitPull when pool_on_device_.
  absl::Status WaitPull(StepData* d);
  // BeginPush and BeginPushRows around `start`, which starts the current batch's pushes.
  absl::Status BeginPushWith(int64_t step, absl::FunctionRef<void()> start);

  // Constant after construction.
  Client* const client_;
  StepSync* const sync_;
  BatchReader* const reader_;
  WaitTime* const waited_;
  StepBreakdown* const breakdown_;
  RowCache* const cache_;
  const EmbeddingLayout layout_;
  const Overlap overlap_;

  bool pool_on_device_ = false;
  StepData slots_[2];
  int cur_ = 0;
  PushData push_;
  int64_t ahead_step_ = -1;  // kPullAhead: the step the next batch's pull was started for, or -1
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_STEP_PIPELINE_H_

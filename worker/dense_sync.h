// The syncing stage of a training step for the dense part of the model, which every worker holds
// whole: the collectives that keep the workers' parameters together, counted by the step clock,
// and the number of steps training runs, which an evaluation on the way may cut short.
//
// With dense_sync_every = 1 the dense gradients are summed by AllReduce every step (every worker
// keeps identical parameters); with k > 1 every worker applies its own gradients and the
// parameters are averaged every k steps and at the end (local SGD). The collectives are counted by
// the clock, so that a straggler who skips steps (a SYNC quorum) still joins every one of them:
// one AllReduce of gradients per step (zeros for a skipped step), or one averaging per multiple of
// k crossed.
//
// After the collective that ends `steps_done` steps, in the same order on every worker:
//   - with balanced batches, about every kBalanceEverySteps (first after kFirstBalanceSteps), the
//     workers exchange their speeds and take new batch shares (BatchBalancer);
//   - the after_collective hook (the held-out evaluation) runs, and may end training after
//     steps_done (every worker then stops after the same step).
// Worker 0 also pushes the dense parameters to the servers (the master copy) every
// dense_push_every steps and at the end.
#ifndef PS_WORKER_DENSE_SYNC_H_
#define PS_WORKER_DENSE_SYNC_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/ps_client.h"
#include "worker/batch_balancer.h"
#include "worker/collective/allreduce.h"
#include "worker/wait_time.h"

namespace ps {
namespace worker {

// The dense parameters' name on the servers (the master copy).
inline constexpr char kDenseModelName[] = "dense/model";

// A DenseSync runs one worker's dense collectives. Thread-compatible.
class DenseSync {
 public:
  // Called after the collective that ends `steps_done` steps (< end()); returns whether training
  // ends after steps_done, or an error that ends it.
  using AfterCollective = std::function<absl::StatusOr<bool>(int64_t steps_done)>;

  // The first exchange of speeds, then the interval between exchanges, in steps. Shorter
  // intervals measure the scheduler's noise more than the workers' speeds.
  static constexpr int64_t kFirstBalanceSteps = 8;
  static constexpr int64_t kBalanceEverySteps = 32;

  struct Options {
    // training.dense_sync_every: 1 (AllReduce of gradients every step) or k > 1 (local SGD).
    int sync_every = 1;
    // The step training starts at (> 0 for a resumed job) and the steps it runs.
    int64_t start_step = 0;
    int64_t end_step = 0;
    // training.dense_push_every: worker 0 pushes the parameters after every such step; 0: only
    // at the end.
    int64_t push_every = 0;
    // With balanced batches (not owned): the shares to update. Null: no exchange of speeds.
    BatchBalancer* balancer = nullptr;
    // May be empty.
    AfterCollective after_collective;
  };

  // `allreduce` (the group of every worker), `client`, `waited` and the memory under `params`
  // (the model's parameters) are not owned and outlive this. `waited` receives the time spent in
  // the collectives (waiting for the other workers), the evaluations inside CatchUp included.
  DenseSync(AllReduce* allreduce, Client* client, absl::Span<float> params, Options options,
            WaitTime* waited);

  DenseSync(const DenseSync&) = delete;
  DenseSync& operator=(const DenseSync&) = delete;

  // The steps training runs: Options::end_step, or fewer once after_collective ended it.
  int64_t end() const { return end_; }

  // Joins the collectives of the steps before `next_step` (and before end()) that this worker has
  // not joined (its skipped steps; with local SGD, the averagings due). Returns end() after them;
  // errors of the collectives and of after_collective.
  absl::StatusOr<int64_t> CatchUp(int64_t next_step);

  // dense_sync_every 1: after CatchUp(step), sums `grad` (step `step`'s dense gradients) over the
  // workers and sets *allreduce_time to that AllReduce's time, then exchanges speeds when due.
  // Errors of the collectives and of after_collective.
  absl::Status SumGradients(int64_t step, absl::Span<float> grad, absl::Duration* allreduce_time);

  // After step `step` was pushed and its dense gradients applied, with `next_step` the step to
  // continue with: local SGD joins the averagings due before next_step; worker 0 pushes the
  // parameters when step + 1 is a multiple of push_every; with dense_sync_every 1,
  // after_collective runs for step + 1 (the step's collective was SumGradients). Errors of the
  // collectives, the push and after_collective.
  absl::Status StepDone(int64_t step, int64_t next_step);

  // At the end of training: joins the collectives left until end(), and with local SGD averages
  // the parameters once more, so that every worker ends with the same model. Errors of the
  // collectives and of after_collective.
  absl::Status Finish();

  // Worker 0: pushes the parameters to the servers (kDenseModelName, assigned). Others: nothing.
  // Errors of the client.
  absl::Status PushModel();

 private:
  // CatchUp's collectives, untimed.
  absl::Status JoinUntil(int64_t next_step);
  // Exchanges the speeds when a balance is due after `steps_done` steps.
  absl::Status ExchangeSpeeds(int64_t steps_done);
  // Runs after_collective for `steps_done`, which may end training there.
  absl::Status AfterCollectiveAt(int64_t steps_done);
  // Sums the parameters over the workers and divides by their number.
  absl::Status Average();

  // Constant after construction.
  AllReduce* const allreduce_;
  Client* const client_;
  const absl::Span<float> params_;
  const Options options_;
  WaitTime* const waited_;

  int64_t end_;
  // The collectives joined: gradient AllReduces (dense_sync_every 1), averagings (k > 1).
  int64_t gradient_rounds_;
  int64_t averaging_rounds_;
  int64_t next_balance_ = kFirstBalanceSteps;
  std::vector<float> zeros_;
  std::vector<float> figures_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DENSE_SYNC_H_

// The sync step barrier of one parameter server: in sync training every worker pushes the
// gradients of step t, then ends step t; the server applies step t's summed pushes once a quorum
// of the workers has ended it (or, with a quorum below 1, once its timeout has passed since the
// first did), and only then may step t + 1 be pushed or its rows pulled.
#ifndef PS_SERVER_STEP_BARRIER_H_
#define PS_SERVER_STEP_BARRIER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"

namespace ps {
namespace server {

// A StepBarrier models which sync step is pending on a server, which workers have ended it, and
// the callbacks waiting for steps to be applied. Thread-safe.
//
// The barrier does not touch the shards: it calls its `apply` function to apply the pending
// step's sums. Callers that must not see a step applied while they work (a pull reading its
// step's rows, a push adding to the pending step) hold mu() shared; one that must also keep
// pushes out (a checkpoint's start at a step boundary) holds it exclusively.
//
// Lock order: mu() is taken first. `apply` runs with mu() held exclusively and may take the
// checkpoint cuts' lock (server/checkpoint/checkpoint_cuts.h), the shard map's lock and the
// shards' locks; none of those is held by a thread that takes mu().
class StepBarrier {
 public:
  struct Options {
    // Sync training. Otherwise the barrier does nothing (see each method). Default false.
    bool sync = false;
    // Workers whose EndStep of the pending step applies it. Default 1; >= 1.
    size_t quorum_workers = 1;
    // How long after the first EndStep of the pending step it is applied without the quorum.
    // Default infinite: never, and no timer thread is started; > 0.
    absl::Duration quorum_timeout = absl::InfiniteDuration();
  };

  // The options of `job`: sync when its training mode is SYNC; the quorum the nearest whole
  // number of workers to sync_quorum x num_workers, at least 1 (0.67 of 3 is 2); the timeout
  // sync_timeout_ms when sync_quorum is below 1, else infinite.
  static Options ForJob(const config::Job& job);

  // Applies step `step`'s sums (the pending step, applied_step() + 1) in the server's shards.
  // Called with mu() held exclusively, on the thread of the EndStep that completes the quorum or
  // on the quorum timer's thread.
  using ApplyFn = std::function<void(int64_t step)>;

  // Starts the quorum timer's thread when the options have a finite quorum_timeout (and sync).
  StepBarrier(const Options& options, ApplyFn apply);

  StepBarrier(const StepBarrier&) = delete;
  StepBarrier& operator=(const StepBarrier&) = delete;

  ~StepBarrier();

  // `worker_id` has pushed all of `step`. When the quorum of workers has ended the pending step
  // (or its timeout passes), it is applied at once, and the waits for it run (after mu() is
  // released). Returns the newest applied step (-1 before any). UNAVAILABLE (retryable) for a
  // step after the pending one; ending an applied step is a no-op returning the newest applied
  // step; INVALID_ARGUMENT for worker_id 0. Not sync: a no-op returning -1.
  absl::StatusOr<int64_t> EndStep(uint32_t worker_id, int64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // ABORTED if `step` (>= 0) was already applied: a straggler outside the quorum pulling for a
  // step the cluster finished without it, whose rows would include that step's pushes. OK
  // otherwise, for a negative step, and when not sync. CheckPullStepLocked: the same, for a
  // caller that holds mu() (at least shared) to read the rows under it.
  absl::Status CheckPullStep(int64_t step) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckPullStepLocked(int64_t step) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Where a sync push of `step` goes, for a caller that holds mu() while it adds the push to the
  // pending step: true when it belongs to the pending step; false when the step was already
  // applied (a straggler's push: the caller drops it); UNAVAILABLE (retryable: this server has
  // not seen the previous step end, which it will) for a step after the pending one. Not sync:
  // true.
  absl::StatusOr<bool> AdmitPushLocked(int64_t step) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Runs `fn(OK)` once step `step` is applied: at once if it is (or when not sync), else on the
  // thread that applies it, without mu() held. `fn(UNAVAILABLE)` if the barrier shuts down
  // first, or at once after Shutdown.
  void RunWhenApplied(int64_t step, std::function<void(absl::Status)> fn) ABSL_LOCKS_EXCLUDED(mu_);

  // A restored server goes on from a checkpoint's step boundary: step `step` is the next to
  // apply unless a later one already is (applied_step() becomes at least step - 1). Not sync,
  // or `step` <= 0: nothing changes.
  void StartAt(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // The newest applied step; -1 before any (and always when not sync).
  int64_t applied_step() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t applied_step_locked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return applied_step_; }

  // Ends every wait with UNAVAILABLE and stops (joins) the quorum timer's thread; the waits of
  // later RunWhenApplied calls fail at once. Idempotent; the destructor calls it.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  bool sync() const { return options_.sync; }

  // The barrier's lock (see the class comment).
  absl::Mutex* mu() const ABSL_LOCK_RETURNED(mu_) { return &mu_; }

 private:
  // Applies the pending step (apply_) and moves on to the next; returns the waits it releases,
  // to be run without the lock.
  std::vector<std::function<void(absl::Status)>> ApplyPendingStep()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // With a finite quorum_timeout: applies a pending step whose timeout has passed.
  void QuorumTimerLoop() ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const Options options_;
  const ApplyFn apply_;

  mutable absl::Mutex mu_;
  int64_t applied_step_ ABSL_GUARDED_BY(mu_) = -1;
  absl::flat_hash_set<uint32_t> ended_ ABSL_GUARDED_BY(mu_);  // workers done with the step
  absl::Time first_end_ ABSL_GUARDED_BY(mu_);                 // when the first of them ended it
  std::vector<std::pair<int64_t, std::function<void(absl::Status)>>> waits_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;

  // Started by the constructor (last), joined by Shutdown.
  std::thread quorum_timer_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_STEP_BARRIER_H_

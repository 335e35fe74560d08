// When the coordinator takes checkpoints: on request (ps_ctl checkpoint, worker 0 at the end of
// training) and periodically, every cluster.checkpoint_every_steps steps and every
// cluster.checkpoint_every_seconds seconds.
#ifndef PS_SERVER_COORDINATOR_CHECKPOINT_SCHEDULER_H_
#define PS_SERVER_COORDINATOR_CHECKPOINT_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator/checkpointer.h"
#include "server/coordinator/coordinator.h"

namespace ps {
namespace coordinator {

// A CheckpointScheduler takes the job's checkpoints, one at a time, on a thread of its own.
// Thread-safe.
//
// Periodic by steps (N = checkpoint_every_steps): the k-th is due at mark t = k x N. Sync jobs are
// cut at boundary t, asked for once every worker finished step t - 2 (so that no push of step t
// has begun: a worker pulls step t only after every worker ended step t - 1); when a worker was
// quicker than the request and step t began, the checkpoint is taken at the next boundary the
// coordinator can still pick. Other modes are cut at once when every worker finished step t - 1.
// After a checkpoint, the next mark is the first multiple of N that is still ahead of the clocks,
// so a slow checkpoint skips marks instead of queueing them. Periodic by time (S =
// checkpoint_every_seconds): S seconds after the end of the previous checkpoint (or the scheduler's
// start), once the shard map exists; sync jobs at the coordinator's default boundary. Periodic
// checkpoints report on stderr; a failed one is reported and the schedule goes on.
class CheckpointScheduler {
 public:
  using Done = std::function<void(absl::StatusOr<rpc::CheckpointResponse>)>;

  // `coordinator` and `checkpointer` are not owned and must outlive the scheduler. Starts its
  // thread.
  CheckpointScheduler(Coordinator* coordinator, Checkpointer* checkpointer);

  // Calls Stop().
  ~CheckpointScheduler();

  CheckpointScheduler(const CheckpointScheduler&) = delete;
  CheckpointScheduler& operator=(const CheckpointScheduler&) = delete;

  // Takes the checkpoint `request` asks for (Checkpointer::Take) as soon as no other is being
  // taken, and calls `done` with its result on the scheduler's thread. FAILED_PRECONDITION, with
  // `done` called at once on this thread, while another request waits or is being taken (a periodic
  // checkpoint under way is waited for); UNAVAILABLE after Stop.
  void Request(rpc::CheckpointRequest request, Done done);

  // Periodic checkpoints completed and failed so far.
  int64_t periodic_taken() const;
  int64_t periodic_failed() const;

  // Waits for the checkpoint being taken, answers a waiting request with UNAVAILABLE, and joins
  // the thread. Idempotent.
  void Stop();

 private:
  void Loop();
  // Sets the next steps-periodic mark, the first multiple of N above `floor`, and waits on the
  // coordinator's clocks for it (see the class comment).
  void ArmClockWait(int64_t floor);
  // Takes a periodic checkpoint at `step` and reports it.
  void TakePeriodic(int64_t step, const char* why);

  Coordinator* const coordinator_;
  Checkpointer* const checkpointer_;
  const bool sync_;
  const int64_t every_steps_;        // 0: not by steps
  const absl::Duration every_time_;  // zero: not by time

  // What the scheduler's thread, its callers and the coordinator's clock callbacks share. Held
  // by the callbacks too, so that one running while the scheduler is destroyed finds it alive.
  struct State {
    absl::Mutex mu;
    bool stop ABSL_GUARDED_BY(mu) = false;
    bool busy_request ABSL_GUARDED_BY(mu) = false;  // a requested checkpoint is being taken
    std::optional<std::pair<rpc::CheckpointRequest, Done>> request ABSL_GUARDED_BY(mu);
    int64_t mark ABSL_GUARDED_BY(mu) = 0;  // the next steps-periodic mark
    bool mark_reached ABSL_GUARDED_BY(mu) = false;
    std::optional<WaitId> clock_wait ABSL_GUARDED_BY(mu);
    absl::Time time_due ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
    int64_t periodic_taken ABSL_GUARDED_BY(mu) = 0;
    int64_t periodic_failed ABSL_GUARDED_BY(mu) = 0;
  };
  const std::shared_ptr<State> state_ = std::make_shared<State>();

  absl::Mutex stop_mu_;  // serialises Stop's join; never held with State::mu
  std::thread thread_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_CHECKPOINT_SCHEDULER_H_

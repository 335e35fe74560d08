#include "server/coordinator/checkpoint_scheduler.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace ps {
namespace coordinator {

CheckpointScheduler::CheckpointScheduler(Coordinator* coordinator, Checkpointer* checkpointer)
    : coordinator_(coordinator),
      checkpointer_(checkpointer),
      sync_(coordinator->job().training().mode() == config::Training::SYNC),
      every_steps_(static_cast<int64_t>(coordinator->job().cluster().checkpoint_every_steps())),
      every_time_(absl::Seconds(coordinator->job().cluster().checkpoint_every_seconds())) {
  {
    absl::MutexLock lock(&state_->mu);
    if (every_time_ > absl::ZeroDuration()) state_->time_due = absl::Now() + every_time_;
  }
  if (every_steps_ > 0) ArmClockWait(0);
  thread_ = std::thread([this] { Loop(); });
}

CheckpointScheduler::~CheckpointScheduler() { Stop(); }

void CheckpointScheduler::ArmClockWait(int64_t floor) {
  State* const s = state_.get();
  int64_t mark;
  {
    absl::MutexLock lock(&s->mu);
    if (s->stop) return;
    s->mark = mark = (floor / every_steps_ + 1) * every_steps_;
    s->mark_reached = false;
  }
  // Not under the lock: the answer may come at once, on this thread.
  const WaitId id =
      coordinator_->AsyncWaitClock(sync_ ? mark - 2 : mark - 1, absl::InfiniteFuture(),
                                   [state = state_, mark](absl::StatusOr<rpc::ClockState> clocks) {
                                     if (!clocks.ok()) return;  // cancelled or shut down
                                     absl::MutexLock lock(&state->mu);
                                     if (state->mark == mark) state->mark_reached = true;
                                   });
  bool stopped;
  {
    absl::MutexLock lock(&s->mu);
    stopped = s->stop;
    s->clock_wait = id;
  }
  if (stopped) coordinator_->CancelWait(id);  // Stop may have cancelled the one before
}

void CheckpointScheduler::Request(rpc::CheckpointRequest request, Done done) {
  absl::Status refused;
  {
    State* const s = state_.get();
    absl::MutexLock lock(&s->mu);
    if (s->stop) {
      refused = absl::UnavailableError("the coordinator is shutting down");
    } else if (s->busy_request || s->request.has_value()) {
      refused = absl::FailedPreconditionError("a checkpoint is being taken");
    } else {
      s->request.emplace(std::move(request), std::move(done));
      return;
    }
  }
  done(refused);
}

int64_t CheckpointScheduler::periodic_taken() const {
  absl::MutexLock lock(&state_->mu);
  return state_->periodic_taken;
}

int64_t CheckpointScheduler::periodic_failed() const {
  absl::MutexLock lock(&state_->mu);
  return state_->periodic_failed;
}

void CheckpointScheduler::TakePeriodic(int64_t step, const char* why) {
  absl::StatusOr<rpc::CheckpointResponse> taken = checkpointer_->Take(step);
  if (step >= 0 && absl::IsFailedPrecondition(taken.status())) {
    // Most likely a worker began step `step` before the servers heard of the checkpoint: the
    // next boundary the coordinator picks instead.
    std::fprintf(stderr, "ps_coordinator: checkpoint at step %lld: %s; trying a later step\n",
                 static_cast<long long>(step), taken.status().ToString().c_str());
    taken = checkpointer_->Take(-1);
  }
  absl::MutexLock lock(&state_->mu);
  if (taken.ok()) {
    ++state_->periodic_taken;
    std::fprintf(stderr,
                 "ps_coordinator: checkpoint %llu (%s) at step %lld: %.1f MB in %.2f s, longest "
                 "stall of a shard %.1f ms, in %s\n",
                 static_cast<unsigned long long>(taken->id()), why,
                 static_cast<long long>(taken->step()), taken->bytes() / 1e6, taken->seconds(),
                 taken->max_stall_ms(), taken->path().c_str());
  } else {
    ++state_->periodic_failed;
    std::fprintf(stderr, "ps_coordinator: periodic checkpoint (%s) failed: %s\n", why,
                 taken.status().ToString().c_str());
  }
}

void CheckpointScheduler::Loop() {
  State* const s = state_.get();
  s->mu.Lock();
  while (true) {
    auto ready = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      return s->stop || s->request.has_value() || s->mark_reached;
    };
    s->mu.AwaitWithDeadline(absl::Condition(&ready), s->time_due);
    if (s->stop) break;
    if (s->request.has_value()) {
      auto [request, done] = std::move(*s->request);
      s->request.reset();
      s->busy_request = true;
      s->mu.Unlock();
      absl::StatusOr<rpc::CheckpointResponse> taken =
          checkpointer_->Take(request.step(), {request.workers().begin(), request.workers().end()});
      // Free before the answer goes out, so that the caller's next request is not refused.
      s->mu.Lock();
      s->busy_request = false;
      s->mu.Unlock();
      done(std::move(taken));
      s->mu.Lock();
    } else if (s->mark_reached) {
      const int64_t mark = s->mark;
      s->mark_reached = false;
      s->mu.Unlock();
      TakePeriodic(sync_ ? mark : -1, "every checkpoint_every_steps");
      // The next mark ahead of the clocks (see the class comment).
      const rpc::ClockState clocks = coordinator_->Clocks();
      ArmClockWait(std::max(mark, sync_ ? clocks.max_clock() + 1 : clocks.min_clock() + 1));
      s->mu.Lock();
    } else if (absl::Now() >= s->time_due) {
      s->mu.Unlock();
      // Nothing to checkpoint before the map exists.
      if (coordinator_->Status().shard_map().version() > 0) {
        TakePeriodic(-1, "every checkpoint_every_seconds");
      }
      s->mu.Lock();
    }
    if (every_time_ > absl::ZeroDuration()) s->time_due = absl::Now() + every_time_;
  }
  s->mu.Unlock();
}

void CheckpointScheduler::Stop() {
  absl::MutexLock serial(&stop_mu_);
  std::optional<std::pair<rpc::CheckpointRequest, Done>> request;
  std::optional<WaitId> wait;
  {
    absl::MutexLock lock(&state_->mu);
    state_->stop = true;
    request = std::move(state_->request);
    state_->request.reset();
    wait = state_->clock_wait;
  }
  if (request.has_value())
    request->second(absl::UnavailableError("the coordinator is shutting down"));
  if (wait.has_value()) coordinator_->CancelWait(*wait);
  if (thread_.joinable()) thread_.join();
}

}  // namespace coordinator
}  // namespace ps

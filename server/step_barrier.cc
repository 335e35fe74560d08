#include "server/step_barrier.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace ps {
namespace server {

StepBarrier::Options StepBarrier::ForJob(const config::Job& job) {
  Options options;
  options.sync = job.training().mode() == config::Training::SYNC;
  // The nearest whole number of workers (0.67 of 3 is 2), at least 1.
  options.quorum_workers = static_cast<size_t>(std::max<long long>(
      1, std::llround(job.training().sync_quorum() * job.cluster().num_workers())));
  options.quorum_timeout = job.training().sync_quorum() < 1.0f
                               ? absl::Milliseconds(job.training().sync_timeout_ms())
                               : absl::InfiniteDuration();
  return options;
}

StepBarrier::StepBarrier(const Options& options, ApplyFn apply)
    : options_(options), apply_(std::move(apply)) {
  if (options_.sync && options_.quorum_timeout != absl::InfiniteDuration()) {
    quorum_timer_ = std::thread([this] { QuorumTimerLoop(); });
  }
}

StepBarrier::~StepBarrier() { Shutdown(); }

void StepBarrier::Shutdown() {
  std::vector<std::pair<int64_t, std::function<void(absl::Status)>>> waits;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    waits.swap(waits_);
  }
  for (auto& [step, fn] : waits) fn(absl::UnavailableError("the server is shutting down"));
  // Only the first call joins; a later one (the destructor's) finds it not joinable.
  if (quorum_timer_.joinable()) quorum_timer_.join();
}

void StepBarrier::QuorumTimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!shutting_down_) {
    // Idle (no worker has ended the pending step): wait for the first EndStep, which starts the
    // step's timeout; otherwise wait for that timeout.
    const bool idle = ended_.empty();
    const absl::Time deadline =
        idle ? absl::InfiniteFuture() : first_end_ + options_.quorum_timeout;
    auto wake = [this, idle]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutting_down_ || (idle && !ended_.empty());
    };
    mu_.AwaitWithDeadline(absl::Condition(&wake), deadline);
    if (shutting_down_ || ended_.empty() || absl::Now() < first_end_ + options_.quorum_timeout) {
      continue;
    }
    std::vector<std::function<void(absl::Status)>> released = ApplyPendingStep();
    mu_.Unlock();
    for (auto& fn : released) fn(absl::OkStatus());
    mu_.Lock();
  }
}

std::vector<std::function<void(absl::Status)>> StepBarrier::ApplyPendingStep() {
  apply_(applied_step_ + 1);
  ++applied_step_;
  ended_.clear();
  std::vector<std::function<void(absl::Status)>> released;
  auto keep = waits_.begin();
  for (auto it = waits_.begin(); it != waits_.end(); ++it) {
    if (it->first <= applied_step_) {
      released.push_back(std::move(it->second));
    } else {
      *keep++ = std::move(*it);
    }
  }
  waits_.erase(keep, waits_.end());
  return released;
}

absl::StatusOr<int64_t> StepBarrier::EndStep(uint32_t worker_id, int64_t step) {
  if (!options_.sync) return int64_t{-1};
  if (worker_id == 0) {
    return absl::InvalidArgumentError(
        "EndStep in sync mode needs the worker's id (header.worker_id: the member_id from "
        "Coordinator.Register)");
  }
  std::vector<std::function<void(absl::Status)>> released;
  int64_t applied = 0;
  {
    absl::MutexLock lock(&mu_);
    if (step > applied_step_ + 1) {
      // This server has not seen the end of the step before yet (the worker's last pull did not
      // need it): retryable, it will.
      return absl::UnavailableError(absl::StrFormat(
          "step %d ended before step %d was applied here; retry", step, applied_step_ + 1));
    }
    if (step == applied_step_ + 1) {
      if (ended_.empty()) first_end_ = absl::Now();
      ended_.insert(worker_id);
      if (ended_.size() >= options_.quorum_workers) released = ApplyPendingStep();
    }
    applied = applied_step_;
  }
  for (auto& fn : released) fn(absl::OkStatus());
  return applied;
}

absl::Status StepBarrier::CheckPullStep(int64_t step) const {
  if (!options_.sync || step < 0) return absl::OkStatus();
  absl::ReaderMutexLock lock(&mu_);
  return CheckPullStepLocked(step);
}

absl::Status StepBarrier::CheckPullStepLocked(int64_t step) const {
  if (options_.sync && step >= 0 && step <= applied_step_) {
    return absl::AbortedError(absl::StrFormat(
        "pull for step %d, which the cluster already applied without this worker (now at step "
        "%d); end the step and continue after it",
        step, applied_step_ + 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> StepBarrier::AdmitPushLocked(int64_t step) const {
  if (!options_.sync) return true;
  if (step <= applied_step_) return false;
  if (step > applied_step_ + 1) {
    return absl::UnavailableError(absl::StrFormat(
        "push for step %d before step %d was applied here; retry", step, applied_step_ + 1));
  }
  return true;
}

void StepBarrier::RunWhenApplied(int64_t step, std::function<void(absl::Status)> fn) {
  absl::Status now = absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      now = absl::UnavailableError("the server is shutting down");
    } else if (options_.sync && step > applied_step_) {
      waits_.emplace_back(step, std::move(fn));
      return;
    }
  }
  fn(now);
}

void StepBarrier::StartAt(int64_t step) {
  if (!options_.sync || step <= 0) return;
  absl::MutexLock lock(&mu_);
  applied_step_ = std::max(applied_step_, step - 1);
}

int64_t StepBarrier::applied_step() const {
  absl::ReaderMutexLock lock(&mu_);
  return applied_step_;
}

}  // namespace server
}  // namespace ps

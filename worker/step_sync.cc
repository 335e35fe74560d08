#include "worker/step_sync.h"

#include <algorithm>

#include "common/status_macros.h"

namespace ps {
namespace worker {

StepSync::StepSync(const config::Job& job, Client* client, CoordinatorClient* coordinator,
                   uint32_t member_id, absl::Duration wait_timeout)
    : client_(client),
      coordinator_(coordinator),
      member_id_(member_id),
      mode_(job.training().mode()),
      pull_staleness_(mode_ != config::Training::BOUNDED_STALENESS ? 0
                      : job.training().has_row_cache()
                          ? job.training().staleness() - job.training().row_cache().refresh_steps()
                          : job.training().staleness()),
      wait_timeout_(wait_timeout),
      checkpoints_(mode_ == config::Training::SYNC && !job.cluster().checkpoint_dir().empty()) {}

absl::Status StepSync::NeedCoordinator() const {
  if (coordinator_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "this job needs the coordinator's clocks (bounded staleness, or sync checkpoints), and the "
      "worker trains without a coordinator");
}

void StepSync::ReportClockAsync(int64_t step) {
  if (coordinator_ != nullptr) coordinator_->ReportClockAsync(member_id_, step);
}

absl::Status StepSync::Refresh(int64_t step) {
  if (!checkpoints_) return absl::OkStatus();
  PS_RETURN_IF_ERROR(NeedCoordinator());
  PS_ASSIGN_OR_RETURN(const rpc::ClockState clocks, coordinator_->ReportClock(member_id_, step));
  notice_.reset();
  if (clocks.has_checkpoint()) notice_ = clocks.checkpoint();
  return absl::OkStatus();
}

absl::Status StepSync::BeforePull(int64_t step) {
  if (mode_ != config::Training::BOUNDED_STALENESS) return absl::OkStatus();
  const int64_t needed = step - pull_staleness_ - 1;
  if (needed < 0) return absl::OkStatus();
  PS_RETURN_IF_ERROR(NeedCoordinator());
  return coordinator_->WaitClock(needed, wait_timeout_).status();
}

absl::StatusOr<int64_t> StepSync::AfterPush(int64_t step) {
  switch (mode_) {
    case config::Training::SYNC: {
      PS_ASSIGN_OR_RETURN(const int64_t applied, client_->EndStep(step));
      if (checkpoints_) {
        PS_RETURN_IF_ERROR(Refresh(step));
      } else {
        ReportClockAsync(step);
      }
      return std::max(step + 1, applied + 1);
    }
    case config::Training::BOUNDED_STALENESS:
      PS_RETURN_IF_ERROR(NeedCoordinator());
      PS_RETURN_IF_ERROR(coordinator_->ReportClock(member_id_, step).status());
      return step + 1;
    default:
      ReportClockAsync(step);
      return step + 1;
  }
}

bool StepSync::can_prefetch() const {
  return mode_ == config::Training::ASYNC ||
         (mode_ == config::Training::BOUNDED_STALENESS && pull_staleness_ >= 2);
}

}  // namespace worker
}  // namespace ps

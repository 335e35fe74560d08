#include "worker/checkpoint_policy.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace ps {
namespace worker {

CheckpointPolicy::CheckpointPolicy(const config::Job& job, CoordinatorClient* coordinator,
                                   StepSync* sync, int rank)
    : coordinator_(coordinator),
      sync_(sync),
      rank_(rank),
      sync_mode_(job.training().mode() == config::Training::SYNC),
      at_end_(!job.cluster().checkpoint_dir().empty() && job.cluster().checkpoint_at_end()) {
  if (sync_mode_ && !job.cluster().checkpoint_dir().empty()) {
    checkpointer_.emplace(coordinator, rank, job.training().dense_optimizer().type());
  }
}

absl::Status CheckpointPolicy::Restore(const config::Job& job, const std::string& folder,
                                       int rank, absl::Span<float> params,
                                       absl::Span<float> optimizer_state) {
  PS_ASSIGN_OR_RETURN(const rpc::CheckpointWorkerState resumed,
                      WorkerCheckpointer::Load(folder, rank, params.size(),
                                               optimizer_state.size(),
                                               job.training().dense_optimizer().type()));
  WorkerCheckpointer::Unpack(resumed, params, optimizer_state);
  return absl::OkStatus();
}

absl::Status CheckpointPolicy::AtBoundary(int64_t step, absl::Span<const float> params,
                                          absl::Span<const float> optimizer_state) {
  if (!checkpointer_.has_value()) return absl::OkStatus();
  checkpointer_->AtBoundary(step, params, optimizer_state);
  return checkpointer_->Answer(sync_->checkpoint_notice());
}

absl::Status CheckpointPolicy::AtEnd(int64_t boundary, int64_t last_step,
                                     absl::Span<const float> params,
                                     absl::Span<const float> optimizer_state) {
  if (!checkpointer_.has_value()) return absl::OkStatus();
  checkpointer_->AtBoundary(boundary, params, optimizer_state);
  PS_RETURN_IF_ERROR(sync_->Refresh(last_step));
  return checkpointer_->Answer(sync_->checkpoint_notice());
}

absl::StatusOr<std::string> CheckpointPolicy::TakeFinal(int64_t boundary) {
  if (rank_ != 0 || !at_end_) return std::string();
  std::vector<rpc::CheckpointWorkerState> states;
  if (checkpointer_.has_value()) states.push_back(checkpointer_->Latest());
  absl::StatusOr<rpc::CheckpointResponse> taken =
      coordinator_->Checkpoint(sync_mode_ ? boundary : -1, std::move(states), absl::Minutes(30));
  if (!taken.ok()) {
    return absl::Status(
        taken.status().code(),
        absl::StrCat("the end-of-training checkpoint failed: ", taken.status().message()));
  }
  std::fprintf(stderr, "worker 0: checkpoint %llu at the end of training: %.1f MB in %.2f s, %s\n",
               static_cast<unsigned long long>(taken->id()), taken->bytes() / 1e6,
               taken->seconds(), taken->path().c_str());
  return taken->path();
}

}  // namespace worker
}  // namespace ps

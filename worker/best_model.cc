#include "worker/best_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "proto/coordinator.pb.h"

namespace ps {
namespace worker {
namespace {

// Checkpoints of any size and restores wait this long for the coordinator.
constexpr absl::Duration kCoordinatorTimeout = absl::Minutes(30);

std::string Bytes(const std::vector<float>& floats) {
  return std::string(reinterpret_cast<const char*>(floats.data()), floats.size() * sizeof(float));
}

}  // namespace

BestModel::BestModel(const config::Job& job, CoordinatorClient* coordinator, AllReduce* group,
                     FILE* progress)
    : coordinator_(coordinator),
      group_(group),
      progress_(progress),
      enabled_(job.training().has_early_stopping() &&
               job.training().early_stopping().restore_best() &&
               !job.cluster().checkpoint_dir().empty()),
      sync_(job.training().mode() == config::Training::SYNC),
      optimizer_(job.training().dense_optimizer().type()) {}

absl::Status BestModel::Keep(int64_t steps_done, absl::Span<const float> params,
                             absl::Span<const float> optimizer_state) {
  if (!enabled_ || group_->rank() != 0) return absl::OkStatus();
  std::vector<float> kept_params(params.begin(), params.end());
  std::vector<float> kept_state(optimizer_state.begin(), optimizer_state.end());
  std::vector<rpc::CheckpointWorkerState> states;
  if (sync_) {
    // With dense_sync_every 1 every worker holds this state; with more, worker 0's is the one
    // evaluated, and every worker takes it back (Restore).
    rpc::CheckpointWorkerState& state = states.emplace_back();
    state.set_rank(0);
    state.set_step(steps_done);
    state.set_params(Bytes(kept_params));
    state.set_optimizer_state(Bytes(kept_state));
    state.set_optimizer(optimizer_);
  }
  absl::StatusOr<rpc::CheckpointResponse> taken =
      coordinator_->Checkpoint(sync_ ? steps_done : -1, std::move(states), kCoordinatorTimeout);
  if (!taken.ok()) {
    return absl::Status(taken.status().code(),
                        absl::StrCat("keeping the best model after step ", steps_done, ": ",
                                     taken.status().message()));
  }
  step_ = steps_done;
  checkpoint_ = taken->path();
  params_ = std::move(kept_params);
  optimizer_state_ = std::move(kept_state);
  if (progress_ != nullptr) {
    std::fprintf(progress_,
                 "worker 0: the best model so far, after step %lld, is checkpoint %llu (%.1f MB "
                 "in %.2f s): %s\n",
                 static_cast<long long>(steps_done), static_cast<unsigned long long>(taken->id()),
                 taken->bytes() / 1e6, taken->seconds(), checkpoint_.c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> BestModel::Restore(bool stopped_early, absl::Span<float> params,
                                           absl::Span<float> optimizer_state) {
  // Every worker knows whether training stopped early (the decision was shared); only worker 0
  // knows whether a model was kept. The collective tells it that every worker is done pushing,
  // and tells the others which step was kept.
  if (!enabled_ || !stopped_early) return -1;
  const bool zero = group_->rank() == 0;
  // The kept step + 1 (0: none) in two floats of 20 bits and the rest, each exact.
  const int64_t code = zero ? step_ + 1 : 0;
  float kept[2] = {static_cast<float>(code >> 20), static_cast<float>(code & 0xFFFFF)};
  PS_RETURN_IF_ERROR(group_->SumInPlace(absl::MakeSpan(kept, 2)));
  const int64_t step = (static_cast<int64_t>(kept[0]) << 20) + static_cast<int64_t>(kept[1]) - 1;
  if (step < 0) return -1;

  absl::Status restored;
  const absl::Time start = absl::Now();
  if (zero) {
    absl::StatusOr<rpc::RestoreCheckpointResponse> response =
        coordinator_->RestoreCheckpoint(checkpoint_, kCoordinatorTimeout);
    if (!response.ok()) {
      restored = absl::Status(response.status().code(),
                              absl::StrCat("restoring the best model of step ", step, " from ",
                                           checkpoint_, ": ", response.status().message()));
    }
  }
  // Worker 0's verdict and dense state, the others' inputs zeros: x + 0 is x, so every worker
  // gets worker 0's floats exactly.
  std::vector<float> shared(1 + params.size() + optimizer_state.size(), 0.0f);
  if (zero && restored.ok() && params_.size() == params.size() &&
      optimizer_state_.size() == optimizer_state.size()) {
    shared[0] = 1.0f;
    std::copy(params_.begin(), params_.end(), shared.begin() + 1);
    std::copy(optimizer_state_.begin(), optimizer_state_.end(), shared.begin() + 1 + params.size());
  }
  PS_RETURN_IF_ERROR(group_->SumInPlace(absl::MakeSpan(shared)));
  if (!restored.ok()) return restored;
  if (shared[0] < 0.5f) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker 0 could not restore the best model of step ", step));
  }
  std::copy(shared.begin() + 1, shared.begin() + 1 + params.size(), params.begin());
  std::copy(shared.begin() + 1 + params.size(), shared.end(), optimizer_state.begin());
  if (zero && progress_ != nullptr) {
    std::fprintf(progress_, "worker 0: restored the best model, of step %lld, from %s in %.2f s\n",
                 static_cast<long long>(step), checkpoint_.c_str(),
                 absl::ToDoubleSeconds(absl::Now() - start));
  }
  return step;
}

}  // namespace worker
}  // namespace ps

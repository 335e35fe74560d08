#include "server/step_clocks.h"

#include <algorithm>
#include <cstdint>

namespace ps {
namespace server {

void StepClocks::RecordPush(uint32_t worker_id, int64_t step) {
  if (step < 0) return;
  absl::MutexLock lock(&mu_);
  int64_t& newest = pushed_step_.try_emplace(worker_id, -1).first->second;
  newest = std::max(newest, step);
}

void StepClocks::RecordPull(int64_t step) {
  if (step < 0) return;
  absl::MutexLock lock(&mu_);
  // The oldest step some worker has not pushed yet: a worker not heard from has pushed nothing.
  int64_t oldest_missing = pushed_step_.size() < num_workers_ ? 0 : INT64_MAX;
  for (const auto& [worker, newest] : pushed_step_) {
    oldest_missing = std::min(oldest_missing, newest + 1);
  }
  const int64_t staleness = sync_ ? 0 : std::max<int64_t>(0, step - oldest_missing);
  last_oldest_missing_ = sync_ ? step : std::min(oldest_missing, step);
  ++step_pulls_;
  staleness_sum_ += static_cast<double>(staleness);
  staleness_max_ = std::max(staleness_max_, staleness);
}

void StepClocks::FillStatus(rpc::ServerStatus* status) const {
  absl::MutexLock lock(&mu_);
  status->set_step_pulls(step_pulls_);
  status->set_mean_pull_staleness(step_pulls_ > 0 ? staleness_sum_ / step_pulls_ : 0.0);
  status->set_max_pull_staleness(staleness_max_);
  status->set_last_pull_oldest_missing_step(last_oldest_missing_);
}

}  // namespace server
}  // namespace ps

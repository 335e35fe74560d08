#include "server/coordinator/state_store.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"

namespace ps {
namespace coordinator {

std::string MemoryStateStore::location() const { return "memory"; }

absl::StatusOr<std::optional<SavedCoordinator>> MemoryStateStore::Load() const {
  absl::MutexLock lock(&mu_);
  if (!has_state_) return std::optional<SavedCoordinator>();
  return std::optional<SavedCoordinator>(saved_);
}

absl::Status MemoryStateStore::SaveState(const rpc::CoordinatorState& state) {
  absl::MutexLock lock(&mu_);
  saved_.state = state;
  has_state_ = true;
  return absl::OkStatus();
}

absl::Status MemoryStateStore::SaveClock(int32_t rank, int64_t clock) {
  absl::MutexLock lock(&mu_);
  saved_.clocks[rank] = clock;
  return absl::OkStatus();
}

absl::Status MemoryStateStore::SaveKv(absl::string_view key, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  saved_.kv[std::string(key)] = std::string(value);
  return absl::OkStatus();
}

absl::Status MemoryStateStore::EraseKvPrefix(absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  for (auto it = saved_.kv.lower_bound(std::string(prefix));
       it != saved_.kv.end() && absl::StartsWith(it->first, prefix);) {
    it = saved_.kv.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace coordinator
}  // namespace ps

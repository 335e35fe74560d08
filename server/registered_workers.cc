#include "server/registered_workers.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"

namespace ps {
namespace server {
namespace {

uint64_t Pack(uint32_t first, uint32_t next) { return uint64_t{first} << 32 | next; }
uint32_t First(uint64_t range) { return static_cast<uint32_t>(range >> 32); }
uint32_t Next(uint64_t range) { return static_cast<uint32_t>(range); }

absl::Status NeverRegistered(uint32_t worker_id, uint64_t range) {
  const std::string issued =
      Next(range) > First(range)
          ? absl::StrFormat("it has issued member ids %d to %d", First(range), Next(range) - 1)
          : std::string("it has issued none yet");
  return absl::PermissionDeniedError(absl::StrFormat(
      "worker_id %d was never registered with the coordinator (%s); use the member_id from "
      "Coordinator.Register",
      worker_id, issued));
}

}  // namespace

RegisteredWorkers::RegisteredWorkers(FetchFn fetch) : fetch_(std::move(fetch)) {}

RegisteredWorkers::~RegisteredWorkers() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* fetching) { return !*fetching; }, &fetching_));
}

bool RegisteredWorkers::Known(uint32_t worker_id) const {
  const uint64_t range = range_.load(std::memory_order_acquire);
  return worker_id >= First(range) && worker_id < Next(range);
}

void RegisteredWorkers::Check(uint32_t worker_id, std::function<void(absl::Status)> done) {
  if (Known(worker_id)) {
    done(absl::OkStatus());
    return;
  }
  if (worker_id == 0) {
    done(absl::PermissionDeniedError(
        "the request carries no worker_id (0 is never a member id); set header.worker_id to the "
        "member_id from Coordinator.Register"));
    return;
  }
  bool ask = false;
  {
    absl::MutexLock lock(&mu_);
    if (fetching_) {
      next_.push_back({worker_id, std::move(done)});
    } else {
      fetching_ = true;
      asked_.push_back({worker_id, std::move(done)});
      ask = true;
    }
  }
  if (ask) StartFetch();
}

void RegisteredWorkers::StartFetch() {
  fetches_.fetch_add(1, std::memory_order_relaxed);
  fetch_([this](absl::StatusOr<rpc::MemberIds> ids) { Fetched(std::move(ids)); });
}

void RegisteredWorkers::Fetched(absl::StatusOr<rpc::MemberIds> ids) {
  if (ids.ok()) {
    range_.store(Pack(std::max<uint32_t>(1, ids->first_member_id()), ids->next_member_id()),
                 std::memory_order_release);
  }
  const uint64_t range = range_.load(std::memory_order_acquire);
  std::vector<std::pair<std::function<void(absl::Status)>, absl::Status>> answers;
  bool ask_again = false;
  {
    absl::MutexLock lock(&mu_);
    for (Waiter& w : asked_) {
      absl::Status status;
      if (!ids.ok()) {
        status = absl::UnavailableError(
            absl::StrFormat("cannot check worker_id %d with the coordinator: %s; retry",
                            w.worker_id, ids.status().ToString()));
      } else if (!Known(w.worker_id)) {
        status = NeverRegistered(w.worker_id, range);
      }
      answers.emplace_back(std::move(w.done), std::move(status));
    }
    asked_.clear();
    // Those that arrived meanwhile: answered if the new range covers them, else asked again.
    for (Waiter& w : next_) {
      if (Known(w.worker_id)) {
        answers.emplace_back(std::move(w.done), absl::OkStatus());
      } else {
        asked_.push_back(std::move(w));
      }
    }
    next_.clear();
    ask_again = !asked_.empty();
    fetching_ = ask_again;
  }
  for (auto& [done, status] : answers) done(std::move(status));
  if (ask_again) StartFetch();
}

}  // namespace server
}  // namespace ps

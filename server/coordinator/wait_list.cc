#include "server/coordinator/wait_list.h"

#include <algorithm>

namespace ps {
namespace coordinator {

void RunAll(Completions* completions) {
  for (auto& f : *completions) f();
  completions->clear();
}

void WaitList::Add(WaitId id, absl::Time deadline, WaitPoll poll) {
  waits_.emplace(id, Wait{deadline, std::move(poll)});
}

void WaitList::PollAll(Completions* out) {
  for (auto it = waits_.begin(); it != waits_.end();) {
    std::function<void()> finished = it->second.poll(WaitEnd::kCheck);
    if (finished) {
      out->push_back(std::move(finished));
      it = waits_.erase(it);
    } else {
      ++it;
    }
  }
}

void WaitList::Expire(absl::Time now, Completions* out) {
  for (auto it = waits_.begin(); it != waits_.end();) {
    if (it->second.deadline <= now) {
      out->push_back(it->second.poll(WaitEnd::kDeadline));
      it = waits_.erase(it);
    } else {
      ++it;
    }
  }
}

bool WaitList::Cancel(WaitId id, Completions* out) {
  auto it = waits_.find(id);
  if (it == waits_.end()) return false;
  out->push_back(it->second.poll(WaitEnd::kCancelled));
  waits_.erase(it);
  return true;
}

void WaitList::EndAll(Completions* out) {
  for (auto& [id, wait] : waits_) out->push_back(wait.poll(WaitEnd::kShutdown));
  waits_.clear();
}

absl::Time WaitList::EarliestDeadline(absl::Time limit) const {
  for (const auto& [id, wait] : waits_) limit = std::min(limit, wait.deadline);
  return limit;
}

}  // namespace coordinator
}  // namespace ps

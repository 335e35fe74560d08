#include "client/internal/scheduler.h"

#include <algorithm>
#include <utility>

namespace ps {
namespace client_internal {

Scheduler::Scheduler() : thread_([this] { Run(); }) {}

Scheduler::~Scheduler() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void Scheduler::At(absl::Time when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back({when, std::move(fn)});
}

void Scheduler::Run() {
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      // Wake when stopping with nothing left, or when the earliest task is due.
      while (true) {
        if (stop_ && tasks_.empty()) return;
        auto earliest =
            std::min_element(tasks_.begin(), tasks_.end(),
                             [](const Task& a, const Task& b) { return a.when < b.when; });
        const absl::Time now = absl::Now();
        if (earliest != tasks_.end() && (earliest->when <= now || stop_)) {
          fn = std::move(earliest->fn);
          tasks_.erase(earliest);
          break;
        }
        const absl::Time until = earliest == tasks_.end() ? now + absl::Seconds(1) : earliest->when;
        const size_t size = tasks_.size();
        auto changed = [this, size]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || tasks_.size() != size;
        };
        mu_.AwaitWithDeadline(absl::Condition(&changed), until);
      }
    }
    fn();
  }
}

}  // namespace client_internal
}  // namespace ps

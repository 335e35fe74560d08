#include "client/internal/send_pool.h"

#include <algorithm>
#include <utility>

namespace ps {
namespace client_internal {

SendPool::SendPool(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Loop(); });
}

SendPool::~SendPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void SendPool::Run(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

int SendPool::AutomaticThreads(int cores) {
  if (cores < 4) return 0;
  return std::min(cores / 2, 8);
}

void SendPool::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !tasks_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) return;  // stopping, nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace client_internal
}  // namespace ps

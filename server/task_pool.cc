#include "server/task_pool.h"

#include <algorithm>
#include <atomic>

namespace ps {
namespace server {

struct TaskPool::Batch {
  const absl::FunctionRef<void(size_t)>* task = nullptr;
  size_t count = 0;
  std::atomic<size_t> next{0};  // the next untaken task
  absl::Mutex mu;
  size_t done ABSL_GUARDED_BY(mu) = 0;
};

TaskPool::TaskPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

TaskPool::~TaskPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

bool TaskPool::RunOne(Batch* batch) {
  const size_t i = batch->next.fetch_add(1, std::memory_order_relaxed);
  if (i >= batch->count) return false;
  (*batch->task)(i);
  absl::MutexLock lock(&batch->mu);
  ++batch->done;
  return true;
}

void TaskPool::RunAll(size_t count, absl::FunctionRef<void(size_t)> task) {
  if (count == 0) return;
  if (threads_.empty() || count == 1) {
    for (size_t i = 0; i < count; ++i) task(i);
    return;
  }
  Batch batch;
  batch.task = &task;
  batch.count = count;
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(&batch);
  }
  while (RunOne(&batch)) {
  }
  {
    // No thread may take the batch once it is off the queue; a thread that took it already holds
    // a task index (or finds none left) before the batch can go out of scope below.
    absl::MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (*it == &batch) {
        queue_.erase(it);
        break;
      }
    }
  }
  absl::MutexLock lock(&batch.mu);
  batch.mu.Await(absl::Condition(
      +[](Batch* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b->mu) { return b->done == b->count; }, &batch));
}

void TaskPool::Loop() {
  while (true) {
    Batch* batch = nullptr;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](TaskPool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
            return pool->stopping_ || !pool->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping
      batch = queue_.front();
      // Take one task under the pool's lock, so that the batch cannot leave the queue (and its
      // caller's stack) between choosing it and claiming a task of it.
      const size_t i = batch->next.fetch_add(1, std::memory_order_relaxed);
      if (i >= batch->count) {
        queue_.pop_front();
        continue;
      }
      mu_.Unlock();
      (*batch->task)(i);
      {
        absl::MutexLock batch_lock(&batch->mu);
        ++batch->done;
      }
      mu_.Lock();
    }
  }
}

void TaskPool::RunGroups(
    size_t items, absl::FunctionRef<uint64_t(size_t item)> weight, uint64_t total_weight,
    uint64_t min_weight,
    absl::FunctionRef<void(size_t first, size_t end, uint64_t first_weight)> fn) {
  const uint64_t groups = std::min<uint64_t>({static_cast<uint64_t>(threads()) + 1,
                                              total_weight / std::max<uint64_t>(1, min_weight),
                                              static_cast<uint64_t>(items)});
  if (groups <= 1) {
    fn(0, items, 0);
    return;
  }
  // Cut after the item that brings a group to its share of the weight.
  struct Group {
    size_t first;
    size_t end;
    uint64_t first_weight;
  };
  std::vector<Group> cut;
  const uint64_t share = (total_weight + groups - 1) / groups;
  uint64_t at = 0;
  Group group{0, 0, 0};
  for (size_t i = 0; i < items; ++i) {
    at += weight(i);
    if (at - group.first_weight >= share || i + 1 == items) {
      group.end = i + 1;
      cut.push_back(group);
      group = Group{i + 1, 0, at};
    }
  }
  RunAll(cut.size(), [&](size_t i) { fn(cut[i].first, cut[i].end, cut[i].first_weight); });
}

}  // namespace server
}  // namespace ps

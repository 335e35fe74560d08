#include "server/task_pool.h"

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

}  // namespace server
}  // namespace ps

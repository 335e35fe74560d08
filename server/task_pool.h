// A fixed set of threads that runs the parts of one request side by side, for the server's large
// pulls and pushes (each part a group of shards, whose locks are independent).
#ifndef PS_SERVER_TASK_POOL_H_
#define PS_SERVER_TASK_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace ps {
namespace server {

// A TaskPool runs batches of tasks on its threads and on the caller's. Thread-safe: batches from
// several callers share the threads, and a caller never waits for another's tasks (it runs its
// own tasks that no thread has taken yet).
class TaskPool {
 public:
  // Starts `threads` (>= 0) threads. With 0, RunAll runs every task on its caller's thread.
  explicit TaskPool(int threads);
  // Waits for running tasks, then joins the threads. No RunAll may be in progress.
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }

  // Runs tasks(0), ..., tasks(count - 1), each exactly once, on the pool's threads and on this
  // one, and returns when all have finished. Tasks must not throw or call RunAll.
  void RunAll(size_t count, absl::FunctionRef<void(size_t)> task);

  // Runs fn(first, end, first_weight) on consecutive groups [first, end) of the items
  // 0 .. items - 1 that together cover them all, in order; first_weight is the sum of weight(i)
  // of the items before the group, and `total_weight` that of all of them. One group, on this
  // thread, when there is at most one item or the items weigh less than 2 x `min_weight` (>= 1)
  // or the pool has no threads; otherwise up to threads() + 1 groups of about equal weight, each
  // but the last at least min_weight, run side by side as RunAll runs tasks.
  void RunGroups(size_t items, absl::FunctionRef<uint64_t(size_t item)> weight,
                 uint64_t total_weight, uint64_t min_weight,
                 absl::FunctionRef<void(size_t first, size_t end, uint64_t first_weight)> fn);

 private:
  struct Batch;

  void Loop();
  // Runs the next untaken task of `batch`; returns false when none is left.
  static bool RunOne(Batch* batch);

  absl::Mutex mu_;
  std::deque<Batch*> queue_ ABSL_GUARDED_BY(mu_);  // batches with untaken tasks
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_TASK_POOL_H_

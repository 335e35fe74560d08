// A SendPool is a few threads that start a call's requests beside the thread that made the call.
// Starting a request does its work on the starting thread: the request is encoded, and gRPC
// writes it inline, which under TLS means encrypting it. A call of many requests started from
// one thread is bound by that thread; spread over the pool, the machine's cores share it.
// Unlike the server's TaskPool (server/task_pool.h), where the caller runs and waits for its
// batch and no task may start another, a task here is handed over and not waited for: starting a
// request may run a completion inline, whose callback may start the application's next call.
// Thread-safe.
#ifndef PS_CLIENT_INTERNAL_SEND_POOL_H_
#define PS_CLIENT_INTERNAL_SEND_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {
namespace client_internal {

class SendPool {
 public:
  // Starts `threads` threads (>= 1).
  explicit SendPool(int threads);
  // Runs every task handed over so far, then joins the threads.
  ~SendPool();

  SendPool(const SendPool&) = delete;
  SendPool& operator=(const SendPool&) = delete;

  // Runs `task` on one of the pool's threads, soon; tasks start in the order they are given.
  void Run(std::function<void()> task);

  // The pool size ClientOptions.send_threads = -1 picks for a machine of `cores` cores: none
  // below 4 cores (a hand-off costs more than it saves when the cores are already shared by the
  // calling thread and gRPC's), else half the cores, at most 8.
  static int AutomaticThreads(int cores);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_SEND_POOL_H_

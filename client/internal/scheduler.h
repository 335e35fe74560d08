// A Scheduler runs functions at given times on one thread of its own: the client's retry backoff,
// which must not block gRPC's callback threads (a retried call waits out its backoff here, not on
// the thread that saw the failure). Private to the client library. Thread-safe.
#ifndef PS_CLIENT_INTERNAL_SCHEDULER_H_
#define PS_CLIENT_INTERNAL_SCHEDULER_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ps {
namespace client_internal {

class Scheduler {
 public:
  // Starts the thread.
  Scheduler();
  // Runs every task given so far at once, due or not (none is dropped: each holds a call that
  // must end), then joins the thread.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Runs `fn` on the scheduler's thread once `when` has come (at once if it has passed), after
  // every task due earlier; tasks due at the same time run in no fixed order. `fn` may call At.
  void At(absl::Time when, std::function<void()> fn);

 private:
  struct Task {
    absl::Time when;
    std::function<void()> fn;
  };

  void Run();

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Last: started once the fields above exist.
  std::thread thread_;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_SCHEDULER_H_

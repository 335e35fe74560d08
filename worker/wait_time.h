// The time a worker's step spends waiting for the other workers (the staleness bound, the dense
// collectives), as opposed to its own work: the batch balancer measures speed by the own work,
// and an induced straggler (TrainerOptions::slowdown) slows only that.
#ifndef PS_WORKER_WAIT_TIME_H_
#define PS_WORKER_WAIT_TIME_H_

#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps {
namespace worker {

// A WaitTime adds up the time spent in the calls it measures since it was last taken.
// Thread-compatible.
class WaitTime {
 public:
  // Runs `fn` and adds its duration, whatever it returns; returns what `fn` returns.
  template <typename Fn>
  auto Measure(Fn&& fn) {
    const absl::Time start = absl::Now();
    auto result = std::forward<Fn>(fn)();
    waited_ += absl::Now() - start;
    return result;
  }

  // The time measured since the last Take (or construction), and starts again from zero.
  absl::Duration Take() { return std::exchange(waited_, absl::ZeroDuration()); }

  // The time measured since the last Take, which goes on counting.
  absl::Duration waited() const { return waited_; }

 private:
  absl::Duration waited_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_WAIT_TIME_H_

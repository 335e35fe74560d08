// The coordinator's source of time, a seam that tests replace (fake_clock.h).
#ifndef PS_SERVER_COORDINATOR_CLOCK_H_
#define PS_SERVER_COORDINATOR_CLOCK_H_

#include "absl/time/time.h"

namespace ps {
namespace coordinator {

// The source of time for heartbeats and deadlines; tests replace it with a fake they advance by
// hand. Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The wall clock (absl::Now()); lives for the whole process. Thread-safe.
  static Clock* Real();
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_CLOCK_H_

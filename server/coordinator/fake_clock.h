// A Clock for tests that moves only when told to.
#ifndef PS_SERVER_COORDINATOR_FAKE_CLOCK_H_
#define PS_SERVER_COORDINATOR_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/clock.h"

namespace ps {
namespace coordinator {

// A FakeClock starts at a fixed time and advances only in Advance(). Thread-safe.
class FakeClock final : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1'000'000'000);
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_FAKE_CLOCK_H_

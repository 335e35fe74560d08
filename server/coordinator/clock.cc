#include "server/coordinator/clock.h"

#include "absl/time/clock.h"

namespace ps {
namespace coordinator {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace coordinator
}  // namespace ps

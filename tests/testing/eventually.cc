#include "tests/testing/eventually.h"

#include "absl/time/clock.h"

namespace ps {
namespace testing {

bool Eventually(const std::function<bool()>& condition, absl::Duration timeout,
                absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(poll);
  }
  return true;
}

}  // namespace testing
}  // namespace ps

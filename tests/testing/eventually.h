// Waiting in tests for something another thread or process does: a condition polled up to a
// deadline, never a bare sleep.
#ifndef PS_TESTS_TESTING_EVENTUALLY_H_
#define PS_TESTS_TESTING_EVENTUALLY_H_

#include <functional>

#include "absl/time/time.h"

namespace ps {
namespace testing {

// Polls `condition` every `poll` until it holds (true) or `timeout` passes (false).
bool Eventually(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(10),
                absl::Duration poll = absl::Milliseconds(5));

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_EVENTUALLY_H_

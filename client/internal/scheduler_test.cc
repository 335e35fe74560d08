#include "client/internal/scheduler.h"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace ps {
namespace client_internal {
namespace {

TEST_CASE("a scheduler runs tasks in the order they fall due, on its own thread",
          "[client][scheduler]") {
  absl::Mutex mu;
  std::vector<int> ran;
  std::thread::id ran_on;
  absl::Notification last;
  Scheduler scheduler;
  const absl::Time now = absl::Now();
  // Given out of order; the ones in the past are due at once, the later ones within a moment.
  scheduler.At(now + absl::Milliseconds(30), [&] {
    absl::MutexLock lock(&mu);
    ran.push_back(3);
    last.Notify();
  });
  scheduler.At(now - absl::Seconds(1), [&] {
    absl::MutexLock lock(&mu);
    ran.push_back(1);
    ran_on = std::this_thread::get_id();
  });
  scheduler.At(now + absl::Milliseconds(10), [&] {
    absl::MutexLock lock(&mu);
    ran.push_back(2);
  });
  REQUIRE(last.WaitForNotificationWithTimeout(absl::Seconds(30)));
  absl::MutexLock lock(&mu);
  CHECK(ran == std::vector<int>{1, 2, 3});
  CHECK(ran_on != std::this_thread::get_id());
  CHECK(absl::Now() >= now + absl::Milliseconds(30));
}

TEST_CASE("a task may schedule another", "[client][scheduler]") {
  absl::Notification second;
  Scheduler scheduler;
  scheduler.At(absl::Now(), [&] { scheduler.At(absl::Now(), [&] { second.Notify(); }); });
  CHECK(second.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST_CASE("destroying a scheduler runs the tasks not yet due, none dropped",
          "[client][scheduler]") {
  int ran = 0;
  const absl::Time start = absl::Now();
  {
    Scheduler scheduler;
    for (int i = 0; i < 5; ++i) scheduler.At(absl::Now() + absl::Hours(1), [&] { ++ran; });
  }  // joins the thread: `ran` is safe to read after
  CHECK(ran == 5);
  CHECK(absl::Now() - start < absl::Minutes(30));
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

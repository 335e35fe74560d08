#include "client/internal/send_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace ps {
namespace client_internal {
namespace {

TEST_CASE("a send pool runs every task on its own threads", "[client][send_pool]") {
  const int threads = GENERATE(1, 3);
  absl::Mutex mu;
  std::set<std::thread::id> ran_on;
  std::atomic<int> ran{0};
  {
    SendPool pool(threads);
    for (int i = 0; i < 200; ++i) {
      pool.Run([&] {
        absl::MutexLock lock(&mu);
        ran_on.insert(std::this_thread::get_id());
        ++ran;
      });
    }
  }  // the destructor runs what is left
  CHECK(ran == 200);
  CHECK(ran_on.count(std::this_thread::get_id()) == 0);
  CHECK(static_cast<int>(ran_on.size()) <= threads);
}

TEST_CASE("tasks of a send pool run side by side", "[client][send_pool]") {
  // Two tasks that each wait for the other: they finish only if two threads run them at once.
  SendPool pool(2);
  absl::Notification first, second, both;
  std::atomic<int> done{0};
  pool.Run([&] {
    first.Notify();
    second.WaitForNotification();
    if (++done == 2) both.Notify();
  });
  pool.Run([&] {
    second.Notify();
    first.WaitForNotification();
    if (++done == 2) both.Notify();
  });
  CHECK(both.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST_CASE("the automatic pool size follows the cores", "[client][send_pool]") {
  CHECK(SendPool::AutomaticThreads(1) == 0);
  CHECK(SendPool::AutomaticThreads(2) == 0);
  CHECK(SendPool::AutomaticThreads(4) == 2);
  CHECK(SendPool::AutomaticThreads(16) == 8);
  CHECK(SendPool::AutomaticThreads(64) == 8);
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

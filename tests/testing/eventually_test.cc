#include "tests/testing/eventually.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

namespace ps {
namespace testing {
namespace {

TEST_CASE("Eventually sees a condition another thread makes true", "[eventually]") {
  std::atomic<bool> done{false};
  std::thread t([&] { done = true; });
  CHECK(Eventually([&] { return done.load(); }));
  t.join();
}

TEST_CASE("Eventually gives up at its deadline", "[eventually]") {
  int polls = 0;
  CHECK_FALSE(Eventually([&] { return ++polls < 0; }, absl::Milliseconds(20)));
  CHECK(polls >= 2);
}

}  // namespace
}  // namespace testing
}  // namespace ps

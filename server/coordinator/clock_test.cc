#include "server/coordinator/clock.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "catch2/catch.hpp"
#include "server/coordinator/fake_clock.h"

namespace ps {
namespace coordinator {
namespace {

TEST_CASE("the real clock is one clock, and reads the wall clock", "[clock]") {
  Clock* const clock = Clock::Real();
  REQUIRE(clock == Clock::Real());
  const absl::Time before = absl::Now();
  const absl::Time now = clock->Now();
  CHECK(now >= before);
  CHECK(now <= absl::Now());
}

TEST_CASE("a fake clock moves only when told to", "[clock]") {
  FakeClock fake;
  Clock* const clock = &fake;
  const absl::Time start = clock->Now();
  CHECK(clock->Now() == start);
  fake.Advance(absl::Seconds(3));
  CHECK(clock->Now() == start + absl::Seconds(3));
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

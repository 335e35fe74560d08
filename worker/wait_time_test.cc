#include "worker/wait_time.h"

#include <catch2/catch.hpp>

#include "absl/status/status.h"

namespace ps {
namespace worker {
namespace {

TEST_CASE("WaitTime adds the measured calls' time until taken, whatever they return",
          "[worker][wait_time]") {
  WaitTime waited;
  CHECK(waited.waited() == absl::ZeroDuration());
  const absl::Time before = absl::Now();
  CHECK(waited.Measure([] { return absl::UnavailableError("peer gone"); }).code() ==
        absl::StatusCode::kUnavailable);
  CHECK(waited.Measure([] { return 7; }) == 7);
  const absl::Duration bound = absl::Now() - before;
  const absl::Duration measured = waited.waited();
  CHECK(measured >= absl::ZeroDuration());
  CHECK(measured <= bound);
  CHECK(waited.Take() == measured);
  CHECK(waited.waited() == absl::ZeroDuration());
  CHECK(waited.Take() == absl::ZeroDuration());
}

}  // namespace
}  // namespace worker
}  // namespace ps

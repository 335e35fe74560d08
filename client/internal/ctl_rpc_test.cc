#include "client/internal/ctl_rpc.h"

#include <catch2/catch.hpp>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/in_process_coordinator.h"
#include "tests/testing/ports.h"

namespace ps {
namespace client_internal {
namespace {


TEST_CASE("a coordinator nobody answers for: UNAVAILABLE naming it, within the timeout", "[ctl]") {
  testing::RefusingPort port;
  CtlConnection connection(port.address(), absl::Milliseconds(1500));
  const std::string prefix = absl::StrCat("coordinator ", port.address(), ": UNAVAILABLE: ");
  const absl::Time start = absl::Now();
  const auto status = connection.ClusterStatus();
  CHECK(status.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(status.status().message()), Catch::StartsWith(prefix));
  const auto servers = connection.ServerStatuses(rpc::ServerStatusRequest());
  CHECK(servers.status().code() == absl::StatusCode::kUnavailable);
  const auto sample = connection.Sample(rpc::ServerStatusRequest());
  CHECK(sample.status().code() == absl::StatusCode::kUnavailable);
  // A checkpoint waits for the connection up to the timeout, no longer.
  const auto checkpoint = connection.Checkpoint(-1);
  CHECK(checkpoint.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(checkpoint.status().message()),
             Catch::StartsWith(prefix + "not reachable within 1.5s"));
  CHECK(absl::Now() - start < absl::Seconds(10));  // generous: a few calls and one 1.5 s wait
}

TEST_CASE("given several coordinators, calls go to one that answers", "[ctl]") {
  testing::RefusingPort first;
  testing::RefusingPort second;
  {
    CtlConnection connection(absl::StrCat(first.address(), ",", second.address()),
                             absl::Milliseconds(1500));
    const auto status = connection.ClusterStatus();
    CHECK(status.status().code() == absl::StatusCode::kUnavailable);
    // Both were tried: the last answer names the second.
    CHECK_THAT(std::string(status.status().message()),
               Catch::StartsWith(absl::StrCat("coordinator ", second.address(), ": UNAVAILABLE")));
  }
  testing::InProcessCoordinator c(1, 1);
  CtlConnection connection(absl::StrCat(first.address(), ",", c.address), absl::Seconds(10));
  const auto status = connection.ClusterStatus();
  REQUIRE(status.ok());
  CHECK(status->job_name() == "client-test");
  CHECK(connection.address() == c.address);
  CHECK(connection.Sample(rpc::ServerStatusRequest()).ok());
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

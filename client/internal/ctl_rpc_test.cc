#include "client/internal/ctl_rpc.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace client_internal {
namespace {

// A loopback port bound by a socket that does not listen: connections to it are refused.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  }
  ~RefusingPort() { close(fd_); }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

TEST_CASE("a coordinator nobody answers for: UNAVAILABLE naming it, within the timeout", "[ctl]") {
  RefusingPort port;
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

}  // namespace
}  // namespace client_internal
}  // namespace ps

#include "tests/testing/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace testing {
namespace {

// A TCP socket bound to a free loopback port, and that port.
int BindLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::fprintf(stderr, "cannot bind a loopback socket: %s\n", std::strerror(errno));
    std::abort();
  }
  *port = ntohs(address.sin_port);
  return fd;
}

}  // namespace

RefusingPort::RefusingPort() { fd_ = BindLoopback(&port_); }

RefusingPort::~RefusingPort() { close(fd_); }

std::string RefusingPort::address() const { return absl::StrCat("127.0.0.1:", port_); }

int FreeLoopbackPort() {
  int port = 0;
  close(BindLoopback(&port));
  return port;
}

int MetricsPortInLog(absl::string_view log) {
  constexpr absl::string_view kPrefix = "metrics on http://";
  const size_t at = log.find(kPrefix);
  if (at == absl::string_view::npos) return 0;
  const size_t end = log.find("/metrics", at + kPrefix.size());
  if (end == absl::string_view::npos) return 0;
  const size_t colon = log.rfind(':', end);
  int port = 0;
  if (colon == absl::string_view::npos || colon < at ||
      !absl::SimpleAtoi(log.substr(colon + 1, end - colon - 1), &port)) {
    return 0;
  }
  return port;
}

}  // namespace testing
}  // namespace ps

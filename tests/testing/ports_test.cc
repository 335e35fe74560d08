#include "tests/testing/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>

namespace ps {
namespace testing {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  const int result = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  const int error = result == 0 ? 0 : errno;
  close(fd);
  return error;
}

TEST_CASE("A RefusingPort refuses connections while it lives", "[ports]") {
  RefusingPort port;
  CHECK(port.port() > 0);
  CHECK(port.address() == "127.0.0.1:" + std::to_string(port.port()));
  CHECK(Connect(port.port()) == ECONNREFUSED);
}

TEST_CASE("FreeLoopbackPort gives a port that can be bound", "[ports]") {
  const int port = FreeLoopbackPort();
  REQUIRE(port > 0);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  CHECK(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  close(fd);
}

TEST_CASE("MetricsPortInLog reads the port a daemon printed, or 0", "[ports]") {
  CHECK(MetricsPortInLog("ps_server 0 listening on a:1\nps_server: metrics on "
                         "http://127.0.0.1:39123/metrics\n") == 39123);
  CHECK(MetricsPortInLog("ps_worker: metrics on http://[::1]:8080/metrics") == 8080);
  CHECK(MetricsPortInLog("no metrics here") == 0);
  CHECK(MetricsPortInLog("metrics on http://host:notaport/metrics") == 0);
}

}  // namespace
}  // namespace testing
}  // namespace ps

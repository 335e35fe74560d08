#include "common/net_address.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "catch2/catch.hpp"

namespace ps {
namespace {

TEST_CASE("ParseHostPort reads names, IPv4 and bracketed IPv6 hosts", "[net_address]") {
  absl::StatusOr<HostPort> a = ParseHostPort("10.0.0.5:7000");
  REQUIRE(a.ok());
  CHECK(a->host == "10.0.0.5");
  CHECK(a->port == 7000);
  a = ParseHostPort("node-3.cluster:0");
  REQUIRE(a.ok());
  CHECK(a->host == "node-3.cluster");
  CHECK(a->port == 0);
  a = ParseHostPort("[::]:65535");
  REQUIRE(a.ok());
  CHECK(a->host == "::");
  CHECK(a->port == 65535);
  a = ParseHostPort(":7001");
  REQUIRE(a.ok());
  CHECK(a->host == "0.0.0.0");
}

TEST_CASE("ParseHostPort says what is wrong with a bad address", "[net_address]") {
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"10.0.0.5", "no port"},
      {"10.0.0.5:", "0 to 65535"},
      {"10.0.0.5:x1", "0 to 65535"},
      {"10.0.0.5:65536", "0 to 65535"},
      {"10.0.0.5:-1", "0 to 65535"},
      {"fe80::1:7000", "needs brackets"},
      {"[::1:7000", "no closing bracket"},
      {"[::1]7000", "no port"},
      {"[]:7000", "empty host"},
      {"a]b:1", "stray bracket"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const absl::StatusOr<HostPort> parsed = ParseHostPort(c.text);
    REQUIRE(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(parsed.status().message()), Catch::Contains(c.why));
    CHECK_THAT(std::string(parsed.status().message()), Catch::Contains(c.text));
  }
}

TEST_CASE("ParseHostPort takes only digits as a port, and no space in a host", "[net_address]") {
  const AddressUse use = GENERATE(AddressUse::kListen, AddressUse::kDial);
  for (const char* text : {"h:+80", "h: 80", "h:80 ", "h:0x10", "h h:80", " h:80", "h\t:80",
                           "h:99999999999999999999"}) {
    INFO(text);
    const absl::StatusOr<HostPort> parsed = ParseHostPort(text, use);
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(parsed.status().message()), Catch::Contains(text));
  }
}

// The rules a member's address was checked with before there was one parser, and still is.
TEST_CASE("ParseHostPort for an address to dial: a host and a port from 1", "[net_address]") {
  absl::StatusOr<HostPort> a = ParseHostPort("10.0.0.5:7000", AddressUse::kDial);
  REQUIRE(a.ok());
  CHECK(a->host == "10.0.0.5");
  CHECK(a->port == 7000);
  a = ParseHostPort("[::1]:65535", AddressUse::kDial);
  REQUIRE(a.ok());
  CHECK(a->host == "::1");
  a = ParseHostPort("node-3.cluster:1", AddressUse::kDial);
  REQUIRE(a.ok());
  CHECK(a->port == 1);

  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"10.0.0.5", "no port"},
      {"10.0.0.5:", "1 to 65535"},
      {"10.0.0.5:0", "1 to 65535"},
      {"10.0.0.5:65536", "1 to 65535"},
      {":7000", "empty host"},
      {"[]:7000", "empty host"},
      {"[::1:7000", "no closing bracket"},
      {"[::1]7000", "no port"},
      {"fe80::1:7000", "needs brackets"},
      {"a]b:1", "stray bracket"},
      {"my host:7000", "space in host"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const absl::StatusOr<HostPort> parsed = ParseHostPort(c.text, AddressUse::kDial);
    REQUIRE(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(parsed.status().message()), Catch::Contains(c.why));
  }
  // What an address to listen on may be, and one to dial may not.
  CHECK(ParseHostPort(":7000").ok());
  CHECK(ParseHostPort("h:0").ok());
}

TEST_CASE("JoinHostPort brackets IPv6 hosts", "[net_address]") {
  CHECK(JoinHostPort("10.0.0.5", 7) == "10.0.0.5:7");
  CHECK(JoinHostPort("::1", 7) == "[::1]:7");
  CHECK(JoinHostPort("[::1]", 7) == "[::1]:7");
}

TEST_CASE("wildcard and loopback hosts are told apart", "[net_address]") {
  CHECK(IsWildcardHost("0.0.0.0"));
  CHECK(IsWildcardHost("::"));
  CHECK(IsWildcardHost(""));
  CHECK_FALSE(IsWildcardHost("10.0.0.1"));
  CHECK(IsLoopbackHost("127.0.0.1"));
  CHECK(IsLoopbackHost("127.0.1.1"));
  CHECK(IsLoopbackHost("::1"));
  CHECK(IsLoopbackHost("localhost"));
  CHECK_FALSE(IsLoopbackHost("10.0.0.1"));
  CHECK_FALSE(IsLoopbackHost("128.0.0.1"));
}

TEST_CASE("the advertised host is the flag, else a specific listen host, else this host's",
          "[net_address]") {
  const HostPort specific{"10.1.2.3", 0};
  const HostPort any{"0.0.0.0", 0};
  absl::StatusOr<std::string> host = ResolveAdvertiseHost(any, "node-1");
  REQUIRE(host.ok());
  CHECK(*host == "node-1");
  host = ResolveAdvertiseHost(any, "fd00::5");
  REQUIRE(host.ok());
  CHECK(*host == "fd00::5");
  host = ResolveAdvertiseHost(specific, "");
  REQUIRE(host.ok());
  CHECK(*host == "10.1.2.3");
  CHECK(ResolveAdvertiseHost(any, "0.0.0.0").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ResolveAdvertiseHost(any, "node-1:7000").status().code() ==
        absl::StatusCode::kInvalidArgument);
  // This host's default: a name or address that is not loopback, or a clear refusal on a machine
  // with loopback only.
  host = ResolveAdvertiseHost(any, "");
  if (host.ok()) {
    CHECK_FALSE(IsLoopbackHost(*host));
    CHECK(*host == *DefaultAdvertiseHost());
  } else {
    CHECK(host.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(host.status().message()), Catch::Contains("--advertise"));
  }
}

TEST_CASE("CheckCanListen binds and releases, and says why it cannot", "[net_address]") {
  CHECK(CheckCanListen({"127.0.0.1", 0}).ok());
  CHECK(CheckCanListen({"0.0.0.0", 0}).ok());

  // A port some socket listens on.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(listen(fd, 1) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const int port = ntohs(address.sin_port);
  const absl::Status busy = CheckCanListen({"127.0.0.1", port});
  close(fd);
  CHECK(busy.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(busy.message()), Catch::Contains("in use"));

  // TEST-NET-1: no host has it.
  const absl::Status foreign = CheckCanListen({"192.0.2.1", 0});
  CHECK(foreign.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(foreign.message()), Catch::Contains("192.0.2.1:0"));

  CHECK(CheckCanListen({"no-such-host.invalid", 0}).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("InterfaceWithAddress finds the interface that has an address", "[net_address]") {
  absl::StatusOr<std::string> lo = InterfaceWithAddress("127.0.0.1");
  REQUIRE(lo.ok());
  CHECK(*lo == "lo");
  CHECK(InterfaceWithAddress("192.0.2.1").status().code() == absl::StatusCode::kNotFound);
  CHECK(InterfaceWithAddress("no-such-host.invalid").status().code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST_CASE("ParseDaemonAddress checks --listen and resolves the advertised host", "[net_address]") {
  absl::StatusOr<DaemonAddress> a = ParseDaemonAddress("10.1.2.3:7000", "");
  REQUIRE(a.ok());
  CHECK(a->listen.host == "10.1.2.3");
  CHECK(a->listen.port == 7000);
  CHECK(a->advertise == "10.1.2.3");
  a = ParseDaemonAddress("0.0.0.0:0", "node-1");
  REQUIRE(a.ok());
  CHECK(a->advertise == "node-1");
  a = ParseDaemonAddress("10.1.2.3", "");
  CHECK(a.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(a.status().message()), Catch::StartsWith("--listen: bad address"));
  CHECK(ParseDaemonAddress("0.0.0.0:0", "0.0.0.0").status().code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps

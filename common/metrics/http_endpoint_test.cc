#include "common/metrics/http_endpoint.h"

#include <httplib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

namespace ps {
namespace metrics {
namespace {

TEST_CASE("GET /metrics serves the registry as it is at each scrape", "[http_endpoint]") {
  Registry registry;
  Counter* counter = registry.GetCounter("ps_test_total", "Test.");
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start("127.0.0.1:0", &registry);
  REQUIRE(endpoint.ok());
  REQUIRE((*endpoint)->port() > 0);
  httplib::Client client("127.0.0.1", (*endpoint)->port());
  counter->Increment(41);
  auto first = client.Get("/metrics");
  REQUIRE(first);
  CHECK(first->status == 200);
  CHECK(first->get_header_value("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(first->body.find("ps_test_total 41\n") != std::string::npos);
  counter->Increment();
  auto second = client.Get("/metrics");
  REQUIRE(second);
  CHECK(second->body.find("ps_test_total 42\n") != std::string::npos);

  CHECK((*endpoint)->scrapes() == 2);
  CHECK((*endpoint)->AwaitScrapeAfter(1, absl::ZeroDuration()));
  CHECK_FALSE((*endpoint)->AwaitScrapeAfter(2, absl::Milliseconds(10)));

  auto other = client.Get("/");
  REQUIRE(other);
  CHECK(other->status == 404);
}

TEST_CASE("A port in use is UNAVAILABLE naming the address; a malformed one INVALID_ARGUMENT",
          "[http_endpoint]") {
  Registry registry;
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> first =
      MetricsEndpoint::Start("127.0.0.1:0", &registry);
  REQUIRE(first.ok());
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> second =
      MetricsEndpoint::Start(taken, &registry);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(second.status().message()).find(taken) != std::string::npos);

  CHECK(MetricsEndpoint::Start("127.0.0.1", &registry).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("StartDaemonEndpoint: off when empty; writes the bound port to the port file",
          "[http_endpoint]") {
  Registry registry;
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> off =
      StartDaemonEndpoint("test", "", "", &registry);
  REQUIRE(off.ok());
  CHECK(*off == nullptr);

  char dir[] = "/tmp/http_endpoint_test.XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string port_file = std::string(dir) + "/metrics_port";
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> on =
      StartDaemonEndpoint("test", "127.0.0.1:0", port_file, &registry);
  REQUIRE(on.ok());
  REQUIRE(*on != nullptr);
  std::ifstream in(port_file);
  int port = 0;
  in >> port;
  CHECK(port == (*on)->port());
  unlink(port_file.c_str());
  rmdir(dir);

  const absl::StatusOr<std::unique_ptr<MetricsEndpoint>> bad =
      StartDaemonEndpoint("test", "127.0.0.1:0", "/nonexistent-folder/port", &registry);
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).find("--metrics_port_file") != std::string::npos);
}

TEST_CASE("CheckDaemonEndpoint: empty is off, a bound port and a malformed address are refused",
          "[http_endpoint]") {
  Registry registry;
  CHECK(CheckDaemonEndpoint("").ok());
  CHECK(CheckDaemonEndpoint("127.0.0.1:0").ok());
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> taken =
      MetricsEndpoint::Start("127.0.0.1:0", &registry);
  REQUIRE(taken.ok());
  CHECK_FALSE(CheckDaemonEndpoint("127.0.0.1:" + std::to_string((*taken)->port())).ok());
  CHECK(CheckDaemonEndpoint("127.0.0.1").code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace metrics
}  // namespace ps

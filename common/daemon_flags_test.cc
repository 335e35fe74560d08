#include "common/daemon_flags.h"

#include <fstream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "common/metrics/registry.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

TEST_CASE("daemon flags: one definition each, with the daemons' defaults", "[daemon_flags]") {
  absl::FlagSaver saver;
  CHECK(absl::GetFlag(FLAGS_listen) == "0.0.0.0:0");
  CHECK(absl::GetFlag(FLAGS_advertise).empty());
  CHECK_FALSE(absl::GetFlag(FLAGS_dry_run));
  CHECK(absl::GetFlag(FLAGS_metrics_listen).empty());
  CHECK(absl::GetFlag(FLAGS_metrics_port_file).empty());
  CHECK_FALSE(MetricsEndpointWanted());
  for (const char* name :
       {"listen", "advertise", "dry_run", "metrics_listen", "metrics_port_file"}) {
    INFO(name);
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    REQUIRE(flag != nullptr);
    CHECK_THAT(flag->Filename(), Catch::Contains("common/daemon_flags.cc"));
    CHECK_FALSE(flag->Help().empty());
  }
}

TEST_CASE("daemon flags: --listen and --advertise are checked together", "[daemon_flags]") {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_listen, "127.0.0.1:0");
  absl::SetFlag(&FLAGS_advertise, "");
  absl::StatusOr<DaemonAddress> address = DaemonAddressFromFlags();
  REQUIRE(address.ok());
  CHECK(address->listen.host == "127.0.0.1");
  CHECK(address->listen.port == 0);
  CHECK(address->advertise == "127.0.0.1");

  absl::SetFlag(&FLAGS_listen, "0.0.0.0:0");
  absl::SetFlag(&FLAGS_advertise, "node-7");
  address = DaemonAddressFromFlags();
  REQUIRE(address.ok());
  CHECK(address->advertise == "node-7");

  absl::SetFlag(&FLAGS_listen, "127.0.0.1");
  address = DaemonAddressFromFlags();
  CHECK(address.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(address.status().message()), Catch::StartsWith("--listen: bad address"));
}

TEST_CASE("daemon flags: a dry run binds --listen and --metrics_listen", "[daemon_flags]") {
  absl::FlagSaver saver;
  const HostPort loopback{"127.0.0.1", 0};
  CHECK(CheckCanListenFromFlags(loopback).ok());
  absl::SetFlag(&FLAGS_metrics_listen, "127.0.0.1:0");
  CHECK(MetricsEndpointWanted());
  CHECK(CheckCanListenFromFlags(loopback).ok());
  absl::SetFlag(&FLAGS_metrics_listen, "127.0.0.1");
  const absl::Status bad_metrics = CheckCanListenFromFlags(loopback);
  CHECK(bad_metrics.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad_metrics.message()), Catch::StartsWith("--metrics_listen: "));
  // 192.0.2.1 (TEST-NET-1) is no address of this host: it cannot be bound.
  CHECK(CheckCanListenFromFlags({"192.0.2.1", 0}).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("daemon flags: the metrics endpoint starts as the flags say", "[daemon_flags]") {
  absl::FlagSaver saver;
  metrics::Registry registry;
  absl::StatusOr<std::unique_ptr<metrics::MetricsEndpoint>> endpoint =
      StartMetricsEndpointFromFlags("daemon_flags_test", &registry);
  REQUIRE(endpoint.ok());
  CHECK(*endpoint == nullptr);  // off by default

  const std::string port_file = testing::TempDir() + "/daemon_flags_metrics_port";
  absl::SetFlag(&FLAGS_metrics_listen, "127.0.0.1:0");
  absl::SetFlag(&FLAGS_metrics_port_file, port_file);
  endpoint = StartMetricsEndpointFromFlags("daemon_flags_test", &registry);
  REQUIRE(endpoint.ok());
  REQUIRE(*endpoint != nullptr);
  std::ifstream in(port_file);
  int port = 0;
  in >> port;
  CHECK(port > 0);
  CHECK(port == (*endpoint)->port());
}

}  // namespace
}  // namespace ps

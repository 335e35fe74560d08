// A coordinator (server/coordinator) behind a real gRPC server on a free loopback port, in the
// test's process, for the tests of its clients.
#ifndef PS_TESTS_TESTING_IN_PROCESS_COORDINATOR_H_
#define PS_TESTS_TESTING_IN_PROCESS_COORDINATOR_H_

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/coordinator_client.h"
#include "common/job_config.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/fake_clock.h"

namespace ps {
namespace testing {

using coordinator::Coordinator;
using coordinator::CoordinatorService;

// A job of `servers` and `workers` (and `cluster_extra` fields of its cluster) on a coordinator
// behind a real gRPC server on a free loopback port. On the fake clock (for tests of
// liveness) the calls' deadlines pass only when the test advances it, so tests of waits use the
// real clock.
class InProcessCoordinator {
 public:
  InProcessCoordinator(int servers, int workers, bool fake_clock = false,
                       const std::string& cluster_extra = "") {
    const std::string text = absl::StrFormat(
        R"pb(name: "client-test"
             tables { name: "emb" dim: 4 }
             cluster { num_servers: %d num_workers: %d num_shards: 8 %s })pb",
        servers, workers, cluster_extra);
    absl::StatusOr<config::Job> job = ParseJob(text, "job.pbtxt");
    REQUIRE(job.ok());
    coordinator::CoordinatorOptions options;
    options.job = *job;
    if (fake_clock) options.clock = &clock;
    auto c = Coordinator::Create(std::move(options));
    REQUIRE(c.ok());
    coordinator = std::move(*c);
    service = std::make_unique<CoordinatorService>(coordinator.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service.get());
    builder.SetMaxReceiveMessageSize(CoordinatorClient::kMaxMessageBytes);
    builder.SetMaxSendMessageSize(CoordinatorClient::kMaxMessageBytes);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    REQUIRE(port > 0);
    address = absl::StrCat("127.0.0.1:", port);
  }

  ~InProcessCoordinator() { Stop(); }

  // The daemon's shutdown order: end the waits, then the server.
  void Stop() {
    if (server == nullptr) return;
    coordinator->Shutdown();
    server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    server.reset();
  }

  std::unique_ptr<CoordinatorClient> Connect() {
    auto client = CoordinatorClient::Connect(address, absl::Seconds(10));
    INFO(client.status().ToString());
    REQUIRE(client.ok());
    return std::move(*client);
  }

  coordinator::FakeClock clock;  // used when fake_clock
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<CoordinatorService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_IN_PROCESS_COORDINATOR_H_

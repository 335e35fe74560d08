#include "common/grpc/server_builder.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/grpc/channel_factory.h"
#include "common/metrics/grpc_server_metrics.h"
#include "common/metrics/registry.h"
#include "common/grpc/kv_set_service_for_test.h"
#include "proto/coordinator.grpc.pb.h"

namespace ps {
namespace grpc_util {
namespace {


grpc::Status KvSet(rpc::Coordinator::Stub* stub, size_t value_bytes) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  rpc::KvSetRequest request;
  request.set_key("k");
  request.set_value(std::string(value_bytes, 'x'));
  rpc::KvSetResponse response;
  return stub->KvSet(&context, request, &response);
}

std::unique_ptr<rpc::Coordinator::Stub> StubTo(int port) {
  return rpc::Coordinator::NewStub(
      NewChannel("127.0.0.1:" + std::to_string(port), ChannelOptions()));
}

TEST_CASE("StartServer binds port 0 to a free port and serves", "[grpc]") {
  KvSetService service;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  absl::StatusOr<StartedServer> started = StartServer(std::move(options), {&service});
  REQUIRE(started.ok());
  CHECK(started->port > 0);
  CHECK(KvSet(StubTo(started->port).get(), 10).ok());
  started->server->Shutdown();
}

TEST_CASE("StartServer enforces the message limit it is given", "[grpc]") {
  KvSetService service;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.max_receive_message_bytes = 1024;
  absl::StatusOr<StartedServer> started = StartServer(std::move(options), {&service});
  REQUIRE(started.ok());
  auto stub = StubTo(started->port);
  CHECK(KvSet(stub.get(), 100).ok());
  CHECK(KvSet(stub.get(), 4096).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  started->server->Shutdown();
}

TEST_CASE("StartServer installs the interceptors it is given", "[grpc]") {
  metrics::Registry registry;
  KvSetService service;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.interceptors.push_back(metrics::MakeServerMetricsInterceptorFactory(&registry, "t"));
  absl::StatusOr<StartedServer> started = StartServer(std::move(options), {&service});
  REQUIRE(started.ok());
  REQUIRE(KvSet(StubTo(started->port).get(), 10).ok());
  started->server->Shutdown();
  const std::string text = registry.Render();
  INFO(text);
  CHECK(text.find("t_rpcs_total{method=\"KvSet\",code=\"OK\"} 1\n") != std::string::npos);
}

TEST_CASE("StartServer says which address it cannot listen on", "[grpc]") {
  KvSetService service;
  ServerOptions first;
  first.listen_address = "127.0.0.1:0";
  first.int_args.emplace_back(GRPC_ARG_ALLOW_REUSEPORT, 0);
  absl::StatusOr<StartedServer> taken = StartServer(std::move(first), {&service});
  REQUIRE(taken.ok());

  KvSetService other;
  ServerOptions second;
  second.listen_address = "127.0.0.1:" + std::to_string(taken->port);
  second.int_args.emplace_back(GRPC_ARG_ALLOW_REUSEPORT, 0);
  absl::StatusOr<StartedServer> refused = StartServer(std::move(second), {&other});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kUnavailable);
  CHECK(refused.status().message() ==
        "cannot listen on 127.0.0.1:" + std::to_string(taken->port));
  taken->server->Shutdown();
}

TEST_CASE("StartServer refuses options without an address or a service", "[grpc]") {
  KvSetService service;
  CHECK(StartServer(ServerOptions(), {&service}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  CHECK(StartServer(std::move(options), {}).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace grpc_util
}  // namespace ps

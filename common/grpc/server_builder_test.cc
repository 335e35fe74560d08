#include "common/grpc/server_builder.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <memory>
#include <thread>
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

TEST_CASE("StartServer refuses a resource bound out of range, naming it", "[grpc][bounds]") {
  KvSetService service;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  const std::string field = GENERATE("max_concurrent_streams", "memory_quota_bytes",
                                     "max_connection_idle_ms", "keepalive_time_ms",
                                     "keepalive_timeout_ms");
  const int bad = GENERATE(0, -2);
  if (field == "max_concurrent_streams") options.max_concurrent_streams = bad;
  if (field == "memory_quota_bytes") options.memory_quota_bytes = bad;
  if (field == "max_connection_idle_ms") options.max_connection_idle_ms = bad;
  if (field == "keepalive_time_ms") options.keepalive_time_ms = bad;
  if (field == "keepalive_timeout_ms") options.keepalive_timeout_ms = bad;
  const absl::Status status = StartServer(std::move(options), {&service}).status();
  INFO(status.ToString());
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(status.message() == "ServerOptions." + field + " must be -1 (gRPC's default) or > 0, got " +
                                std::to_string(bad));
}

TEST_CASE("StartServer with every resource bound set still serves", "[grpc][bounds]") {
  KvSetService service;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.max_concurrent_streams = 4;
  options.memory_quota_bytes = 64 << 20;
  options.keepalive_time_ms = 1000;
  options.keepalive_timeout_ms = 1000;
  options.max_connection_idle_ms = 60000;
  absl::StatusOr<StartedServer> started = StartServer(std::move(options), {&service});
  REQUIRE(started.ok());
  auto stub = StubTo(started->port);
  // More calls at once than streams allowed: the extra ones wait for a stream, none is refused.
  std::vector<std::thread> callers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 16; ++i) {
    callers.emplace_back([&] {
      for (int j = 0; j < 20; ++j) ok += KvSet(stub.get(), 1000).ok() ? 1 : 0;
    });
  }
  for (std::thread& caller : callers) caller.join();
  CHECK(ok.load() == 16 * 20);
  started->server->Shutdown();
}

TEST_CASE("StartServer closes a connection idle for max_connection_idle_ms", "[grpc][bounds]") {
  KvSetService service;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.max_connection_idle_ms = 300;
  absl::StatusOr<StartedServer> started = StartServer(std::move(options), {&service});
  REQUIRE(started.ok());
  std::shared_ptr<grpc::Channel> channel =
      NewChannel("127.0.0.1:" + std::to_string(started->port), ChannelOptions());
  auto stub = rpc::Coordinator::NewStub(channel);
  REQUIRE(KvSet(stub.get(), 10).ok());
  REQUIRE(channel->GetState(false) == GRPC_CHANNEL_READY);
  // The server's GOAWAY takes the channel out of READY; wait for it with a deadline.
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(20);
  grpc_connectivity_state state = GRPC_CHANNEL_READY;
  while (state == GRPC_CHANNEL_READY && channel->WaitForStateChange(state, deadline)) {
    state = channel->GetState(false);
  }
  CHECK(state != GRPC_CHANNEL_READY);
  // The client reconnects on its next call.
  CHECK(KvSet(stub.get(), 10).ok());
  started->server->Shutdown();
}

}  // namespace
}  // namespace grpc_util
}  // namespace ps

#include "common/grpc/channel_factory.h"

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "common/grpc/server_builder.h"
#include "common/grpc/kv_set_service_for_test.h"
#include "proto/coordinator.grpc.pb.h"

namespace ps {
namespace grpc_util {
namespace {

// The integer channel arguments of `options`, by key.
std::map<std::string, int> IntArgs(const ChannelOptions& options) {
  grpc::ChannelArguments args = ToChannelArguments(options);
  const grpc_channel_args c_args = args.c_channel_args();
  std::map<std::string, int> out;
  for (size_t i = 0; i < c_args.num_args; ++i) {
    if (c_args.args[i].type == GRPC_ARG_INTEGER) {
      out[c_args.args[i].key] = c_args.args[i].value.integer;
    }
  }
  return out;
}

constexpr int kMax = std::numeric_limits<int>::max();

TEST_CASE("Default channel options set no channel argument", "[grpc]") {
  CHECK(IntArgs(ChannelOptions()).empty());
  CHECK(IntArgs(CheckpointChannelOptions()).empty());
}

TEST_CASE("Each role's channel options are the arguments that role has used", "[grpc]") {
  using Args = std::map<std::string, int>;
  ChannelOptions client = ClientDataChannelOptions();
  client.int_args.emplace_back("ps.channel_index", 3);
  CHECK(IntArgs(client) == Args{{GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, kMax},
                                {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, kMax},
                                {GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1},
                                {"ps.channel_index", 3},
                                {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20},
                                {GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20}});
  CHECK(IntArgs(ReplicationChannelOptions()) ==
        Args{{GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, kMax},
             {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, kMax},
             {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50},
             {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500},
             {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20},
             {GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20}});
  CHECK(IntArgs(CoordinatorChannelOptions()) ==
        Args{{GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, 256 << 20},
             {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 256 << 20},
             {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100},
             {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000},
             {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000}});
  CHECK(IntArgs(StatusFanoutChannelOptions()) ==
        Args{{GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100},
             {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000},
             {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000}});
  CHECK(IntArgs(CtlChannelOptions()) == Args{{GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 256 << 20}});
}

TEST_CASE("Keepalive is set only when asked for", "[grpc]") {
  ChannelOptions options;
  options.keepalive_time = absl::Seconds(30);
  CHECK(IntArgs(options) == std::map<std::string, int>{{GRPC_ARG_KEEPALIVE_TIME_MS, 30000}});
}


TEST_CASE("A channel from the factory reaches a server from the builder", "[grpc]") {
  KvSetService service;
  ServerOptions server_options;
  server_options.listen_address = "127.0.0.1:0";
  absl::StatusOr<StartedServer> started = StartServer(std::move(server_options), {&service});
  REQUIRE(started.ok());
  for (const ChannelOptions& options :
       {ClientDataChannelOptions(), ReplicationChannelOptions(), CoordinatorChannelOptions(),
        StatusFanoutChannelOptions(), CtlChannelOptions(), CheckpointChannelOptions()}) {
    auto stub = rpc::Coordinator::NewStub(
        NewChannel("127.0.0.1:" + std::to_string(started->port), options));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    rpc::KvSetResponse response;
    CHECK(stub->KvSet(&context, rpc::KvSetRequest(), &response).ok());
  }
  started->server->Shutdown();
}

}  // namespace
}  // namespace grpc_util
}  // namespace ps

#include "common/metrics/grpc_server_metrics.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "proto/coordinator.grpc.pb.h"

namespace ps {
namespace metrics {
namespace {

// A coordinator whose GetShardMap answers OK and whose KvGet answers NOT_FOUND; every other
// method is gRPC's UNIMPLEMENTED.
class FakeCoordinator final : public rpc::Coordinator::CallbackService {
  grpc::ServerUnaryReactor* GetShardMap(grpc::CallbackServerContext* context,
                                        const rpc::GetShardMapRequest*,
                                        rpc::ShardMap*) override {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context, const rpc::KvGetRequest*,
                                  rpc::KvGetResponse*) override {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "no such key"));
    return reactor;
  }
};

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST_CASE("Every call a server answers is counted by method and code, and timed", "[grpc]") {
  Registry registry;
  FakeCoordinator service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(MakeServerMetricsInterceptorFactory(&registry, "ps_test"));
  builder.experimental().SetInterceptorCreators(std::move(creators));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);

  auto stub = rpc::Coordinator::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    rpc::ShardMap map;
    REQUIRE(stub->GetShardMap(&context, rpc::GetShardMapRequest(), &map).ok());
  }
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    rpc::KvGetResponse response;
    CHECK(stub->KvGet(&context, rpc::KvGetRequest(), &response).error_code() ==
          grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    rpc::KvSetResponse response;
    CHECK(stub->KvSet(&context, rpc::KvSetRequest(), &response).error_code() ==
          grpc::StatusCode::UNIMPLEMENTED);
  }
  server->Shutdown();

  const std::string text = registry.Render();
  INFO(text);
  CHECK(Contains(text, "ps_test_rpcs_total{method=\"GetShardMap\",code=\"OK\"} 3\n"));
  CHECK(Contains(text, "ps_test_rpcs_total{method=\"KvGet\",code=\"NOT_FOUND\"} 2\n"));
  CHECK(Contains(text, "ps_test_rpcs_total{method=\"KvSet\",code=\"UNIMPLEMENTED\"} 1\n"));
  CHECK(Contains(text, "ps_test_rpc_duration_seconds_count{method=\"GetShardMap\"} 3\n"));
  CHECK(Contains(text, "ps_test_rpc_duration_seconds_count{method=\"KvGet\"} 2\n"));
  CHECK_FALSE(Contains(text, "code=\"INTERNAL\""));

  // Calls answered outside gRPC join the same series.
  CallMetrics outside(&registry, "ps_test", "GetShardMap");
  outside.Record(static_cast<int>(grpc::StatusCode::OK), 0.001);
  outside.Record(static_cast<int>(grpc::StatusCode::INTERNAL), 0.002);
  outside.Record(99, 0.003);  // no such code: UNKNOWN
  const std::string after = registry.Render();
  INFO(after);
  CHECK(Contains(after, "ps_test_rpcs_total{method=\"GetShardMap\",code=\"OK\"} 4\n"));
  CHECK(Contains(after, "ps_test_rpcs_total{method=\"GetShardMap\",code=\"INTERNAL\"} 1\n"));
  CHECK(Contains(after, "ps_test_rpcs_total{method=\"GetShardMap\",code=\"UNKNOWN\"} 1\n"));
  CHECK(Contains(after, "ps_test_rpc_duration_seconds_count{method=\"GetShardMap\"} 6\n"));
}

TEST_CASE("Status codes have their canonical names", "[grpc]") {
  CHECK(std::string(GrpcCodeName(0)) == "OK");
  CHECK(std::string(GrpcCodeName(5)) == "NOT_FOUND");
  CHECK(std::string(GrpcCodeName(16)) == "UNAUTHENTICATED");
  CHECK(std::string(GrpcCodeName(17)) == "UNKNOWN_CODE");
}

}  // namespace
}  // namespace metrics
}  // namespace ps

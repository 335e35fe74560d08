#include "server/ps_service.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_config.h"
#include "server/internal/test_fixtures.h"

namespace ps {
namespace server {
namespace {

using testing::EvenOddMap;
using testing::KeysOnShards;
using testing::TestJob;

// A PullRequest for `keys` of "emb", grouped into runs by shard.
rpc::PullRequest MakePull(const std::vector<uint64_t>& keys, uint64_t map_version) {
  rpc::PullRequest request;
  request.mutable_header()->set_map_version(map_version);
  request.set_table("emb");
  testing::SetKeys(keys, &request);
  return request;
}

// The service on an in-process server bound to port 0, called through the generated stub.
struct Served {
  Served() : service([](uint64_t) {}) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    REQUIRE(port != 0);
    stub = rpc::ParameterServer::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  ~Served() { server->Shutdown(); }

  grpc::Status Pull(const rpc::PullRequest& request, rpc::PullResponse* response) {
    grpc::ClientContext context;
    return stub->Pull(&context, request, response);
  }

  ParameterServerService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<rpc::ParameterServer::Stub> stub;
};

TEST_CASE("the hand-framed pull response is the PullResponse the store writes",
          "[server][service]") {
  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  (*store)->SetShardMap(EvenOddMap(3), 0);
  Served served;
  served.service.SetStore(store->get());

  const int n = GENERATE(0, 1, 31, 5000);  // 5000 rows: a length of three varint bytes
  const rpc::PullRequest request = MakePull(KeysOnShards(0, n), 3);
  rpc::PullResponse got;
  const grpc::Status status = served.Pull(request, &got);
  INFO(status.error_message());
  REQUIRE(status.ok());
  rpc::PullResponse want;
  REQUIRE((*store)->Pull(request, &want).ok());
  CHECK(got.dim() == 4);
  CHECK(got.values().size() == size_t(n) * 4 * sizeof(float));
  CHECK(got.values() == want.values());
}

TEST_CASE("the raw pull keeps every error code", "[server][service]") {
  Served served;
  rpc::PullResponse response;
  // Before the store: retryable.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 3), &response).error_code() ==
        grpc::StatusCode::UNAVAILABLE);

  auto store = ShardedStore::Create(TestJob(), {});
  REQUIRE(store.ok());
  served.service.SetStore(store->get());
  // Before the map: retryable.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 0), &response).error_code() ==
        grpc::StatusCode::UNAVAILABLE);
  (*store)->SetShardMap(EvenOddMap(3), 0);
  // Routed with a newer map than the server's.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 4), &response).error_code() ==
        grpc::StatusCode::UNAVAILABLE);

  rpc::PullRequest unknown = MakePull(KeysOnShards(0, 3), 3);
  unknown.set_table("nope");
  CHECK(served.Pull(unknown, &response).error_code() == grpc::StatusCode::NOT_FOUND);

  rpc::PullRequest torn = MakePull(KeysOnShards(0, 3), 3);
  torn.mutable_keys()->pop_back();
  CHECK(served.Pull(torn, &response).error_code() == grpc::StatusCode::INVALID_ARGUMENT);

  const grpc::Status theirs = served.Pull(MakePull(KeysOnShards(1, 3), 3), &response);
  CHECK(theirs.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(absl::StrContains(theirs.error_message(), "shard map version 3"));

  // 70000 rows of 16 bytes are over the job's 1 MiB message limit.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 70000), 3), &response).error_code() ==
        grpc::StatusCode::RESOURCE_EXHAUSTED);

  // The server keeps serving.
  CHECK(served.Pull(MakePull(KeysOnShards(0, 3), 3), &response).ok());
  CHECK(response.values().size() == 3 * 4 * sizeof(float));
}

}  // namespace
}  // namespace server
}  // namespace ps

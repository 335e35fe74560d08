#include "client/internal/channel_transport.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace client_internal {
namespace {

// A server that answers Push with duplicate_keys = the keys it got, and remembers the request.
class FakeServer final : public rpc::ParameterServer::Service {
 public:
  grpc::Status Push(grpc::ServerContext*, const rpc::PushRequest* request,
                    rpc::PushResponse* response) override {
    absl::MutexLock lock(&mu_);
    last_ = *request;
    response->set_duplicate_keys(request->keys().size() / sizeof(uint64_t));
    return grpc::Status::OK;
  }
  rpc::PushRequest last() {
    absl::MutexLock lock(&mu_);
    return last_;
  }

 private:
  absl::Mutex mu_;
  rpc::PushRequest last_ ABSL_GUARDED_BY(mu_);
};

// A push of keys 1, 2, 3 with gradients 0.5, 1.5, 2.5 (dim 1).
class TestExchange final : public Exchange {
 public:
  TestExchange() {
    push = true;
    num_keys = 3;
    key_bytes = 3 * sizeof(uint64_t);
    grad_bytes = 3 * sizeof(float);
    fields.set_table("user");
    fields.mutable_header()->set_sequence(5);
    deadline = absl::Now() + absl::Seconds(30);
  }
  void WritePayload(char* keys, char* grads) const override {
    const uint64_t k[3] = {1, 2, 3};
    const float g[3] = {0.5f, 1.5f, 2.5f};
    std::memcpy(keys, k, sizeof(k));
    if (grads != nullptr) std::memcpy(grads, g, sizeof(g));
    ++payloads_written;
  }
  void OnDone(const grpc::Status& status) override {
    ended = status;
    done.Notify();
  }

  mutable int payloads_written = 0;
  grpc::Status ended;
  absl::Notification done;
};

TEST_CASE("a request on the channel carries its payload in the message, or names its slot",
          "[client][transport]") {
  FakeServer service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(port > 0);
  const int channels = GENERATE(1, 3);
  ChannelTransport transport("127.0.0.1:" + std::to_string(port), channels, nullptr);
  CHECK(transport.address() == "127.0.0.1:" + std::to_string(port));

  SECTION("in the message") {
    TestExchange exchange;
    transport.Start(&exchange);
    REQUIRE(exchange.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    REQUIRE(exchange.ended.ok());
    CHECK(exchange.payloads_written == 1);
    CHECK_FALSE(PeerOf(exchange).empty());
    rpc::PushResponse response;
    REQUIRE(grpc::SerializationTraits<rpc::PushResponse>::Deserialize(&exchange.response_bytes,
                                                                       &response)
                .ok());
    CHECK(response.duplicate_keys() == 3);
    const rpc::PushRequest got = service.last();
    CHECK(got.table() == "user");
    CHECK(got.header().sequence() == 5);
    REQUIRE(got.keys().size() == 3 * sizeof(uint64_t));
    uint64_t k[3];
    std::memcpy(k, got.keys().data(), sizeof(k));
    CHECK((k[0] == 1 && k[1] == 2 && k[2] == 3));
    REQUIRE(got.grads().size() == 3 * sizeof(float));
    float g[3];
    std::memcpy(g, got.grads().data(), sizeof(g));
    CHECK((g[0] == 0.5f && g[1] == 1.5f && g[2] == 2.5f));
  }
  SECTION("in a slot") {
    TestExchange exchange;
    exchange.slot = 2;
    exchange.fields.mutable_shared()->set_slot(2);
    transport.Start(&exchange);
    REQUIRE(exchange.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    REQUIRE(exchange.ended.ok());
    CHECK(exchange.payloads_written == 0);
    const rpc::PushRequest got = service.last();
    CHECK(got.keys().empty());
    CHECK(got.grads().empty());
    CHECK(got.shared().slot() == 2);
  }
  server->Shutdown();
}

TEST_CASE("a request to a server nobody serves ends UNAVAILABLE or at its deadline",
          "[client][transport]") {
  // A port bound and closed again: nothing listens there.
  int port = 0;
  {
    FakeServer service;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    server->Shutdown();
  }
  REQUIRE(port > 0);
  ChannelTransport transport("127.0.0.1:" + std::to_string(port), 1, nullptr);
  TestExchange exchange;
  exchange.deadline = absl::Now() + absl::Seconds(2);
  transport.Start(&exchange);
  REQUIRE(exchange.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  CHECK((exchange.ended.error_code() == grpc::StatusCode::UNAVAILABLE ||
         exchange.ended.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED));
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

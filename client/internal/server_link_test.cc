#include "client/internal/server_link.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/internal/lent_region_for_test.h"
#include "client/internal/shared_transport.h"
#include "common/grpc_status.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace client_internal {
namespace {

// A server that lends `lent` (or refuses with `refusal`), counts what it is asked, and refuses
// every push's shared region, as a server that restarted does.
class FakeServer final : public rpc::ParameterServer::Service {
 public:
  grpc::Status OpenSharedRegion(grpc::ServerContext*, const rpc::OpenSharedRegionRequest* request,
                                rpc::OpenSharedRegionResponse* response) override {
    absl::MutexLock lock(&mu);
    ++opens;
    asked = *request;
    if (!refusal.ok()) return refusal;
    *response = lent;
    return grpc::Status::OK;
  }
  grpc::Status CloseSharedRegion(grpc::ServerContext*, const rpc::CloseSharedRegionRequest* request,
                                 rpc::CloseSharedRegionResponse*) override {
    absl::MutexLock lock(&mu);
    closed.push_back(request->region());
    return grpc::Status::OK;
  }
  grpc::Status Push(grpc::ServerContext*, const rpc::PushRequest*, rpc::PushResponse*) override {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no shared region 7 here");
  }

  absl::Mutex mu;
  int opens ABSL_GUARDED_BY(mu) = 0;
  rpc::OpenSharedRegionRequest asked ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> closed ABSL_GUARDED_BY(mu);
  grpc::Status refusal;
  rpc::OpenSharedRegionResponse lent;
};

struct Served {
  Served() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(port > 0);
  }
  ~Served() { server->Shutdown(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  FakeServer service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

int Opens(FakeServer& service) {
  absl::MutexLock lock(&service.mu);
  return service.opens;
}

class TestExchange final : public Exchange {
 public:
  TestExchange() {
    push = true;
    num_keys = 1;
    key_bytes = 8;
    grad_bytes = 4;
    deadline = absl::Now() + absl::Seconds(30);
  }
  void WritePayload(char* keys, char* grads) const override {
    std::memset(keys, 0, key_bytes);
    std::memset(grads, 0, grad_bytes);
  }
  void OnDone(const grpc::Status& status) override {
    ended = status;
    done.Notify();
  }
  grpc::Status ended;
  absl::Notification done;
};

TEST_CASE("without shared memory, or from a server that lends none, the channel",
          "[client][server_link]") {
  Served served;
  ServerLinkOptions options;
  options.address = served.address();
  SECTION("shared memory off: the server is never asked") {
    options.shared_memory = false;
    ServerLink link(options);
    CHECK(link.Transport().get() == link.channel());
    CHECK(Opens(served.service) == 0);
  }
  SECTION("a server that lends none is asked once") {
    served.service.refusal = grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "lends no memory");
    ServerLink link(options);
    CHECK(link.address() == served.address());
    for (int i = 0; i < 3; ++i) CHECK(link.Transport().get() == link.channel());
    CHECK(Opens(served.service) == 1);
  }
  SECTION("a server that cannot be reached now is asked again, a few times at most") {
    served.service.refusal = grpc::Status(grpc::StatusCode::UNAVAILABLE, "starting");
    ServerLink link(options);
    for (int i = 0; i < ServerLink::kMaxRegionOpens + 3; ++i) {
      CHECK(link.Transport().get() == link.channel());
    }
    CHECK(Opens(served.service) == ServerLink::kMaxRegionOpens);
  }
}

TEST_CASE("a lent region carries the requests until the server refuses it, then another is "
          "asked for; it is given back at the end",
          "[client][server_link]") {
  Served served;
  Lent lent(2, 4096);
  const bool calls = GENERATE(false, true);
  lent.response.set_calls(calls);
  served.service.lent = lent.response;
  ServerLinkOptions options;
  options.address = served.address();
  options.shared_memory_calls = false;  // RPCs with their payload in the slot: the server refuses
  options.slots = 2;
  options.slot_bytes = 4096;
  ServerLink link(options);
  std::shared_ptr<ServerTransport> transport = link.Transport();
  CHECK(transport.get() != link.channel());
  CHECK(dynamic_cast<SlotTransport*>(transport.get()) != nullptr);
  CHECK(link.Transport() == transport);
  {
    absl::MutexLock lock(&served.service.mu);
    CHECK(served.service.opens == 1);
    CHECK(served.service.asked.slots() == 2);
    CHECK(served.service.asked.slot_bytes() == 4096);
  }

  TestExchange exchange;
  transport->Start(&exchange);
  REQUIRE(exchange.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  REQUIRE(exchange.slot >= 0);
  const std::shared_ptr<SharedRegion> region = exchange.region;
  const absl::Status settled =
      link.Settle(&exchange, exchange.ended, FromGrpcStatus(exchange.ended));
  CHECK(settled.code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(settled.message(), "; resent"));
  CHECK(exchange.slot == -1);
  CHECK(region->retired() == 1);  // not answered: the server may still touch it
  transport.reset();

  // Forgotten: the next request asks again.
  CHECK(link.Transport().get() != link.channel());
  CHECK(Opens(served.service) == 2);
  link.CloseRegion();
  CHECK(link.Transport().get() != link.channel());  // asked again after closing
  CHECK(Opens(served.service) == 3);
  link.CloseRegion();
  absl::MutexLock lock(&served.service.mu);
  CHECK(served.service.closed == std::vector<uint64_t>{7, 7});
}

TEST_CASE("settling an exchange without a slot changes nothing", "[client][server_link]") {
  ServerLinkOptions options;
  options.address = "127.0.0.1:1";
  options.shared_memory = false;
  ServerLink link(options);
  TestExchange exchange;
  const absl::Status status = absl::FailedPreconditionError("no shared region 7 here");
  CHECK(link.Settle(&exchange, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "x"), status) ==
        status);
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

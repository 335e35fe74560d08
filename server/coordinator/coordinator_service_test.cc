#include "server/coordinator/coordinator_service.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_status.h"
#include "common/job_config.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/testing/eventually.h"

namespace ps {
namespace coordinator {
namespace {

using ::ps::testing::Eventually;

// The service on a real clock and a free loopback port, with a raw stub.
struct Fixture {
  Fixture() {
    absl::StatusOr<config::Job> job = ParseJob(R"pb(name: "svc"
                                                    tables { name: "emb" dim: 4 }
                                                    cluster { num_servers: 2 num_workers: 1 })pb",
                                               "job.pbtxt");
    REQUIRE(job.ok());
    CoordinatorOptions options;
    options.job = *job;
    auto c = Coordinator::Create(std::move(options));
    REQUIRE(c.ok());
    coordinator = std::move(*c);
    service = std::make_unique<CoordinatorService>(coordinator.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    stub = rpc::Coordinator::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  ~Fixture() { Stop(); }

  void Stop() {
    if (server == nullptr) return;
    coordinator->Shutdown();
    server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    server.reset();
  }

  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<CoordinatorService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<rpc::Coordinator::Stub> stub;
};

// A KvWait started with the callback client API.
struct PendingKvWait {
  PendingKvWait(rpc::Coordinator::Stub* stub, const std::string& key) {
    request.add_keys(key);
    stub->async()->KvWait(&context, &request, &response, [this](grpc::Status s) {
      status = FromGrpcStatus(s);
      done.Notify();
    });
  }
  grpc::ClientContext context;
  rpc::KvGetRequest request;
  rpc::KvGetResponse response;
  absl::Status status;
  absl::Notification done;
};

TEST_CASE("a call cancelled by its client cancels its waiter", "[coordinator][service]") {
  Fixture f;
  PendingKvWait wait(f.stub.get(), "never");
  REQUIRE(Eventually([&] { return f.coordinator->NumPendingWaits() == 1; }));
  wait.context.TryCancel();
  REQUIRE(wait.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  CHECK(wait.status.code() == absl::StatusCode::kCancelled);
  CHECK(Eventually([&] { return f.coordinator->NumPendingWaits() == 0; }));
}

TEST_CASE("waits answer before the call's deadline, saying what is missing",
          "[coordinator][service]") {
  Fixture f;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(300)));
  const std::string which = GENERATE("map", "clock", "kv");
  CAPTURE(which);
  absl::Status status;
  if (which == "map") {
    rpc::GetShardMapRequest request;
    rpc::ShardMap map;
    status = FromGrpcStatus(f.stub->GetShardMap(&context, request, &map));
    CHECK(status == absl::UnavailableError("shard map not ready: 0 of 2 servers registered"));
  } else if (which == "clock") {
    rpc::WaitClockRequest request;
    request.set_clock(1);
    rpc::ClockState state;
    status = FromGrpcStatus(f.stub->WaitClock(&context, request, &state));
    CHECK(status.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(absl::StartsWith(status.message(), "wait clock:"));
  } else {
    rpc::KvGetRequest request;
    request.add_keys("k");
    rpc::KvGetResponse response;
    status = FromGrpcStatus(f.stub->KvWait(&context, request, &response));
    CHECK(status == absl::DeadlineExceededError("kv wait: keys not set by the deadline: \"k\""));
  }
}

TEST_CASE("KvWait honours timeout_ms without a call deadline", "[coordinator][service]") {
  Fixture f;
  grpc::ClientContext context;
  rpc::KvGetRequest request;
  request.add_keys("k");
  request.set_timeout_ms(50);
  rpc::KvGetResponse response;
  const absl::Status status = FromGrpcStatus(f.stub->KvWait(&context, request, &response));
  CHECK(status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(status.message(), "\"k\""));
}

TEST_CASE("a wait is answered by another call's change", "[coordinator][service]") {
  Fixture f;
  PendingKvWait wait(f.stub.get(), "k");
  REQUIRE(Eventually([&] { return f.coordinator->NumPendingWaits() == 1; }));
  grpc::ClientContext context;
  rpc::KvSetRequest set;
  set.set_key("k");
  set.set_value(std::string("\0v", 2));
  rpc::KvSetResponse ignored;
  REQUIRE(f.stub->KvSet(&context, set, &ignored).ok());
  REQUIRE(wait.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  REQUIRE(wait.status.ok());
  REQUIRE(wait.response.values_size() == 1);
  CHECK(wait.response.values(0) == std::string("\0v", 2));
}

TEST_CASE("a checkpoint without a checkpoint_dir is refused over the wire",
          "[coordinator][service]") {
  Fixture f;
  grpc::ClientContext context;
  rpc::CheckpointRequest request;
  request.set_step(-1);
  rpc::CheckpointResponse response;
  const grpc::Status status = f.stub->StartCheckpoint(&context, request, &response);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(status.error_message() == "the job has no cluster.checkpoint_dir");
}

TEST_CASE("the server shuts down at once with waits pending", "[coordinator][service]") {
  Fixture f;
  std::vector<std::unique_ptr<PendingKvWait>> waits;
  for (int i = 0; i < 3; ++i) waits.push_back(std::make_unique<PendingKvWait>(f.stub.get(), "k"));
  REQUIRE(Eventually([&] { return f.coordinator->NumPendingWaits() == 3; }));
  const absl::Time start = absl::Now();
  f.Stop();  // a 30 s grace: ending the waits is what makes it quick
  CHECK(absl::Now() - start < absl::Seconds(5));
  for (auto& w : waits) {
    REQUIRE(w->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    CHECK(w->status.code() == absl::StatusCode::kUnavailable);
  }
}

TEST_CASE("a worker's own failure report fails the job; heartbeat answers carry it",
          "[coordinator][service]") {
  Fixture f;
  const uint32_t worker = f.coordinator->Register(rpc::WORKER, "", 0)->member_id();
  const uint32_t server = f.coordinator->Register(rpc::SERVER, "h:1", -1)->member_id();
  rpc::HeartbeatResponse beat;
  {
    grpc::ClientContext context;
    rpc::HeartbeatRequest request;
    request.set_member_id(server);
    REQUIRE(f.stub->Heartbeat(&context, request, &beat).ok());
    CHECK_FALSE(beat.has_job_failure());
  }
  {
    grpc::ClientContext context;
    rpc::ReportFailureRequest request;
    request.set_reporter(server);
    request.set_reporter_failed(true);
    rpc::ReportFailureResponse response;
    CHECK(f.stub->ReportFailure(&context, request, &response).error_code() ==
          grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    grpc::ClientContext context;
    rpc::LeaveRequest request;
    request.set_member_id(99);
    rpc::LeaveResponse response;
    CHECK(f.stub->Leave(&context, request, &response).error_code() == grpc::StatusCode::NOT_FOUND);
  }
  grpc::ClientContext context;
  rpc::ReportFailureRequest request;
  request.set_reporter(worker);
  request.set_reporter_failed(true);
  request.set_reason("cannot read data/x.tsv");
  rpc::ReportFailureResponse response;
  REQUIRE(f.stub->ReportFailure(&context, request, &response).ok());
  REQUIRE(f.coordinator->failure().has_value());
  grpc::ClientContext beat_context;
  rpc::HeartbeatRequest beat_request;
  beat_request.set_member_id(server);
  REQUIRE(f.stub->Heartbeat(&beat_context, beat_request, &beat).ok());
  REQUIRE(beat.has_job_failure());
  CHECK(beat.job_failure().rank() == 0);
  CHECK(beat.job_failure().member_id() == worker);
  CHECK(beat.job_failure().reason() == "cannot read data/x.tsv");
}

TEST_CASE("GetServerStatuses asks the map's servers, and refuses an unknown hot-keys table",
          "[coordinator][service]") {
  Fixture f;
  // Two servers registered at addresses where nobody serves: each is listed with its error.
  for (const char* address : {"127.0.0.1:1", "127.0.0.1:2"}) {
    grpc::ClientContext context;
    rpc::RegisterRequest request;
    request.set_role(rpc::SERVER);
    request.set_address(address);
    rpc::RegisterResponse response;
    REQUIRE(f.stub->Register(&context, request, &response).ok());
  }
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    rpc::ServerStatusesRequest request;
    rpc::ServerStatuses response;
    REQUIRE(f.stub->GetServerStatuses(&context, request, &response).ok());
    CHECK(response.map_version() > 0);
    REQUIRE(response.servers_size() == 2);
    for (const rpc::ServerStatusReply& s : response.servers()) {
      CHECK(s.alive());
      CHECK_FALSE(s.has_status());
      CHECK_FALSE(s.error().empty());
    }
    CHECK(response.servers(1).address() == "127.0.0.1:2");
  }
  grpc::ClientContext context;
  rpc::ServerStatusesRequest request;
  request.mutable_request()->set_hot_keys_table("nope");
  rpc::ServerStatuses response;
  CHECK(f.stub->GetServerStatuses(&context, request, &response).error_code() ==
        grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

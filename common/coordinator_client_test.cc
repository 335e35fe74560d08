#include "common/coordinator_client.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/job_config.h"
#include "server/coordinator/coordinator.h"
#include "tests/testing/eventually.h"
#include "tests/testing/in_process_coordinator.h"

namespace ps {
namespace {

using coordinator::Coordinator;
using testing::InProcessCoordinator;

using testing::Eventually;

// A closed port: nothing listens there.
std::string DeadAddress() {
  InProcessCoordinator stopped(1, 1);
  return stopped.address;
}

// A standby coordinator: answers every call of any method UNAVAILABLE "coordinator HOST:PORT is
// a standby; the leader is LEADER" (without the leader when `leader` is empty), and counts them.
class FakeStandby {
 public:
  explicit FakeStandby(const std::string& leader) : service_(this) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterCallbackGenericService(&service_);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    address = absl::StrCat("127.0.0.1:", port);
    message_ = absl::StrCat("coordinator ", address, " is a standby");
    if (!leader.empty()) absl::StrAppend(&message_, "; the leader is ", leader);
  }
  ~FakeStandby() { server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5))); }

  int calls() const { return calls_.load(); }

  std::string address;

 private:
  class Reactor : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(const std::string& message) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
    }
    void OnDone() override { delete this; }
  };
  class Service : public grpc::CallbackGenericService {
   public:
    explicit Service(FakeStandby* standby) : standby_(standby) {}
    grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
      ++standby_->calls_;
      return new Reactor(standby_->message_);
    }

   private:
    FakeStandby* const standby_;
  };

  std::atomic<int> calls_{0};
  std::string message_;
  Service service_;
  std::unique_ptr<grpc::Server> server_;
};

// A coordinator that records the heartbeats and clock reports it is sent and answers them OK.
class RecordingCoordinator final : public rpc::Coordinator::Service {
 public:
  RecordingCoordinator() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    address = absl::StrCat("127.0.0.1:", port);
  }
  ~RecordingCoordinator() override {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const rpc::HeartbeatRequest* request,
                         rpc::HeartbeatResponse*) override {
    absl::MutexLock lock(&mu_);
    heartbeats_.push_back(*request);
    return grpc::Status::OK;
  }
  grpc::Status ReportClock(grpc::ServerContext*, const rpc::ReportClockRequest* request,
                           rpc::ClockState*) override {
    absl::MutexLock lock(&mu_);
    reports_.push_back(*request);
    return grpc::Status::OK;
  }

  std::vector<rpc::HeartbeatRequest> heartbeats() const {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  size_t reports() const {
    absl::MutexLock lock(&mu_);
    return reports_.size();
  }

  std::string address;

 private:
  mutable absl::Mutex mu_;
  std::vector<rpc::HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<rpc::ReportClockRequest> reports_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Server> server_;
};

// Whether `member` is alive in `c`'s view.
bool AliveIn(InProcessCoordinator& c, uint32_t member) {
  const rpc::ClusterStatus status = c.coordinator->Status();
  for (const auto& m : status.members()) {
    if (m.member_id() == member) return m.alive();
  }
  return false;
}

TEST_CASE("connecting to a closed port is UNAVAILABLE naming the address", "[coordinator_client]") {
  std::string address;
  {
    InProcessCoordinator stopped(1, 1);
    address = stopped.address;
  }  // nothing listens there now
  const absl::Time start = absl::Now();
  const auto client = CoordinatorClient::Connect(address, absl::Milliseconds(300));
  CHECK(client.status().code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(client.status().message(), address));
  CHECK(absl::Now() - start < absl::Seconds(5));
}

TEST_CASE("servers register and everyone gets the shard map once they have",
          "[coordinator_client][map]") {
  InProcessCoordinator c(2, 1);
  auto client = c.Connect();
  CHECK(client->address() == c.address);
  const auto first = client->Register(rpc::SERVER, "127.0.0.1:7001", -1);
  REQUIRE(first.ok());
  CHECK(first->member_id() == 1);
  CHECK(first->rank() == 0);
  CHECK(first->job().name() == "client-test");

  // The coordinator's own answer, not gRPC's deadline: it answers kReplyMargin (or a tenth of
  // the wait) before the deadline, so the wait is long enough for that margin to cover a busy
  // machine (with 300 ms, 30 ms were not always enough).
  const auto early = client->GetShardMap(1, absl::Seconds(2));
  CHECK(early.status() == absl::UnavailableError("shard map not ready: 1 of 2 servers registered"));

  std::optional<absl::StatusOr<rpc::ShardMap>> waited;
  std::thread waiter([&] { waited = client->GetShardMap(1, absl::Seconds(30)); });
  auto other = c.Connect();
  const auto second = other->Register(rpc::SERVER, "127.0.0.1:7002", -1);
  REQUIRE(second.ok());
  CHECK(second->rank() == 1);
  waiter.join();
  REQUIRE(waited->ok());
  CHECK((*waited)->version() == 1);
  CHECK((*waited)->shards_size() == 8);
  CHECK((*waited)->servers(1).address() == "127.0.0.1:7002");

  const auto third = other->Register(rpc::SERVER, "127.0.0.1:7003", -1);
  CHECK(third.status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("the coordinator's error codes come through", "[coordinator_client]") {
  InProcessCoordinator c(1, 1);
  auto client = c.Connect();
  CHECK(client->Register(rpc::ROLE_UNSPECIFIED, "", -1).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(client->Register(rpc::WORKER, "", 5).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(client->Heartbeat(42).status().code() == absl::StatusCode::kNotFound);
  const uint32_t server = client->Register(rpc::SERVER, "h:1", -1)->member_id();
  CHECK(client->ReportClock(server, 1).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(client->KvSet("", "v").code() == absl::StatusCode::kInvalidArgument);
  CHECK(client->KvGet({"nope"}).status() == absl::NotFoundError("key \"nope\" is not set"));
}

TEST_CASE("the member ids handed out are asked without blocking", "[coordinator_client]") {
  InProcessCoordinator c(1, 1);
  auto client = c.Connect();
  REQUIRE(client->Register(rpc::SERVER, "h:1", -1).ok());
  REQUIRE(client->Register(rpc::WORKER, "", -1).ok());
  absl::Notification answered;
  absl::StatusOr<rpc::MemberIds> ids;
  client->GetMemberIdsAsync(absl::Seconds(30), [&](absl::StatusOr<rpc::MemberIds> got) {
    ids = std::move(got);
    answered.Notify();
  });
  REQUIRE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  REQUIRE(ids.ok());
  CHECK(ids->first_member_id() == 1);
  CHECK(ids->next_member_id() == 3);

  // A coordinator that is gone: the call's error, and the destructor waits for the callback.
  c.Stop();
  absl::Notification failed;
  absl::Status error;
  client->GetMemberIdsAsync(absl::Seconds(2), [&](absl::StatusOr<rpc::MemberIds> got) {
    error = got.status();
    failed.Notify();
  });
  client.reset();
  REQUIRE(failed.HasBeenNotified());
  CHECK((error.code() == absl::StatusCode::kUnavailable ||
         error.code() == absl::StatusCode::kDeadlineExceeded));
}

TEST_CASE("the rendezvous store works across clients and threads", "[coordinator_client][kv]") {
  InProcessCoordinator c(1, 2);
  auto a = c.Connect();
  auto b = c.Connect();
  std::optional<absl::StatusOr<std::vector<std::string>>> waited;
  std::thread waiter([&] { waited = a->KvWait({"nccl/0", "nccl/1"}, absl::Seconds(30)); });
  // Catch2 asserts on the test's thread only (it is not thread-safe).
  absl::Status set_by_thread;
  std::thread setter([&] { set_by_thread = b->KvSet("nccl/1", "id-1"); });
  REQUIRE(a->KvSet("nccl/0", "id-0").ok());
  setter.join();
  waiter.join();
  REQUIRE(set_by_thread.ok());
  REQUIRE(waited->ok());
  CHECK(**waited == std::vector<std::string>{"id-0", "id-1"});
  CHECK(*b->KvGet({"nccl/1", "nccl/0"}) == std::vector<std::string>{"id-1", "id-0"});

  SECTION("a wait that times out names the missing keys") {
    const auto missing = a->KvWait({"nccl/0", "gloo/3"}, absl::Milliseconds(100));
    CHECK(missing.status() ==
          absl::DeadlineExceededError("kv wait: keys not set by the deadline: \"gloo/3\""));
  }
  SECTION("16 MiB values travel; bigger ones are refused") {
    const std::string big(16 << 20, 'x');
    REQUIRE(a->KvSet("big", big).ok());
    CHECK(b->KvGet({"big"})->at(0) == big);
    CHECK(a->KvSet("bigger", big + "x").code() == absl::StatusCode::kResourceExhausted);
  }
}

TEST_CASE("clocks are reported and waited for", "[coordinator_client][clock]") {
  InProcessCoordinator c(1, 2);
  auto client = c.Connect();
  const uint32_t w0 = client->Register(rpc::WORKER, "", 0)->member_id();
  const uint32_t w1 = client->Register(rpc::WORKER, "", 1)->member_id();
  REQUIRE(client->ReportClock(w0, 3).ok());
  const auto timed_out = client->WaitClock(3, absl::Milliseconds(200));
  CHECK(timed_out.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(timed_out.status().message(), "min_clock -1"));

  std::optional<absl::StatusOr<rpc::ClockState>> waited;
  std::thread waiter([&] { waited = client->WaitClock(3, absl::Seconds(30)); });
  const auto state = client->ReportClock(w1, 4);
  REQUIRE(state.ok());
  CHECK(state->min_clock() == 3);
  CHECK(state->max_clock() == 4);
  waiter.join();
  REQUIRE(waited->ok());
  CHECK((*waited)->min_clock() == 3);
}

TEST_CASE("the heartbeat thread keeps a member alive and sees the map version",
          "[coordinator_client][heartbeat]") {
  InProcessCoordinator c(2, 1, /*fake_clock=*/true);
  auto client = c.Connect();
  const uint32_t w = client->Register(rpc::WORKER, "", -1)->member_id();
  CHECK(client->StartHeartbeats(w, absl::ZeroDuration()).code() ==
        absl::StatusCode::kInvalidArgument);
  REQUIRE(client->StartHeartbeats(w, absl::Milliseconds(20)).ok());
  CHECK(client->StartHeartbeats(w, absl::Milliseconds(20)).code() ==
        absl::StatusCode::kFailedPrecondition);

  REQUIRE(client->Register(rpc::SERVER, "h:1", -1).ok());
  REQUIRE(client->Register(rpc::SERVER, "h:2", -1).ok());
  CHECK(Eventually([&] { return client->last_map_version() == 1; }));
  CHECK(client->last_heartbeat_status().ok());

  // Four silent seconds on the coordinator's clock kill every member; the thread revives ours.
  c.clock.Advance(absl::Seconds(4));
  c.coordinator->Sweep();
  const auto alive = [&] {
    const rpc::ClusterStatus status = c.coordinator->Status();
    for (const auto& m : status.members()) {
      if (m.member_id() == w) return m.alive();
    }
    return false;
  };
  CHECK(Eventually(alive));

  client->StopHeartbeats();
  client->StopHeartbeats();  // idempotent
  c.clock.Advance(absl::Seconds(4));
  c.coordinator->Sweep();
  CHECK_FALSE(alive());
  // It can start again; the destructor stops it.
  REQUIRE(client->StartHeartbeats(w, absl::Milliseconds(20)).ok());
  CHECK(Eventually(alive));
}

TEST_CASE("heartbeats for an unknown member record NOT_FOUND", "[coordinator_client][heartbeat]") {
  InProcessCoordinator c(1, 1);
  auto client = c.Connect();
  REQUIRE(client->StartHeartbeats(77, absl::Milliseconds(10)).ok());
  CHECK(Eventually(
      [&] { return client->last_heartbeat_status().code() == absl::StatusCode::kNotFound; }));
}

// Whether the loss is reported is checked against heartbeats, not the wall clock (a sanitizer
// build is slow enough to make any bound on elapsed time flaky): heartbeats that fail for less than
// the window report nothing, however many of them fail; once the window has passed the loss is
// reported, once, with the heartbeats' error.
TEST_CASE("heartbeats that fail for the window report the coordinator lost, once",
          "[coordinator_client][heartbeat]") {
  const bool window_passes = GENERATE(false, true);
  std::optional<InProcessCoordinator> c;
  c.emplace(1, 1);
  auto client = c->Connect();
  const auto member = client->Register(rpc::CLIENT, "", -1);
  REQUIRE(member.ok());
  std::atomic<int> heartbeats{0};
  client->SetShardProgressSource([&heartbeats] {
    ++heartbeats;
    return std::vector<rpc::ShardProgress>();
  });
  absl::Mutex mu;
  std::vector<absl::Status> lost;
  // An hour never passes within the test; 150 ms does, while heartbeats go on failing.
  client->SetOnCoordinatorLost(window_passes ? absl::Milliseconds(150) : absl::Hours(1),
                               [&](const absl::Status& error) {
                                 absl::MutexLock lock(&mu);
                                 lost.push_back(error);
                               });
  REQUIRE(client->StartHeartbeats(member->member_id(), absl::Milliseconds(10)).ok());
  // Alive for many windows' worth of heartbeats: not lost.
  REQUIRE(Eventually([&] { return heartbeats.load() >= 40; }));
  {
    absl::MutexLock lock(&mu);
    CHECK(lost.empty());
  }
  c.reset();
  // Every heartbeat that starts from here on fails.
  const int at_stop = heartbeats.load();
  if (!window_passes) {
    REQUIRE(Eventually([&] { return heartbeats.load() >= at_stop + 10; }));
    CHECK(client->last_heartbeat_status().code() == absl::StatusCode::kUnavailable);
    client->StopHeartbeats();
    absl::MutexLock lock(&mu);
    CHECK(lost.empty());
    return;
  }
  REQUIRE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return !lost.empty();
  }));
  // Heartbeats go on failing; the report is not repeated.
  const int at_report = heartbeats.load();
  REQUIRE(Eventually([&] { return heartbeats.load() >= at_report + 5; }));
  client->StopHeartbeats();
  absl::MutexLock lock(&mu);
  REQUIRE(lost.size() == 1);
  CHECK(lost[0].code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("status lists the members", "[coordinator_client]") {
  InProcessCoordinator c(1, 1);
  auto client = c.Connect();
  REQUIRE(client->Register(rpc::SERVER, "h:1", -1).ok());
  REQUIRE(client->Register(rpc::CLIENT, "", -1).ok());
  const auto status = client->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->job_name() == "client-test");
  REQUIRE(status->members_size() == 2);
  CHECK(status->members(0).address() == "h:1");
  CHECK(status->members(1).role() == rpc::CLIENT);
  CHECK(status->shard_map().version() == 1);
}

TEST_CASE("shutting the coordinator down ends a pending wait with UNAVAILABLE",
          "[coordinator_client][shutdown]") {
  InProcessCoordinator c(1, 1);
  auto client = c.Connect();
  std::optional<absl::StatusOr<std::vector<std::string>>> waited;
  std::thread waiter([&] { waited = client->KvWait({"never"}, absl::Seconds(60)); });
  REQUIRE(Eventually([&] { return c.coordinator->NumPendingWaits() == 1; }));
  const absl::Time start = absl::Now();
  c.Stop();
  waiter.join();
  CHECK(absl::Now() - start < absl::Seconds(5));
  CHECK(waited->status().code() == absl::StatusCode::kUnavailable);
  // The server is gone: calls fail UNAVAILABLE.
  CHECK(client->GetStatus().status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("a worker's failure report fails the job; heartbeats then say so, once",
          "[coordinator_client][ends]") {
  InProcessCoordinator c(1, 2);
  auto server = c.Connect();
  auto w0 = c.Connect();
  auto w1 = c.Connect();
  const uint32_t s = server->Register(rpc::SERVER, "h:1", -1)->member_id();
  const uint32_t r0 = w0->Register(rpc::WORKER, "", 0)->member_id();
  const uint32_t r1 = w1->Register(rpc::WORKER, "", 1)->member_id();
  CHECK(server->ReportWorkerFailure(s, "x").code() == absl::StatusCode::kFailedPrecondition);
  CHECK(server->Leave(99, absl::Seconds(5)).code() == absl::StatusCode::kNotFound);
  absl::Mutex mu;
  std::vector<rpc::JobFailure> told;
  server->SetOnJobFailed([&](const rpc::JobFailure& failure) {
    absl::MutexLock lock(&mu);
    told.push_back(failure);
  });
  std::atomic<int> heartbeats{0};
  server->SetShardProgressSource([&heartbeats] {
    ++heartbeats;
    return std::vector<rpc::ShardProgress>();
  });
  REQUIRE(server->StartHeartbeats(s, absl::Milliseconds(10)).ok());
  // Worker 1 is done; worker 0 fails.
  REQUIRE(w1->Leave(r1, absl::Seconds(5)).ok());
  REQUIRE(w0->ReportWorkerFailure(r0, "NOT_FOUND: data/x.tsv: no such file").ok());
  REQUIRE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return !told.empty();
  }));
  // Heartbeats go on (a daemon exits on the call); the call is not repeated.
  const int at_call = heartbeats.load();
  REQUIRE(Eventually([&] { return heartbeats.load() >= at_call + 5; }));
  server->StopHeartbeats();
  absl::MutexLock lock(&mu);
  REQUIRE(told.size() == 1);
  CHECK(told[0].rank() == 0);
  CHECK(told[0].member_id() == r0);
  CHECK(DescribeJobFailure(told[0]) ==
        absl::StrCat("worker 0 (member ", r0, "): NOT_FOUND: data/x.tsv: no such file"));
  CHECK(c.coordinator->AwaitFailureTold(absl::ZeroDuration()));
}

TEST_CASE("a list of coordinator addresses is checked entry by entry",
          "[coordinator_client][leader]") {
  CHECK(*ParseCoordinatorAddresses("a:1") == std::vector<std::string>{"a:1"});
  CHECK(*ParseCoordinatorAddresses("a:1,10.0.0.2:7000,[::1]:3") ==
        std::vector<std::string>{"a:1", "10.0.0.2:7000", "[::1]:3"});
  for (const auto& [list, named] : std::vector<std::pair<std::string, std::string>>{
           {"", "empty entry 1"},
           {"a:1,,b:2", "empty entry 2"},
           {"a:1,", "empty entry 2"},
           {"a:1,b", "\"b\""},
           {"a:1, b:2", "\" b:2\""},
           {"a:1,b:0", "\"b:0\""},
           {"a:1,b:2,a:1", "\"a:1\" is listed twice"}}) {
    INFO(list);
    const auto parsed = ParseCoordinatorAddresses(list);
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(parsed.status().message(), named));
    CHECK(CoordinatorClient::Connect(list, absl::Seconds(1)).status() == parsed.status());
  }
  CHECK(LeaderNamedIn("coordinator h:1 is a standby; the leader is h:2") == "h:2");
  CHECK(LeaderNamedIn("coordinator h:1 is a standby").empty());
  CHECK(LeaderNamedIn("coordinator h:1 is no longer the leader").empty());
}

TEST_CASE("connecting to several coordinators takes the first one up",
          "[coordinator_client][leader]") {
  const std::string dead = DeadAddress();
  const std::string also_dead = DeadAddress();
  const auto none =
      CoordinatorClient::Connect(absl::StrCat(dead, ",", also_dead), absl::Milliseconds(300));
  CHECK(none.status().code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(none.status().message(), absl::StrCat(dead, ",", also_dead)));

  InProcessCoordinator c(1, 1);
  const auto client =
      CoordinatorClient::Connect(absl::StrCat(dead, ",", c.address), absl::Seconds(10));
  REQUIRE(client.ok());
  CHECK((*client)->address() == c.address);
  CHECK((*client)->addresses() == std::vector<std::string>{dead, c.address});
  CHECK((*client)->Register(rpc::SERVER, "h:1", -1).ok());
}

// Every order of a list of four: nothing listening, a standby that names the leader, one that
// does not, and the leader. Whichever is current first, every call reaches the leader, and once
// one has, the next ones go there first (the standbys see no more calls).
TEST_CASE("calls follow the leader whatever the order of the list",
          "[coordinator_client][leader]") {
  const int order = GENERATE(range(0, 24));
  InProcessCoordinator c(1, 2);
  FakeStandby standby(c.address);
  FakeStandby blind("");
  std::vector<std::string> list = {DeadAddress(), standby.address, blind.address, c.address};
  std::sort(list.begin(), list.end());
  for (int i = 0; i < order; ++i) std::next_permutation(list.begin(), list.end());
  INFO(absl::StrJoin(list, ","));
  auto client = CoordinatorClient::Connect(absl::StrJoin(list, ","), absl::Seconds(10));
  REQUIRE(client.ok());
  const auto registered = (*client)->Register(rpc::WORKER, "", -1);
  REQUIRE(registered.ok());
  const uint32_t w = registered->member_id();
  CHECK((*client)->address() == c.address);
  const int standby_calls = standby.calls() + blind.calls();

  CHECK((*client)->Heartbeat(w).ok());
  CHECK((*client)->KvSet("k", "v").ok());
  CHECK(*(*client)->KvGet({"k"}) == std::vector<std::string>{"v"});
  CHECK((*client)->GetStatus()->members_size() == 1);
  CHECK((*client)->ReportClock(w, 2).ok());
  (*client)->ReportClockAsync(w, 3);
  CHECK(Eventually([&] { return c.coordinator->Clocks().max_clock() == 3; }));
  absl::Notification answered;
  absl::StatusOr<rpc::MemberIds> ids;
  (*client)->GetMemberIdsAsync(absl::Seconds(10), [&](absl::StatusOr<rpc::MemberIds> got) {
    ids = std::move(got);
    answered.Notify();
  });
  REQUIRE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(ids.ok());
  CHECK((*client)->Leave(w, absl::Seconds(5)).ok());
  CHECK(standby.calls() + blind.calls() == standby_calls);

  // A fresh client whose first call is made without waiting follows too.
  auto other = CoordinatorClient::Connect(absl::StrJoin(list, ","), absl::Seconds(10));
  REQUIRE(other.ok());
  absl::Notification other_answered;
  (*other)->GetMemberIdsAsync(absl::Seconds(10), [&](absl::StatusOr<rpc::MemberIds> got) {
    ids = std::move(got);
    other_answered.Notify();
  });
  REQUIRE(other_answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(ids.ok());
  CHECK((*other)->address() == c.address);
}

TEST_CASE("the leader's own UNAVAILABLE (the map not ready) is not followed",
          "[coordinator_client][leader]") {
  InProcessCoordinator c(2, 1);
  FakeStandby standby(c.address);
  auto client =
      CoordinatorClient::Connect(absl::StrCat(c.address, ",", standby.address), absl::Seconds(10));
  REQUIRE(client.ok());
  const auto early = (*client)->GetShardMap(1, absl::Milliseconds(300));
  CHECK(early.status() == absl::UnavailableError("shard map not ready: 0 of 2 servers registered"));
  CHECK((*client)->address() == c.address);
  CHECK(standby.calls() == 0);
}

TEST_CASE("calls made while no coordinator leads fail UNAVAILABLE, or wait within the window",
          "[coordinator_client][leader]") {
  std::optional<InProcessCoordinator> c;
  c.emplace(1, 1);
  const std::string leader = c->address;
  FakeStandby standby(leader);
  auto client =
      CoordinatorClient::Connect(absl::StrCat(standby.address, ",", leader), absl::Seconds(10));
  REQUIRE(client.ok());
  REQUIRE((*client)->KvSet("k", "v").ok());
  c.reset();  // the leader is gone; the standby still names it
  const auto failed = (*client)->KvGet({"k"});
  CHECK(failed.status().code() == absl::StatusCode::kUnavailable);
  // Both were tried: the standby answered at least once more.
  const int before = standby.calls();
  CHECK((*client)->GetStatus().status().code() == absl::StatusCode::kUnavailable);
  CHECK(standby.calls() > before);
}

// A takeover: the leader a member heartbeats goes away and another one (that knows the member)
// leads. The heartbeats are an hour apart: only a heartbeat that moves on at once within its
// interval reaches the new leader before the test gives up.
TEST_CASE("the heartbeat thread follows a new leader within the same interval",
          "[coordinator_client][leader][heartbeat]") {
  InProcessCoordinator a(1, 1, /*fake_clock=*/true);
  InProcessCoordinator b(1, 1, /*fake_clock=*/true);
  auto client =
      CoordinatorClient::Connect(absl::StrCat(a.address, ",", b.address), absl::Seconds(10));
  REQUIRE(client.ok());
  REQUIRE((*client)->address() == a.address);
  const auto registered = (*client)->Register(rpc::WORKER, "", -1);
  REQUIRE(registered.ok());
  const uint32_t w = registered->member_id();
  // B knows the member (as a new leader does from the shared state), but hears nothing yet.
  REQUIRE(b.coordinator->Register(rpc::WORKER, "", -1)->member_id() == w);
  for (InProcessCoordinator* c : {&a, &b}) {
    c->clock.Advance(absl::Seconds(4));
    c->coordinator->Sweep();
    REQUIRE_FALSE(AliveIn(*c, w));
  }
  REQUIRE((*client)->StartHeartbeats(w, absl::Hours(1)).ok());
  // The first heartbeat revives the member on A, the leader.
  REQUIRE(Eventually([&] { return AliveIn(a, w); }));
  CHECK_FALSE(AliveIn(b, w));

  a.Stop();
  (*client)->HeartbeatSoon();
  // A heartbeat to the stopped leader waits for its channel up to the call's timeout
  // (kRpcTimeout, with this interval) before it moves on: wait longer than that.
  CHECK(Eventually([&] { return AliveIn(b, w); },
                   CoordinatorClient::kRpcTimeout + absl::Seconds(10)));
  CHECK((*client)->address() == b.address);
  CHECK(Eventually([&] { return (*client)->last_heartbeat_status().ok(); }));
}

TEST_CASE("heartbeats carry the member's largest clock reported",
          "[coordinator_client][heartbeat]") {
  RecordingCoordinator c;
  auto client = CoordinatorClient::Connect(c.address, absl::Seconds(10));
  REQUIRE(client.ok());
  // None before any report.
  REQUIRE((*client)->Heartbeat(5).ok());
  REQUIRE((*client)->Heartbeat(6).ok());
  REQUIRE(c.heartbeats().size() == 2);
  CHECK_FALSE(c.heartbeats()[0].has_clock());

  REQUIRE((*client)->ReportClock(5, 4).ok());
  (*client)->ReportClockAsync(5, 9);
  (*client)->ReportClockAsync(5, 7);  // older: the largest stays
  REQUIRE(Eventually([&] { return c.reports() == 3; }));
  REQUIRE((*client)->Heartbeat(5).ok());
  REQUIRE((*client)->Heartbeat(6).ok());
  REQUIRE(c.heartbeats().size() == 4);
  CHECK(c.heartbeats()[2].clock() == 9);
  CHECK_FALSE(c.heartbeats()[3].has_clock());  // another member's

  // The thread's heartbeats carry it too.
  REQUIRE((*client)->StartHeartbeats(5, absl::Milliseconds(10)).ok());
  REQUIRE(Eventually([&] { return c.heartbeats().size() >= 6; }));
  (*client)->StopHeartbeats();
  const std::vector<rpc::HeartbeatRequest> sent = c.heartbeats();
  for (size_t i = 4; i < sent.size(); ++i) {
    CHECK(sent[i].member_id() == 5);
    CHECK(sent[i].clock() == 9);
  }
}

TEST_CASE("DescribeJobFailure names the cause, then the other failures", "[coordinator_client]") {
  rpc::JobFailure failure;
  failure.set_rank(1);
  failure.set_member_id(6);
  failure.set_reason("its heartbeats stopped");
  CHECK(DescribeJobFailure(failure) == "worker 1 (member 6): its heartbeats stopped");
  failure.add_failures("worker 1 (member 6): its heartbeats stopped");
  failure.add_failures("worker 0 (member 5): AllReduce: connection reset");
  failure.add_failures("worker 2 (member 7): AllReduce: connection reset");
  CHECK(DescribeJobFailure(failure) ==
        "worker 1 (member 6): its heartbeats stopped (then worker 0 (member 5): AllReduce: "
        "connection reset; worker 2 (member 7): AllReduce: connection reset)");
}

}  // namespace
}  // namespace ps

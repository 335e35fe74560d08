#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/job_config.h"
#include "server/coordinator/fake_clock.h"

namespace ps {
namespace coordinator {
namespace {

config::Job MakeJob(int servers, int workers, int shards = 64, int replication = 1) {
  const std::string text = absl::StrFormat(
      R"pb(name: "test"
           tables { name: "emb" dim: 4 }
           cluster { num_servers: %d num_workers: %d num_shards: %d replication_factor: %d })pb",
      servers, workers, shards, replication);
  absl::StatusOr<config::Job> job = ParseJob(text, "test.pbtxt");
  REQUIRE(job.ok());
  return *job;
}

// A coordinator on a fake clock.
struct Fixture {
  explicit Fixture(int servers = 2, int workers = 2, int shards = 64, int replication = 1) {
    CoordinatorOptions options;
    options.job = MakeJob(servers, workers, shards, replication);
    options.heartbeat_interval = absl::Milliseconds(500);
    options.dead_after = absl::Seconds(3);
    options.clock = &clock;
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(options));
    REQUIRE(c.ok());
    coordinator = std::move(*c);
  }

  // A deadline on the fake clock that tests never reach unless they advance it.
  absl::Time Far() const { return clock.Now() + absl::Hours(1); }

  rpc::RegisterResponse MustRegister(rpc::Role role, const std::string& address, int rank) {
    absl::StatusOr<rpc::RegisterResponse> r = coordinator->Register(role, address, rank);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  }

  std::map<uint32_t, rpc::MemberStatus> Members() {
    std::map<uint32_t, rpc::MemberStatus> out;
    const rpc::ClusterStatus status = coordinator->Status();
    for (const auto& m : status.members()) out[m.member_id()] = m;
    return out;
  }

  FakeClock clock;
  std::unique_ptr<Coordinator> coordinator;
};

// Collects the answer of an Async* call.
template <typename T>
struct Answer {
  std::function<void(absl::StatusOr<T>)> Callback() {
    return [this](absl::StatusOr<T> r) {
      result = std::move(r);
      done.Notify();
    };
  }
  absl::Notification done;
  std::optional<absl::StatusOr<T>> result;
};

TEST_CASE("options are validated", "[coordinator]") {
  CoordinatorOptions options;
  options.job = MakeJob(1, 1);
  options.heartbeat_interval = absl::Seconds(2);
  options.dead_after = absl::Seconds(1);
  CHECK(Coordinator::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options.heartbeat_interval = absl::ZeroDuration();
  CHECK(Coordinator::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  CoordinatorOptions bad_job;
  bad_job.job.set_name("no tables");
  CHECK(Coordinator::Create(bad_job).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a restored sync job starts at its checkpoint's step with new member ids",
          "[coordinator][register]") {
  FakeClock clock;
  CoordinatorOptions options;
  options.job = MakeJob(2, 2, 8);
  options.clock = &clock;
  options.restore_from = "/ckpt/00000000000000000003";
  options.restore_manifest.set_step(5);
  options.restore_manifest.set_next_member_id(40);
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(options));
  REQUIRE(c.ok());
  Coordinator& coordinator = **c;
  absl::StatusOr<rpc::RegisterResponse> worker = coordinator.Register(rpc::WORKER, "", -1);
  REQUIRE(worker.ok());
  CHECK(worker->member_id() == 40);
  CHECK(worker->start_step() == 5);
  REQUIRE(coordinator.Register(rpc::WORKER, "", -1).ok());
  CHECK(coordinator.Clocks().min_clock() == 4);
  CHECK(coordinator.Clocks().max_clock() == 4);
  REQUIRE(coordinator.Register(rpc::SERVER, "h:1", -1).ok());
  absl::StatusOr<rpc::RegisterResponse> server = coordinator.Register(rpc::SERVER, "h:2", -1);
  REQUIRE(server.ok());
  CHECK(server->start_step() == 0);
  absl::StatusOr<rpc::ShardMap> map = coordinator.GetShardMap(1, clock.Now());
  REQUIRE(map.ok());
  CHECK(map->restore_from() == "/ckpt/00000000000000000003");
  CHECK(coordinator.next_member_id() == 44);
}

TEST_CASE("a restore whose files are unchecked is in the map until checked, or fails the job",
          "[coordinator][map]") {
  FakeClock clock;
  CoordinatorOptions options;
  options.job = MakeJob(2, 1, 8);
  options.clock = &clock;
  options.restore_from = "/ckpt/00000000000000000003";
  options.restore_files_checked = false;
  int failed_calls = 0;
  options.on_job_failed = [&](const rpc::JobFailure&) { ++failed_calls; };
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(options));
  REQUIRE(c.ok());
  Coordinator& coordinator = **c;
  CHECK(coordinator.UncheckedRestore() == "/ckpt/00000000000000000003");
  REQUIRE(coordinator.Register(rpc::SERVER, "h:1", -1).ok());
  REQUIRE(coordinator.Register(rpc::SERVER, "h:2", -1).ok());
  absl::StatusOr<rpc::ShardMap> map = coordinator.GetShardMap(1, clock.Now());
  REQUIRE(map.ok());
  CHECK(map->restore_from() == "/ckpt/00000000000000000003");
  CHECK(map->restore_unchecked());

  SECTION("checked: a new version without the flag, which waiters get") {
    Answer<rpc::ShardMap> next;
    coordinator.AsyncGetShardMap(map->version() + 1, clock.Now() + absl::Hours(1), next.Callback());
    CHECK_FALSE(next.done.HasBeenNotified());
    coordinator.RestoreFilesChecked();
    REQUIRE(next.done.HasBeenNotified());
    REQUIRE(next.result->ok());
    CHECK((*next.result)->version() == map->version() + 1);
    CHECK_FALSE((*next.result)->restore_unchecked());
    CHECK((*next.result)->restore_from() == "/ckpt/00000000000000000003");
    CHECK(coordinator.UncheckedRestore().empty());
    coordinator.RestoreFilesChecked();  // nothing more happens
    CHECK(coordinator.GetShardMap(1, clock.Now())->version() == map->version() + 1);
    CHECK_FALSE(coordinator.failure().has_value());
  }
  SECTION("damaged: the job fails with the reason, and the map stays unchecked") {
    coordinator.RefuseRestore(
        absl::DataLossError("shard-00003.sst: checksum 1, the manifest says 2"));
    const std::optional<rpc::JobFailure> failure = coordinator.failure();
    REQUIRE(failure.has_value());
    CHECK(failure->rank() == -1);
    CHECK_THAT(failure->reason(),
               Catch::StartsWith("the checkpoint cannot be restored: DATA_LOSS"));
    CHECK_THAT(failure->reason(), Catch::Contains("checksum 1, the manifest says 2"));
    CHECK(failed_calls == 1);
    CHECK(coordinator.GetShardMap(1, clock.Now())->restore_unchecked());
  }
}

TEST_CASE("the member ids handed out are exactly [first_member_id, next_member_id)",
          "[coordinator][register]") {
  Fixture f(2, 2);
  CHECK(f.coordinator->MemberIds().first_member_id() == 1);
  CHECK(f.coordinator->MemberIds().next_member_id() == 1);  // none yet
  const uint32_t server = f.MustRegister(rpc::SERVER, "h:1", -1).member_id();
  const uint32_t worker = f.MustRegister(rpc::WORKER, "", -1).member_id();
  // A restarted server replaces its old member; the old id stays issued, never given again.
  const uint32_t restarted = f.MustRegister(rpc::SERVER, "h:1", -1).member_id();
  const uint32_t client = f.MustRegister(rpc::CLIENT, "", -1).member_id();
  CHECK(std::vector<uint32_t>{server, worker, restarted, client} ==
        std::vector<uint32_t>{1, 2, 3, 4});
  const rpc::MemberIds ids = f.coordinator->MemberIds();
  CHECK(ids.first_member_id() == 1);
  CHECK(ids.next_member_id() == 5);
  CHECK(ids.next_member_id() == f.coordinator->next_member_id());

  // A restored job hands out ids from its checkpoint's next_member_id: the ones below were the
  // checkpoint's cluster's, not this coordinator's.
  FakeClock clock;
  CoordinatorOptions options;
  options.job = MakeJob(1, 1, 8);
  options.clock = &clock;
  options.restore_from = "/ckpt/00000000000000000002";
  options.restore_manifest.set_next_member_id(40);
  absl::StatusOr<std::unique_ptr<Coordinator>> restored = Coordinator::Create(std::move(options));
  REQUIRE(restored.ok());
  REQUIRE((*restored)->Register(rpc::WORKER, "", -1).ok());
  CHECK((*restored)->MemberIds().first_member_id() == 40);
  CHECK((*restored)->MemberIds().next_member_id() == 41);
}

TEST_CASE("servers get ids in registration order and the job", "[coordinator][register]") {
  Fixture f;
  const rpc::RegisterResponse a = f.MustRegister(rpc::SERVER, "10.0.0.1:7000", -1);
  const rpc::RegisterResponse b = f.MustRegister(rpc::SERVER, "10.0.0.2:7000", 5);
  CHECK(a.member_id() == 1);
  CHECK(b.member_id() == 2);
  CHECK(a.rank() == 0);
  CHECK(b.rank() == 1);
  CHECK(a.job().name() == "test");
  CHECK(a.heartbeat_interval_ms() == 500);

  SECTION("a third address is refused") {
    const auto third = f.coordinator->Register(rpc::SERVER, "10.0.0.3:7000", -1);
    CHECK(third.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(absl::StrContains(third.status().message(), "expects 2 servers"));
    CHECK(absl::StrContains(third.status().message(), "10.0.0.3:7000"));
  }
  SECTION("a restart keeps its server_id, gets a new member_id and replaces the old member") {
    f.clock.Advance(absl::Seconds(4));
    f.coordinator->Sweep();
    REQUIRE_FALSE(f.coordinator->GetShardMap(0, f.Far())->servers(0).alive());
    const rpc::RegisterResponse again = f.MustRegister(rpc::SERVER, "10.0.0.1:7000", -1);
    CHECK(again.rank() == 0);
    CHECK(again.member_id() == 3);
    const auto map = f.coordinator->GetShardMap(0, f.Far());
    REQUIRE(map.ok());
    CHECK(map->servers(0).alive());
    CHECK(f.coordinator->Heartbeat(1).status().code() == absl::StatusCode::kNotFound);
    CHECK(f.Members().count(1) == 0);
  }
}

TEST_CASE("bad registrations are refused", "[coordinator][register]") {
  Fixture f;
  const auto code = [&](rpc::Role role, const std::string& address, int rank) {
    return f.coordinator->Register(role, address, rank).status().code();
  };
  CHECK(code(rpc::ROLE_UNSPECIFIED, "h:1", -1) == absl::StatusCode::kInvalidArgument);
  CHECK(code(static_cast<rpc::Role>(42), "h:1", -1) == absl::StatusCode::kInvalidArgument);
  CHECK(code(rpc::SERVER, "", -1) == absl::StatusCode::kInvalidArgument);
  const std::string bad = GENERATE("host", "host:", ":80", "host:0", "host:65536", "host:8x",
                                   "::1:80", "[::1]", "a b:80");
  CAPTURE(bad);
  CHECK(code(rpc::SERVER, bad, -1) == absl::StatusCode::kInvalidArgument);
  CHECK(code(rpc::WORKER, bad, -1) == absl::StatusCode::kInvalidArgument);
  CHECK(code(rpc::WORKER, "", 2) == absl::StatusCode::kInvalidArgument);
  CHECK(code(rpc::WORKER, "", -2) == absl::StatusCode::kInvalidArgument);
  // Nothing above took an id.
  CHECK(f.MustRegister(rpc::SERVER, "[::1]:80", -1).member_id() == 1);
}

TEST_CASE("workers get the rank they ask for or the next free one", "[coordinator][register]") {
  Fixture f(1, 3);
  CHECK(f.MustRegister(rpc::WORKER, "", 1).rank() == 1);
  CHECK(f.MustRegister(rpc::WORKER, "", -1).rank() == 0);
  CHECK(f.MustRegister(rpc::WORKER, "", -1).rank() == 2);
  const auto taken = f.coordinator->Register(rpc::WORKER, "", 1);
  CHECK(taken.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(f.coordinator->Register(rpc::WORKER, "", -1).status().code() ==
        absl::StatusCode::kFailedPrecondition);

  SECTION("a dead worker's rank can be taken, with its clock") {
    const auto members = f.Members();
    uint32_t rank1 = 0;
    for (const auto& [id, m] : members) {
      if (m.rank() == 1) rank1 = id;
    }
    REQUIRE(f.coordinator->ReportClock(rank1, 7).ok());
    f.clock.Advance(absl::Seconds(2));
    for (const auto& [id, m] : members) {
      if (id != rank1) REQUIRE(f.coordinator->Heartbeat(id).ok());
    }
    f.clock.Advance(absl::Seconds(2));  // only rank 1 is silent for 4 s
    const rpc::RegisterResponse back = f.MustRegister(rpc::WORKER, "", -1);
    CHECK(back.rank() == 1);
    CHECK(f.Members().count(rank1) == 0);
    CHECK(f.coordinator->Clocks().max_clock() == 7);
  }
}

TEST_CASE("clients register with rank -1", "[coordinator][register]") {
  Fixture f;
  const rpc::RegisterResponse c = f.MustRegister(rpc::CLIENT, "", 3);
  CHECK(c.rank() == -1);
  CHECK(f.Members().at(c.member_id()).role() == rpc::CLIENT);
}

TEST_CASE("the shard map spreads shards evenly with distinct replicas", "[coordinator][map]") {
  const auto [servers, shards, replication] = GENERATE(table<int, int, int>(
      {{1, 1, 1}, {2, 64, 1}, {3, 64, 2}, {4, 10, 3}, {5, 100, 5}, {7, 7, 2}}));
  CAPTURE(servers, shards, replication);
  Fixture f(servers, 1, shards, replication);
  for (int s = 0; s < servers; ++s) f.MustRegister(rpc::SERVER, absl::StrCat("h", s, ":1"), -1);
  const absl::StatusOr<rpc::ShardMap> map = f.coordinator->GetShardMap(1, f.clock.Now());
  REQUIRE(map.ok());
  CHECK(map->version() == 1);
  CHECK(map->num_shards() == static_cast<uint32_t>(shards));
  REQUIRE(map->servers_size() == servers);
  REQUIRE(map->shards_size() == shards);
  std::vector<int> primaries(servers);
  for (int i = 0; i < shards; ++i) {
    const rpc::ShardAssignment& a = map->shards(i);
    CHECK(a.shard() == static_cast<uint32_t>(i));
    CHECK(a.primary() == static_cast<uint32_t>(i % servers));
    ++primaries[a.primary()];
    REQUIRE(a.replicas_size() == replication - 1);
    std::vector<bool> holds(servers);
    holds[a.primary()] = true;
    for (int r = 0; r < a.replicas_size(); ++r) {
      CHECK(a.replicas(r) == static_cast<uint32_t>((i + r + 1) % servers));
      CHECK_FALSE(holds[a.replicas(r)]);
      holds[a.replicas(r)] = true;
    }
  }
  for (int n : primaries) CHECK((n == shards / servers || n == shards / servers + 1));
  for (int s = 0; s < servers; ++s) {
    CHECK(map->servers(s).server_id() == static_cast<uint32_t>(s));
    CHECK(map->servers(s).address() == absl::StrCat("h", s, ":1"));
    CHECK(map->servers(s).alive());
  }
}

TEST_CASE("the shard map is UNAVAILABLE until every server registered", "[coordinator][map]") {
  Fixture f;
  f.MustRegister(rpc::SERVER, "h0:1", -1);
  const auto early = f.coordinator->GetShardMap(0, f.clock.Now());
  CHECK(early.status().code() == absl::StatusCode::kUnavailable);
  CHECK(early.status().message() == "shard map not ready: 1 of 2 servers registered");
  CHECK(f.coordinator->Heartbeat(1).value() == 0);
  f.MustRegister(rpc::SERVER, "h1:1", -1);
  CHECK(f.coordinator->Heartbeat(1).value() == 1);
  const auto newer = f.coordinator->GetShardMap(2, f.clock.Now());
  CHECK(newer.status().code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(newer.status().message(), "version 1 is older than the requested 2"));
}

TEST_CASE("a shard map wait is completed by another thread's registration",
          "[coordinator][map][wait]") {
  Fixture f;
  f.MustRegister(rpc::SERVER, "h0:1", -1);
  std::optional<absl::StatusOr<rpc::ShardMap>> got;
  std::thread waiter([&] { got = f.coordinator->GetShardMap(1, f.Far()); });
  // The registration may come before or after the waiter registers: either way it gets the map.
  f.MustRegister(rpc::SERVER, "h1:1", -1);
  waiter.join();
  REQUIRE(got->ok());
  CHECK((*got)->version() == 1);
}

TEST_CASE("async waits complete on the thread that changes the state", "[coordinator][wait]") {
  Fixture f;
  Answer<rpc::ShardMap> answer;
  f.coordinator->AsyncGetShardMap(1, f.Far(), answer.Callback());
  f.MustRegister(rpc::SERVER, "h0:1", -1);
  CHECK_FALSE(answer.done.HasBeenNotified());
  CHECK(f.coordinator->NumPendingWaits() == 1);
  f.MustRegister(rpc::SERVER, "h1:1", -1);
  REQUIRE(answer.done.HasBeenNotified());  // done ran inside Register
  CHECK(answer.result->ok());
  CHECK(f.coordinator->NumPendingWaits() == 0);
}

TEST_CASE("waits end at their deadline on the coordinator's clock", "[coordinator][wait]") {
  Fixture f;
  Answer<rpc::ShardMap> map;
  Answer<rpc::ClockState> clock;
  Answer<std::vector<std::string>> kv;
  f.MustRegister(rpc::SERVER, "h0:1", -1);
  f.coordinator->AsyncGetShardMap(1, f.clock.Now() + absl::Seconds(1), map.Callback());
  f.coordinator->AsyncWaitClock(0, f.clock.Now() + absl::Seconds(1), clock.Callback());
  f.coordinator->AsyncKvWait({"a", "b", "c"}, f.clock.Now() + absl::Seconds(1), kv.Callback());
  REQUIRE(f.coordinator->KvSet("b", "x").ok());
  f.clock.Advance(absl::Milliseconds(999));
  f.coordinator->Sweep();
  CHECK(f.coordinator->NumPendingWaits() == 3);
  f.clock.Advance(absl::Milliseconds(1));
  f.coordinator->Sweep();
  REQUIRE(map.done.HasBeenNotified());
  REQUIRE(clock.done.HasBeenNotified());
  REQUIRE(kv.done.HasBeenNotified());
  CHECK(map.result->status() ==
        absl::UnavailableError("shard map not ready: 1 of 2 servers registered"));
  CHECK(clock.result->status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(clock.result->status().message(), "0 of 2 workers registered"));
  CHECK(kv.result->status() ==
        absl::DeadlineExceededError("kv wait: keys not set by the deadline: \"a\", \"c\""));
}

TEST_CASE("a wait whose deadline has passed answers at once", "[coordinator][wait]") {
  Fixture f(1, 1);
  REQUIRE(f.coordinator->KvSet("k", "v").ok());
  CHECK(*f.coordinator->KvWait({"k"}, f.clock.Now() - absl::Seconds(1)) ==
        std::vector<std::string>{"v"});
  CHECK(f.coordinator->KvWait({"k", "missing"}, f.clock.Now()).status().code() ==
        absl::StatusCode::kDeadlineExceeded);
  CHECK(f.coordinator->NumPendingWaits() == 0);
}

TEST_CASE("the timer thread ends waits at real deadlines", "[coordinator][wait]") {
  CoordinatorOptions options;
  options.job = MakeJob(1, 1);
  options.heartbeat_interval = absl::Seconds(10);  // the sweep alone would not wake it in time
  options.dead_after = absl::Seconds(30);
  auto c = Coordinator::Create(std::move(options));
  REQUIRE(c.ok());
  const absl::Time start = absl::Now();
  const auto got = (*c)->KvWait({"never"}, start + absl::Milliseconds(50));
  CHECK(got.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::Now() - start >= absl::Milliseconds(50));
  CHECK(absl::Now() - start < absl::Seconds(5));
}

TEST_CASE("cancelling and shutting down end waits", "[coordinator][wait]") {
  Fixture f;
  Answer<std::vector<std::string>> cancelled;
  Answer<std::vector<std::string>> pending;
  const WaitId id = f.coordinator->AsyncKvWait({"a"}, f.Far(), cancelled.Callback());
  f.coordinator->AsyncKvWait({"a"}, absl::InfiniteFuture(), pending.Callback());
  f.coordinator->CancelWait(id);
  REQUIRE(cancelled.done.HasBeenNotified());
  CHECK(cancelled.result->status().code() == absl::StatusCode::kCancelled);
  f.coordinator->CancelWait(id);  // a second cancel does nothing
  f.coordinator->CancelWait(12345);
  CHECK_FALSE(pending.done.HasBeenNotified());

  f.coordinator->Shutdown();
  REQUIRE(pending.done.HasBeenNotified());
  CHECK(pending.result->status().code() == absl::StatusCode::kUnavailable);
  // Later waits end at once; other calls keep working.
  CHECK(f.coordinator->KvWait({"a"}, f.Far()).status().code() == absl::StatusCode::kUnavailable);
  CHECK(f.coordinator->KvSet("a", "1").ok());
  f.coordinator->Shutdown();
}

TEST_CASE("shutdown ends a wait blocked in another thread", "[coordinator][wait]") {
  Fixture f;
  std::optional<absl::StatusOr<rpc::ClockState>> got;
  absl::Notification started;
  std::thread waiter([&] {
    started.Notify();
    got = f.coordinator->WaitClock(100, absl::InfiniteFuture());
  });
  started.WaitForNotification();
  f.coordinator->Shutdown();  // before or after the wait registered: it ends UNAVAILABLE
  waiter.join();
  CHECK(got->status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("heartbeats keep members alive; silence kills them", "[coordinator][liveness]") {
  Fixture f;
  const uint32_t s0 = f.MustRegister(rpc::SERVER, "h0:1", -1).member_id();
  const uint32_t s1 = f.MustRegister(rpc::SERVER, "h1:1", -1).member_id();
  const uint32_t w = f.MustRegister(rpc::WORKER, "", -1).member_id();
  CHECK(f.coordinator->Heartbeat(99).status().code() == absl::StatusCode::kNotFound);

  f.clock.Advance(absl::Seconds(2));
  REQUIRE(f.coordinator->Heartbeat(s0).value() == 1);
  f.clock.Advance(absl::Seconds(1));  // s1 and w are silent for 3 s: dead
  f.coordinator->Sweep();
  auto members = f.Members();
  CHECK(members.at(s0).alive());
  CHECK(members.at(s0).last_seen_ms() == 1000);
  CHECK_FALSE(members.at(s1).alive());
  CHECK(members.at(s1).last_seen_ms() == 3000);
  CHECK_FALSE(members.at(w).alive());

  // The map says so, with a new version; a heartbeat revives it and bumps the version again.
  auto map = f.coordinator->GetShardMap(0, f.Far());
  CHECK(map->version() == 2);
  CHECK(map->servers(0).alive());
  CHECK_FALSE(map->servers(1).alive());
  CHECK(f.coordinator->Heartbeat(s1).value() == 3);
  CHECK(f.coordinator->GetShardMap(3, f.clock.Now())->servers(1).alive());
  // A worker's death does not change the map.
  CHECK(f.coordinator->Heartbeat(w).value() == 3);
  CHECK(f.Members().at(w).alive());
}

TEST_CASE("liveness is checked lazily on reads", "[coordinator][liveness]") {
  Fixture f(1, 1);
  const uint32_t s = f.MustRegister(rpc::SERVER, "h0:1", -1).member_id();
  f.clock.Advance(absl::Seconds(5));
  // No Sweep: Status sees the silence itself.
  CHECK_FALSE(f.Members().at(s).alive());
  CHECK(f.coordinator->Status().shard_map().version() == 2);
}

TEST_CASE("a shard map wait for the next version is answered by a failure",
          "[coordinator][liveness][wait]") {
  Fixture f;
  f.MustRegister(rpc::SERVER, "h0:1", -1);
  f.MustRegister(rpc::SERVER, "h1:1", -1);
  Answer<rpc::ShardMap> next;
  f.coordinator->AsyncGetShardMap(2, f.Far(), next.Callback());
  CHECK_FALSE(next.done.HasBeenNotified());
  f.clock.Advance(absl::Seconds(3));
  f.coordinator->Sweep();
  REQUIRE(next.done.HasBeenNotified());
  CHECK((*next.result)->version() == 2);
}

TEST_CASE("clocks: min over every expected worker, max kept per worker", "[coordinator][clock]") {
  Fixture f(1, 2);
  const uint32_t server = f.MustRegister(rpc::SERVER, "h0:1", -1).member_id();
  const uint32_t w0 = f.MustRegister(rpc::WORKER, "", 0).member_id();
  CHECK(f.coordinator->ReportClock(server, 1).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(f.coordinator->ReportClock(99, 1).status().code() == absl::StatusCode::kNotFound);
  CHECK(f.coordinator->ReportClock(w0, -1).status().code() == absl::StatusCode::kInvalidArgument);

  rpc::ClockState s = f.coordinator->ReportClock(w0, 5).value();
  CHECK(s.min_clock() == -1);  // rank 1 has not registered
  CHECK(s.max_clock() == 5);
  const uint32_t w1 = f.MustRegister(rpc::WORKER, "", -1).member_id();
  CHECK(f.coordinator->Clocks().min_clock() == -1);  // ... nor reported
  s = f.coordinator->ReportClock(w1, 3).value();
  CHECK(s.min_clock() == 3);
  CHECK(s.max_clock() == 5);
  s = f.coordinator->ReportClock(w0, 2).value();  // never backwards
  CHECK(s.min_clock() == 3);
  CHECK(s.max_clock() == 5);
}

TEST_CASE("a clock wait is completed by another thread's report", "[coordinator][clock][wait]") {
  Fixture f(1, 2);
  const uint32_t w0 = f.MustRegister(rpc::WORKER, "", 0).member_id();
  const uint32_t w1 = f.MustRegister(rpc::WORKER, "", 1).member_id();
  REQUIRE(f.coordinator->ReportClock(w0, 4).ok());
  std::optional<absl::StatusOr<rpc::ClockState>> got;
  std::thread waiter([&] { got = f.coordinator->WaitClock(4, f.Far()); });
  REQUIRE(f.coordinator->ReportClock(w1, 3).ok());
  REQUIRE(f.coordinator->ReportClock(w1, 4).ok());
  waiter.join();
  REQUIRE(got->ok());
  CHECK((*got)->min_clock() == 4);
}

TEST_CASE("the rendezvous store sets, overwrites and gets bytes", "[coordinator][kv]") {
  Fixture f;
  const std::string binary("\0\x01\xff", 3);
  REQUIRE(f.coordinator->KvSet("a", "1").ok());
  REQUIRE(f.coordinator->KvSet("b", binary).ok());
  REQUIRE(f.coordinator->KvSet("a", "2").ok());
  CHECK(*f.coordinator->KvGet({"b", "a"}) == std::vector<std::string>{binary, "2"});
  CHECK(f.coordinator->KvGet({}).value().empty());
  CHECK(f.coordinator->KvGet({"a", "x", "y"}).status() ==
        absl::NotFoundError("key \"x\" is not set"));
  CHECK(f.coordinator->KvSet("", "v").code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.coordinator->KvGet({""}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.coordinator->KvWait({"a", ""}, f.Far()).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the rendezvous store limits keys to 1 KiB and values to 16 MiB", "[coordinator][kv]") {
  Fixture f;
  CHECK(f.coordinator->KvSet(std::string(1024, 'k'), std::string(16 << 20, 'v')).ok());
  CHECK(f.coordinator->KvSet(std::string(1025, 'k'), "v").code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(f.coordinator->KvSet("k", std::string((16 << 20) + 1, 'v')).code() ==
        absl::StatusCode::kResourceExhausted);
}

TEST_CASE("a kv wait is completed by other threads' sets", "[coordinator][kv][wait]") {
  Fixture f;
  const int keys = GENERATE(1, 2, 8);
  std::vector<std::string> names;
  for (int i = 0; i < keys; ++i) names.push_back(absl::StrCat("rank", i));
  std::optional<absl::StatusOr<std::vector<std::string>>> got;
  std::thread waiter([&] { got = f.coordinator->KvWait(names, f.Far()); });
  std::vector<std::thread> setters;
  std::vector<absl::Status> set(keys);  // checked here: Catch2's assertions are not thread-safe
  for (int i = 0; i < keys; ++i) {
    setters.emplace_back([&, i] { set[i] = f.coordinator->KvSet(names[i], names[i] + "!"); });
  }
  for (std::thread& t : setters) t.join();
  for (int i = 0; i < keys; ++i) CHECK(set[i].ok());
  waiter.join();
  REQUIRE(got->ok());
  for (int i = 0; i < keys; ++i) CHECK((**got)[i] == names[i] + "!");
}

TEST_CASE("status lists members, map, clocks and the job", "[coordinator]") {
  Fixture f(1, 1);
  f.MustRegister(rpc::SERVER, "h0:1", -1);
  f.MustRegister(rpc::WORKER, "w:2", -1);
  f.MustRegister(rpc::CLIENT, "", -1);
  const rpc::ClusterStatus s = f.coordinator->Status();
  CHECK(s.job_name() == "test");
  REQUIRE(s.members_size() == 3);
  CHECK(s.members(0).role() == rpc::SERVER);
  CHECK(s.members(1).role() == rpc::WORKER);
  CHECK(s.members(1).address() == "w:2");
  CHECK(s.members(1).rank() == 0);
  CHECK(s.members(2).role() == rpc::CLIENT);
  CHECK(s.shard_map().version() == 1);
  CHECK(s.clocks().min_clock() == -1);
}

// --- Failover and healing ---

rpc::ShardProgress Progress(uint32_t shard, uint64_t sequence, bool caught_up = false) {
  rpc::ShardProgress p;
  p.set_shard(shard);
  p.set_applied_sequence(sequence);
  p.set_caught_up(caught_up);
  return p;
}

bool Holds(const google::protobuf::RepeatedField<uint32_t>& servers, uint32_t server) {
  return std::find(servers.begin(), servers.end(), server) != servers.end();
}

// `servers` servers at h<i>:1; returns their member ids.
std::vector<uint32_t> RegisterServers(Fixture& f, int servers) {
  std::vector<uint32_t> ids;
  for (int s = 0; s < servers; ++s) {
    ids.push_back(f.MustRegister(rpc::SERVER, absl::StrCat("h", s, ":1"), -1).member_id());
  }
  return ids;
}

TEST_CASE("a dead primary's shards go to the live replica with the highest applied sequence",
          "[coordinator][failover]") {
  Fixture f(/*servers=*/3, /*workers=*/1, /*shards=*/6, /*replication=*/3);
  const std::vector<uint32_t> ids = RegisterServers(f, 3);
  // Shard 0: primary 0, replicas 1 and 2. Server 2 applied more of it than server 1.
  REQUIRE(f.coordinator->Heartbeat(ids[1], {Progress(0, 5)}).ok());
  REQUIRE(f.coordinator->Heartbeat(ids[2], {Progress(0, 9)}).ok());
  f.clock.Advance(absl::Seconds(2));
  REQUIRE(f.coordinator->Heartbeat(ids[1]).ok());
  REQUIRE(f.coordinator->Heartbeat(ids[2]).ok());
  f.clock.Advance(absl::Seconds(1));  // server 0 silent for 3 s
  f.coordinator->Sweep();
  const rpc::ShardMap map = *f.coordinator->GetShardMap(2, f.clock.Now());
  CHECK(map.version() == 2);  // one version for the whole failover
  for (const rpc::ShardAssignment& a : map.shards()) {
    CAPTURE(a.shard());
    CHECK(a.primary() != 0);
    CHECK_FALSE(Holds(a.replicas(), 0));
    CHECK_FALSE(a.lost());
    // Two servers left: no third copy can be made.
    CHECK(a.replicas_size() + a.catching_up_size() == 1);
  }
  CHECK(map.shards(0).primary() == 2);
  CHECK(map.shards(0).primary_term() == 1);
  CHECK(map.shards(1).primary() == 1);  // not primary on server 0: unchanged
  CHECK(map.shards(1).primary_term() == 0);
  const rpc::ClusterStatus status = f.coordinator->Status();
  CHECK(status.failovers() == 2);  // shards 0 and 3
  REQUIRE(status.shards_size() == 6);
  CHECK(status.shards(0).copies(0).server_id() == 2);
  CHECK(status.shards(0).copies(0).applied_sequence() == 9);
}

TEST_CASE("healing gives a shard short of copies one catching up, a replica once caught up",
          "[coordinator][failover]") {
  Fixture f(/*servers=*/3, /*workers=*/1, /*shards=*/6, /*replication=*/2);
  const std::vector<uint32_t> ids = RegisterServers(f, 3);
  CHECK(f.coordinator->DeclareDead(0) == 2);
  CHECK_FALSE(f.coordinator->AddressToCheck(0).has_value());
  CHECK(f.coordinator->AddressToCheck(1).value() == "h1:1");
  rpc::ShardMap map = *f.coordinator->GetShardMap(2, f.clock.Now());
  // Shard 0 (0, then 1) lost its primary: 1 is primary, 2 fills a copy. Shard 2 (2, then 0)
  // lost its replica: 1 fills it.
  CHECK(map.shards(0).primary() == 1);
  CHECK(map.shards(0).replicas_size() == 0);
  REQUIRE(map.shards(0).catching_up_size() == 1);
  CHECK(map.shards(0).catching_up(0) == 2);
  CHECK(map.shards(2).primary() == 2);
  REQUIRE(map.shards(2).catching_up_size() == 1);
  CHECK(map.shards(2).catching_up(0) == 1);
  // The copy's own word is not enough: its primary must say it holds what it acknowledged.
  CHECK(f.coordinator->Heartbeat(ids[2], {Progress(0, 7, /*caught_up=*/true)}).value() == 2);
  rpc::ShardProgress primary = Progress(0, 7);
  rpc::ReplicaLag* lag = primary.add_replica_lags();
  lag->set_server_id(2);
  lag->set_caught_up(false);
  CHECK(f.coordinator->Heartbeat(ids[1], {primary}).value() == 2);
  lag->set_caught_up(true);
  CHECK(f.coordinator->Heartbeat(ids[1], {primary}).value() == 3);
  map = *f.coordinator->GetShardMap(3, f.clock.Now());
  CHECK(map.shards(0).catching_up_size() == 0);
  REQUIRE(map.shards(0).replicas_size() == 1);
  CHECK(map.shards(0).replicas(0) == 2);
  // Declaring a dead server dead again changes nothing.
  CHECK(f.coordinator->DeclareDead(0) == 3);
}

TEST_CASE("a restarted server is failed over, then given copies to fill",
          "[coordinator][failover]") {
  Fixture f(/*servers=*/3, /*workers=*/1, /*shards=*/6, /*replication=*/2);
  RegisterServers(f, 3);
  // Server 1 restarts before its heartbeats stop: it lost what it held.
  f.MustRegister(rpc::SERVER, "h1:1", -1);
  const rpc::ShardMap map = *f.coordinator->GetShardMap(2, f.clock.Now());
  for (const rpc::ShardAssignment& a : map.shards()) {
    CAPTURE(a.shard());
    CHECK(a.primary() != 1);
    CHECK_FALSE(Holds(a.replicas(), 1));
    CHECK(a.replicas_size() + a.catching_up_size() == 1);
  }
  // Shard 1 (primary 1, replica 2) is on 2 now, and 1 fills the copy again.
  CHECK(map.shards(1).primary() == 2);
  CHECK(map.shards(1).primary_term() == 1);
  CHECK(Holds(map.shards(1).catching_up(), 1));
}

TEST_CASE("with replication 1 a dead server's shards are lost, and stay lost when it returns",
          "[coordinator][failover]") {
  Fixture f(/*servers=*/2, /*workers=*/1, /*shards=*/4, /*replication=*/1);
  RegisterServers(f, 2);
  f.coordinator->DeclareDead(1);
  f.MustRegister(rpc::SERVER, "h1:1", -1);  // it comes back, empty
  const rpc::ShardMap map = *f.coordinator->GetShardMap(2, f.clock.Now());
  for (const rpc::ShardAssignment& a : map.shards()) {
    CAPTURE(a.shard());
    CHECK(a.lost() == (a.shard() % 2 == 1));
    CHECK(a.catching_up_size() == 0);
  }
  const rpc::ClusterStatus status = f.coordinator->Status();
  CHECK(status.shards(1).lost());
  CHECK(status.failovers() == 0);
}

TEST_CASE("replicas go to other hosts first", "[coordinator][map]") {
  Fixture f(/*servers=*/4, /*workers=*/1, /*shards=*/8, /*replication=*/2);
  // Servers 0 and 1 share host a, 2 and 3 share host b.
  for (const char* address : {"a:1", "a:2", "b:1", "b:2"}) f.MustRegister(rpc::SERVER, address, -1);
  const rpc::ShardMap map = *f.coordinator->GetShardMap(1, f.clock.Now());
  for (const rpc::ShardAssignment& a : map.shards()) {
    CAPTURE(a.shard());
    REQUIRE(a.replicas_size() == 1);
    CHECK((a.primary() < 2) != (a.replicas(0) < 2));
  }
  CHECK(map.servers(0).host() == "a");
}

// --- Workers' ends ---

// A coordinator on a fake clock with one server and two workers registered, counting its
// on_job_failed calls.
struct EndsFixture {
  explicit EndsFixture(config::Training::Mode mode = config::Training::SYNC) {
    CoordinatorOptions options;
    options.job = MakeJob(1, 2, /*shards=*/4);
    options.job.mutable_training()->set_mode(mode);
    options.clock = &clock;
    options.on_job_failed = [this](const rpc::JobFailure& failure) {
      absl::MutexLock lock(&mu);
      ++calls;
      last = failure;
    };
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(options));
    REQUIRE(c.ok());
    coordinator = std::move(*c);
    server = Register(rpc::SERVER, "h0:1", -1);
    w0 = Register(rpc::WORKER, "", 0);
    w1 = Register(rpc::WORKER, "", 1);
  }

  uint32_t Register(rpc::Role role, const std::string& address, int rank) {
    absl::StatusOr<rpc::RegisterResponse> r = coordinator->Register(role, address, rank);
    REQUIRE(r.ok());
    return r->member_id();
  }

  // Advances the clock by `d` with heartbeats of `alive` at its end, then sweeps.
  void Pass(absl::Duration d, const std::vector<uint32_t>& alive) {
    clock.Advance(d);
    for (const uint32_t id : alive) REQUIRE(coordinator->Heartbeat(id).ok());
    coordinator->Sweep();
  }

  int Calls() {
    absl::MutexLock lock(&mu);
    return calls;
  }

  FakeClock clock;
  std::unique_ptr<Coordinator> coordinator;
  uint32_t server = 0, w0 = 0, w1 = 0;
  absl::Mutex mu;
  int calls ABSL_GUARDED_BY(mu) = 0;
  rpc::JobFailure last ABSL_GUARDED_BY(mu);
};

TEST_CASE("workers that leave are done: their silence fails nothing", "[coordinator][ends]") {
  EndsFixture f;
  REQUIRE(f.coordinator->ReportClock(f.w0, 15).ok());
  REQUIRE(f.coordinator->ReportClock(f.w1, 15).ok());
  REQUIRE(f.coordinator->Leave(f.w0).ok());
  REQUIRE(f.coordinator->Leave(f.w0).ok());      // twice is once
  REQUIRE(f.coordinator->Leave(f.server).ok());  // changes nothing for a server
  CHECK(f.coordinator->Leave(99).code() == absl::StatusCode::kNotFound);
  f.Pass(absl::Seconds(2), {f.server, f.w1});
  REQUIRE(f.coordinator->Leave(f.w1).ok());
  f.Pass(absl::Seconds(10), {f.server});
  CHECK_FALSE(f.coordinator->failure().has_value());
  CHECK(f.Calls() == 0);
  const rpc::ClusterStatus status = f.coordinator->Status();
  CHECK_FALSE(status.has_failure());
  for (const rpc::MemberStatus& m : status.members()) {
    if (m.role() != rpc::WORKER) continue;
    CHECK_FALSE(m.alive());
    CHECK(m.left());
    CHECK_FALSE(m.failed());
    CHECK(m.clock() == 15);
  }
  // A new worker may take a rank that was left.
  CHECK(f.coordinator->Register(rpc::WORKER, "", -1).ok());
}

TEST_CASE("a worker whose heartbeats stop fails the job at once, and members are told",
          "[coordinator][ends]") {
  EndsFixture f;
  REQUIRE(f.coordinator->ReportClock(f.w1, 11).ok());
  f.Pass(absl::Seconds(2), {f.server, f.w0, f.w1});
  f.Pass(absl::Seconds(2), {f.server, f.w0});
  CHECK_FALSE(f.coordinator->failure().has_value());
  f.Pass(absl::Seconds(1), {f.server, f.w0});  // w1 silent for 3 s
  const std::optional<rpc::JobFailure> failure = f.coordinator->failure();
  REQUIRE(failure.has_value());
  CHECK(failure->rank() == 1);
  CHECK(failure->member_id() == f.w1);
  CHECK_THAT(failure->reason(), Catch::StartsWith("its heartbeats stopped: not heard from for 3s"));
  CHECK_THAT(failure->reason(), Catch::EndsWith("after 12 steps done"));
  REQUIRE(failure->failures_size() == 1);
  CHECK(failure->failures(0) == absl::StrCat("worker 1 (member ", f.w1, "): ", failure->reason()));
  CHECK(f.Calls() == 1);
  CHECK(f.coordinator->Status().failure().SerializeAsString() == failure->SerializeAsString());

  // Not every live member has heard of it yet; each heartbeat's answer tells one.
  CHECK_FALSE(f.coordinator->AwaitFailureTold(absl::ZeroDuration()));
  std::optional<rpc::JobFailure> told;
  REQUIRE(f.coordinator->Heartbeat(f.server, {}, &told).ok());
  REQUIRE(told.has_value());
  CHECK(told->rank() == 1);
  CHECK_FALSE(f.coordinator->AwaitFailureTold(absl::ZeroDuration()));
  REQUIRE(f.coordinator->Heartbeat(f.w0, {}, &told).ok());
  CHECK(f.coordinator->AwaitFailureTold(absl::ZeroDuration()));
  // The job failed once: later ends change nothing.
  REQUIRE(f.coordinator->ReportWorkerFailure(f.w0, "later").ok());
  CHECK(f.coordinator->failure()->failures_size() == 1);
  CHECK(f.Calls() == 1);
}

TEST_CASE("a reported failure fails the job once the other workers are accounted for",
          "[coordinator][ends]") {
  EndsFixture f;
  f.Pass(absl::Milliseconds(500), {f.server, f.w0, f.w1});
  REQUIRE(f.coordinator->ReportWorkerFailure(f.w0, "NOT_FOUND: data/x.tsv: no such file").ok());
  REQUIRE(f.coordinator->ReportWorkerFailure(f.w0, "again").ok());  // the first report counts
  // w1 was last heard from before the report: it may be the cause.
  CHECK_FALSE(f.coordinator->failure().has_value());

  SECTION("the other worker heartbeats: the reporter is the cause") {
    f.Pass(absl::Milliseconds(500), {f.server, f.w1});
    const std::optional<rpc::JobFailure> failure = f.coordinator->failure();
    REQUIRE(failure.has_value());
    CHECK(failure->rank() == 0);
    CHECK(failure->reason() == "NOT_FOUND: data/x.tsv: no such file");
    CHECK(failure->failures_size() == 1);
    CHECK(f.Calls() == 1);
  }
  SECTION("the other worker reports too: the first report is the cause") {
    REQUIRE(f.coordinator->ReportWorkerFailure(f.w1, "AllReduce: connection reset").ok());
    const std::optional<rpc::JobFailure> failure = f.coordinator->failure();
    REQUIRE(failure.has_value());
    CHECK(failure->rank() == 0);
    REQUIRE(failure->failures_size() == 2);
    CHECK(failure->failures(1) ==
          absl::StrCat("worker 1 (member ", f.w1, "): AllReduce: connection reset"));
  }
  SECTION("the other worker falls silent: it is the cause, the report comes second") {
    f.Pass(absl::Seconds(3), {f.server});
    const std::optional<rpc::JobFailure> failure = f.coordinator->failure();
    REQUIRE(failure.has_value());
    CHECK(failure->rank() == 1);
    CHECK_THAT(failure->reason(), Catch::StartsWith("its heartbeats stopped"));
    REQUIRE(failure->failures_size() == 2);
    CHECK_THAT(failure->failures(1), Catch::EndsWith("data/x.tsv: no such file"));
    CHECK(f.Calls() == 1);
  }
  SECTION("the other worker leaves") {
    REQUIRE(f.coordinator->Leave(f.w1).ok());
    REQUIRE(f.coordinator->failure().has_value());
    CHECK(f.coordinator->failure()->rank() == 0);
  }
  // The reporter's own later close does not make it a worker that left.
  REQUIRE(f.coordinator->Leave(f.w0).ok());
  const rpc::ClusterStatus status = f.coordinator->Status();
  for (const rpc::MemberStatus& m : status.members()) {
    if (m.member_id() == f.w0) CHECK((m.failed() && !m.left()));
  }
}

TEST_CASE("only workers report their own failure", "[coordinator][ends]") {
  EndsFixture f;
  CHECK(f.coordinator->ReportWorkerFailure(f.server, "x").code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(f.coordinator->ReportWorkerFailure(99, "x").code() == absl::StatusCode::kNotFound);
  const uint32_t client = f.Register(rpc::CLIENT, "", -1);
  // A client that falls silent fails nothing.
  f.Pass(absl::Seconds(5), {f.server, f.w0, f.w1});
  CHECK_FALSE(f.coordinator->failure().has_value());
  CHECK(f.coordinator->ReportWorkerFailure(client, "x").code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a sync job's status has the step every shard applied", "[coordinator][ends]") {
  EndsFixture f;
  CHECK_FALSE(f.coordinator->Status().has_applied_step());  // no heartbeat with progress yet
  std::vector<rpc::ShardProgress> progress;
  for (uint32_t shard = 0; shard < 4; ++shard) {
    progress.push_back(Progress(shard, 10));
    progress.back().set_applied_step(shard == 2 ? 14 : 15);
  }
  REQUIRE(f.coordinator->Heartbeat(f.server, progress).ok());
  rpc::ClusterStatus status = f.coordinator->Status();
  REQUIRE(status.has_applied_step());
  CHECK(status.applied_step() == 14);
  CHECK(status.num_workers() == 2);

  SECTION("before any step: -1") {
    for (rpc::ShardProgress& p : progress) p.set_applied_step(-1);
    REQUIRE(f.coordinator->Heartbeat(f.server, progress).ok());
    CHECK(f.coordinator->Status().applied_step() == -1);
  }
  SECTION("other modes have no applied step") {
    EndsFixture async(config::Training::ASYNC);
    REQUIRE(async.coordinator->Heartbeat(async.server, progress).ok());
    CHECK_FALSE(async.coordinator->Status().has_applied_step());
  }
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

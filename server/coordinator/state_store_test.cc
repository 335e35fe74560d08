// The StateStore contract, run against every implementation.
#include "server/coordinator/state_store.h"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "common/job_config.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_store.h"
#include "server/coordinator/etcd_client.h"
#include "server/coordinator/etcd_state_store.h"
#include "server/coordinator/fake_clock.h"
#include "server/coordinator/leader_election.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace coordinator {
namespace {

// Opens the same store again (a restarted coordinator's view of it).
using Reopen = std::function<StateStore*()>;

// Runs `body` with a store of each kind and a way to open it again.
void ForEachStore(const std::string& name, const std::function<void(const Reopen&)>& body) {
  SECTION("in memory") {
    MemoryStateStore memory;
    body([&memory]() -> StateStore* { return &memory; });
  }
  SECTION("RocksDB") {
    const std::string dir = testing::TempDir() + "/state_store_" + name;
    std::unique_ptr<CoordinatorStore> open;
    body([&]() -> StateStore* {
      open.reset();  // RocksDB's lock: one open at a time
      absl::StatusOr<std::unique_ptr<CoordinatorStore>> opened = CoordinatorStore::Open(dir);
      REQUIRE(opened.ok());
      open = *std::move(opened);
      return open.get();
    });
  }
  SECTION("etcd") {
    absl::StatusOr<std::unique_ptr<testing::EtcdCluster>> etcd = testing::EtcdCluster::Start(1);
    REQUIRE(etcd.ok());
    absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create((*etcd)->endpoints());
    REQUIRE(client.ok());
    const std::string prefix = "/ps/" + name + "/";
    LeaderElectionOptions options;
    options.prefix = prefix;
    options.address = "127.0.0.1:1";
    absl::StatusOr<std::unique_ptr<LeaderElection>> election =
        LeaderElection::Create(client->get(), options);
    REQUIRE(election.ok());
    absl::StatusOr<LeaderElection::Term> term = (*election)->Campaign();
    REQUIRE(term.ok());
    EtcdStateStore store(client->get(), prefix, prefix + "leader", term->leader_revision);
    body([&store]() -> StateStore* { return &store; });
  }
}

TEST_CASE("state store: a new store holds nothing", "[state_store]") {
  ForEachStore("new", [](const Reopen& reopen) {
    StateStore* store = reopen();
    CHECK_FALSE(store->location().empty());
    absl::StatusOr<std::optional<SavedCoordinator>> loaded = store->Load();
    REQUIRE(loaded.ok());
    CHECK_FALSE(loaded->has_value());
    // Clocks and keys without a state record are no state.
    REQUIRE(store->SaveClock(0, 3).ok());
    REQUIRE(store->SaveKv("k", "v").ok());
    loaded = store->Load();
    REQUIRE(loaded.ok());
    CHECK_FALSE(loaded->has_value());
  });
}

TEST_CASE("state store: what was saved is loaded again, the latest of each", "[state_store]") {
  ForEachStore("saved", [](const Reopen& reopen) {
    StateStore* store = reopen();
    rpc::CoordinatorState state;
    state.set_job_digest(42);
    state.set_next_member_id(5);
    REQUIRE(store->SaveState(state).ok());
    state.set_next_member_id(7);
    state.mutable_map()->set_version(3);
    REQUIRE(store->SaveState(state).ok());  // replaces, whole
    REQUIRE(store->SaveClock(1, 4).ok());
    REQUIRE(store->SaveClock(1, 9).ok());
    REQUIRE(store->SaveClock(0, 2).ok());
    REQUIRE(store->SaveKv("gloo/0", "addr0").ok());
    REQUIRE(store->SaveKv("ckpt/3/w0", "a").ok());
    REQUIRE(store->SaveKv("ckpt/3/w1", "b").ok());
    REQUIRE(store->SaveKv("ckpt/30", "kept").ok());
    REQUIRE(store->EraseKvPrefix("ckpt/3/").ok());

    store = reopen();
    const absl::StatusOr<std::optional<SavedCoordinator>> loaded = store->Load();
    REQUIRE(loaded.ok());
    REQUIRE(loaded->has_value());
    const SavedCoordinator& saved = **loaded;
    CHECK(saved.state.job_digest() == 42);
    CHECK(saved.state.next_member_id() == 7);
    CHECK(saved.state.map().version() == 3);
    if (store->keeps_clocks()) {
      CHECK(saved.clocks == std::map<int32_t, int64_t>{{0, 2}, {1, 9}});
    } else {
      CHECK(saved.clocks.empty());
    }
    CHECK(saved.kv == std::map<std::string, std::string>{{"gloo/0", "addr0"}, {"ckpt/30", "kept"}});
  });
}

std::unique_ptr<Coordinator> StartOn(StateStore* store, FakeClock* clock) {
  absl::StatusOr<config::Job> job = ParseJob(R"pb(name: "seam"
                                                  tables { name: "emb" dim: 4 }
                                                  cluster { num_servers: 2 num_workers: 1 })pb",
                                             "seam.pbtxt");
  REQUIRE(job.ok());
  CoordinatorOptions options;
  options.job = *std::move(job);
  options.clock = clock;
  options.store = store;
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(options));
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return *std::move(c);
}

TEST_CASE("state store: a coordinator carries the job on from either store", "[state_store]") {
  ForEachStore("coordinator", [](const Reopen& reopen) {
    FakeClock clock;
    rpc::ShardMap map;
    uint32_t worker = 0;
    {
      std::unique_ptr<Coordinator> c = StartOn(reopen(), &clock);
      REQUIRE(c->Register(rpc::SERVER, "h:1", -1).ok());
      REQUIRE(c->Register(rpc::SERVER, "h:2", -1).ok());
      worker = c->Register(rpc::WORKER, "", -1)->member_id();
      REQUIRE(c->ReportClock(worker, 4).ok());
      REQUIRE(c->KvSet("gloo/0", "addr").ok());
      map = *c->GetShardMap(1, clock.Now());
    }
    StateStore* store = reopen();
    std::unique_ptr<Coordinator> c = StartOn(store, &clock);
    const absl::StatusOr<rpc::ShardMap> again = c->GetShardMap(1, clock.Now());
    REQUIRE(again.ok());
    CHECK(again->SerializeAsString() == map.SerializeAsString());
    if (!store->keeps_clocks()) {
      // Rebuilt from the worker's heartbeat, which carries its clock.
      CHECK(c->Clocks().max_clock() == -1);
      REQUIRE(c->Heartbeat(worker, {}, nullptr, 4).ok());
    }
    CHECK(c->Clocks().max_clock() == 4);
    CHECK(c->KvGet({"gloo/0"})->front() == "addr");
    CHECK(c->Heartbeat(worker).ok());
    CHECK(c->next_member_id() == 4);
  });
}

TEST_CASE("state store: a failed job stays failed for the coordinator that takes it up",
          "[state_store]") {
  ForEachStore("failed", [](const Reopen& reopen) {
    FakeClock clock;
    uint32_t worker = 0;
    {
      std::unique_ptr<Coordinator> c = StartOn(reopen(), &clock);
      worker = c->Register(rpc::WORKER, "", -1)->member_id();
      REQUIRE(c->ReportWorkerFailure(worker, "out of memory").ok());
      REQUIRE(c->failure().has_value());
    }
    std::atomic<int> told{0};
    absl::StatusOr<config::Job> job = ParseJob(R"pb(name: "seam"
                                                    tables { name: "emb" dim: 4 }
                                                    cluster { num_servers: 2 num_workers: 1 })pb",
                                               "seam.pbtxt");
    REQUIRE(job.ok());
    CoordinatorOptions options;
    options.job = *std::move(job);
    options.clock = &clock;
    options.store = reopen();
    options.on_job_failed = [&told](const rpc::JobFailure&) { ++told; };
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(options));
    REQUIRE(c.ok());
    REQUIRE((*c)->failure().has_value());
    CHECK((*c)->failure()->failures(0).find("out of memory") != std::string::npos);
    // The member's next heartbeat is told, and the new coordinator reports the failure once.
    std::optional<rpc::JobFailure> failure;
    REQUIRE((*c)->Heartbeat(worker, {}, &failure).ok());
    CHECK(failure.has_value());
    // The timer thread may be the one that takes the failure up and calls on_job_failed, outside
    // the lock; once Shutdown has joined it, every call made has returned.
    (*c)->Shutdown();
    CHECK(told.load() == 1);
  });
}

// A store whose every write is refused, as a conditional store refuses a coordinator that no
// longer leads.
class RefusingStore final : public StateStore {
 public:
  std::string location() const override { return "refusing"; }
  absl::StatusOr<std::optional<SavedCoordinator>> Load() const override {
    return std::optional<SavedCoordinator>();
  }
  absl::Status SaveState(const rpc::CoordinatorState&) override { return Refuse(); }
  absl::Status SaveClock(int32_t, int64_t) override { return Refuse(); }
  absl::Status SaveKv(absl::string_view, absl::string_view) override { return Refuse(); }
  absl::Status EraseKvPrefix(absl::string_view) override { return Refuse(); }

  int refused = 0;

 private:
  absl::Status Refuse() {
    ++refused;
    return absl::FailedPreconditionError("no longer leader");
  }
};

// Today's coordinator reports the first refused write and carries on from memory; issue 36
// decides what a coordinator that lost its lease does.
TEST_CASE("state store: refused writes are reported, and the coordinator carries on",
          "[state_store]") {
  RefusingStore store;
  FakeClock clock;
  std::unique_ptr<Coordinator> c = StartOn(&store, &clock);
  REQUIRE(c->Register(rpc::SERVER, "h:1", -1).ok());
  REQUIRE(c->Register(rpc::SERVER, "h:2", -1).ok());
  const uint32_t worker = c->Register(rpc::WORKER, "", -1)->member_id();
  REQUIRE(c->ReportClock(worker, 2).ok());
  REQUIRE(c->KvSet("k", "v").ok());
  c->KvErasePrefix("x");
  CHECK(store.refused >= 6);  // the state, again on each change, the clock, the key, the erase
  CHECK(c->GetShardMap(1, clock.Now()).ok());
  CHECK(c->KvGet({"k"})->front() == "v");
  CHECK(c->Clocks().max_clock() == 2);
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

#include "server/coordinator/coordinator_store.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "common/job_config.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/fake_clock.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace coordinator {
namespace {

config::Job Job(int workers) {
  absl::StatusOr<config::Job> job =
      ParseJob(absl::StrFormat(R"pb(name: "kept"
                                    tables { name: "emb" dim: 4 }
                                    cluster { num_servers: 2 num_workers: %d num_shards: 8 })pb",
                               workers),
               "kept.pbtxt");
  REQUIRE(job.ok());
  return *job;
}

std::unique_ptr<Coordinator> Start(CoordinatorStore* store, FakeClock* clock, int workers = 2) {
  CoordinatorOptions options;
  options.job = Job(workers);
  options.clock = clock;
  options.store = store;
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(options));
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return std::move(*c);
}

// A coordinator of Job(2) on `store` that restores checkpoint `folder` (whose manifest's
// next_member_id is `next_member_id`), its files already checked or not.
std::unique_ptr<Coordinator> StartRestoring(CoordinatorStore* store, FakeClock* clock,
                                            const std::string& folder, bool files_checked,
                                            uint32_t next_member_id = 0) {
  CoordinatorOptions options;
  options.job = Job(2);
  options.clock = clock;
  options.store = store;
  options.restore_from = folder;
  options.restore_manifest.set_next_member_id(next_member_id);
  options.restore_files_checked = files_checked;
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(options));
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return std::move(*c);
}

TEST_CASE("a coordinator restarted on its store carries the job on", "[coordinator][store]") {
  const std::string dir = testing::TempDir() + "/coordinator_store";
  FakeClock clock;
  rpc::ShardMap map;
  uint32_t worker = 0;
  {
    auto store = CoordinatorStore::Open(dir);
    REQUIRE(store.ok());
    auto c = Start(store->get(), &clock);
    REQUIRE(c->Register(rpc::SERVER, "h:1", -1).ok());
    REQUIRE(c->Register(rpc::SERVER, "h:2", -1).ok());
    worker = c->Register(rpc::WORKER, "", -1)->member_id();
    REQUIRE(c->Register(rpc::WORKER, "", -1).ok());
    REQUIRE(c->ReportClock(worker, 7).ok());
    REQUIRE(c->KvSet("gloo/rank0", "addr").ok());
    REQUIRE(c->KvSet("ps/checkpoint/1/worker/0", "state").ok());
    c->KvErasePrefix("ps/checkpoint/");
    map = *c->GetShardMap(1, clock.Now());
  }  // the coordinator goes, its store with it

  auto store = CoordinatorStore::Open(dir);
  REQUIRE(store.ok());
  auto c = Start(store->get(), &clock);
  absl::StatusOr<rpc::ShardMap> again = c->GetShardMap(1, clock.Now());
  REQUIRE(again.ok());
  CHECK(again->SerializeAsString() == map.SerializeAsString());
  // However long it takes to start listening, nobody is found silent before it does...
  clock.Advance(absl::Seconds(10));
  c->Sweep();
  c->StartServing();
  const rpc::ClusterStatus status = c->Status();
  CHECK(status.members_size() == 4);
  for (const rpc::MemberStatus& m : status.members()) CHECK(m.alive());
  CHECK(status.clocks().max_clock() == 7);
  CHECK(c->KvGet({"gloo/rank0"})->front() == "addr");
  CHECK(c->KvGet({"ps/checkpoint/1/worker/0"}).status().code() == absl::StatusCode::kNotFound);
  // The members carry on: heartbeats and clocks of the ids they had, new ids above them.
  CHECK(c->Heartbeat(worker).ok());
  CHECK(c->ReportClock(worker, 8).ok());
  CHECK(c->Register(rpc::CLIENT, "", -1)->member_id() == 5);
  // ...and from then on a member not heard from within dead_after is dead, as before the restart.
  clock.Advance(absl::Seconds(10));
  c->Sweep();
  int alive = 0;
  const rpc::ClusterStatus after = c->Status();
  for (const rpc::MemberStatus& m : after.members()) alive += m.alive();
  CHECK(alive == 0);
}

TEST_CASE("a restarted coordinator keeps the range of member ids it handed out",
          "[coordinator][store]") {
  const std::string dir = testing::TempDir() + "/coordinator_store_ids";
  FakeClock clock;
  {
    auto store = CoordinatorStore::Open(dir);
    REQUIRE(store.ok());
    // A job restored from a checkpoint: its ids start at the checkpoint's next_member_id.
    auto c = StartRestoring(store->get(), &clock, "/ckpt/00000000000000000001",
                            /*files_checked=*/true, /*next_member_id=*/30);
    REQUIRE(c->Register(rpc::WORKER, "", -1).ok());
    REQUIRE(c->Register(rpc::CLIENT, "", -1).ok());
  }
  // Restarted as ps_coordinator restarts it: the data_dir, not the checkpoint's manifest.
  auto store = CoordinatorStore::Open(dir);
  REQUIRE(store.ok());
  auto c = Start(store->get(), &clock);
  CHECK(c->MemberIds().first_member_id() == 30);
  CHECK(c->MemberIds().next_member_id() == 32);
  CHECK(c->Register(rpc::CLIENT, "", -1)->member_id() == 32);
}

TEST_CASE("a coordinator restarted before its restore's files were checked has them checked again",
          "[coordinator][store]") {
  const std::string dir = testing::TempDir() + "/coordinator_store_unchecked";
  FakeClock clock;
  {
    auto store = CoordinatorStore::Open(dir);
    REQUIRE(store.ok());
    auto c = StartRestoring(store->get(), &clock, "/ckpt/00000000000000000001",
                            /*files_checked=*/false);
    REQUIRE(c->Register(rpc::SERVER, "h:1", -1).ok());
    REQUIRE(c->Register(rpc::SERVER, "h:2", -1).ok());
    CHECK(c->GetShardMap(1, clock.Now())->restore_unchecked());
  }  // killed before the check ended
  auto store = CoordinatorStore::Open(dir);
  REQUIRE(store.ok());
  auto c = Start(store->get(), &clock);  // no restore_from: as ps_coordinator carries a job on
  CHECK(c->UncheckedRestore() == "/ckpt/00000000000000000001");
  const uint64_t version = c->GetShardMap(1, clock.Now())->version();
  c->RestoreFilesChecked();
  absl::StatusOr<rpc::ShardMap> map = c->GetShardMap(version + 1, clock.Now());
  REQUIRE(map.ok());
  CHECK_FALSE(map->restore_unchecked());
  CHECK(map->restore_from() == "/ckpt/00000000000000000001");
  CHECK(c->UncheckedRestore().empty());
}

TEST_CASE("a coordinator restarted before its map was built still restores the checkpoint",
          "[coordinator][store]") {
  const std::string dir = testing::TempDir() + "/coordinator_store_restore_early";
  std::filesystem::remove_all(dir);  // each section starts from nothing
  FakeClock clock;
  {
    auto store = CoordinatorStore::Open(dir);
    REQUIRE(store.ok());
    auto c = StartRestoring(store->get(), &clock, "/ckpt/00000000000000000004",
                            /*files_checked=*/false);
    REQUIRE(c->Register(rpc::SERVER, "h:1", -1).ok());  // 1 of 2: no map yet
  }
  auto store = CoordinatorStore::Open(dir);
  REQUIRE(store.ok());
  auto c = Start(store->get(), &clock);
  CHECK(c->UncheckedRestore() == "/ckpt/00000000000000000004");
  SECTION("checked before the map is built") {
    c->RestoreFilesChecked();
    CHECK(c->UncheckedRestore().empty());
  }
  SECTION("checked after") {}
  REQUIRE(c->Register(rpc::SERVER, "h:2", -1).ok());
  absl::StatusOr<rpc::ShardMap> map = c->GetShardMap(1, clock.Now());
  REQUIRE(map.ok());
  CHECK(map->restore_from() == "/ckpt/00000000000000000004");
  CHECK(map->restore_unchecked() == !c->UncheckedRestore().empty());
}

TEST_CASE("a store holding another job's state is refused", "[coordinator][store]") {
  const std::string dir = testing::TempDir() + "/coordinator_store_other";
  FakeClock clock;
  {
    auto store = CoordinatorStore::Open(dir);
    REQUIRE(store.ok());
    Start(store->get(), &clock, 2);
  }
  auto store = CoordinatorStore::Open(dir);
  REQUIRE(store.ok());
  CoordinatorOptions options;
  options.job = Job(3);
  options.clock = &clock;
  options.store = store->get();
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Create(std::move(options));
  CHECK(c.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(c.status().message()), Catch::Contains("another job"));
  // One coordinator at a time: RocksDB's lock.
  CHECK(CoordinatorStore::Open(dir).status().code() == absl::StatusCode::kInternal);
}

TEST_CASE("a restarted coordinator remembers the workers that left", "[coordinator][store]") {
  const std::string dir = testing::TempDir() + "/coordinator_store_left";
  FakeClock clock;
  uint32_t left = 0, training = 0;
  {
    auto store = CoordinatorStore::Open(dir);
    REQUIRE(store.ok());
    auto c = Start(store->get(), &clock);
    REQUIRE(c->Register(rpc::SERVER, "h:1", -1).ok());
    REQUIRE(c->Register(rpc::SERVER, "h:2", -1).ok());
    left = c->Register(rpc::WORKER, "", -1)->member_id();
    training = c->Register(rpc::WORKER, "", -1)->member_id();
    REQUIRE(c->Leave(left).ok());
  }
  auto store = CoordinatorStore::Open(dir);
  REQUIRE(store.ok());
  auto c = Start(store->get(), &clock);
  // The worker that left stays silent: no failure. The one that trained must heartbeat.
  REQUIRE(c->Leave(training).ok());
  clock.Advance(absl::Seconds(10));
  c->Sweep();
  CHECK_FALSE(c->failure().has_value());
  const rpc::ClusterStatus status = c->Status();
  for (const rpc::MemberStatus& m : status.members()) {
    if (m.role() == rpc::WORKER) CHECK(m.left());
  }
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

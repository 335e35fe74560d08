#include "server/coordinator/checkpointer.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint_catalog.h"
#include "common/job_config.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace coordinator {
namespace {

// A coordinator of one server with 4 shards whose checkpoints are written by a fake server: it
// writes incrementally every shard when asked to build on a base, except the shards in
// `written_full` (as a server does for the shards it did not cut for that base).
struct Fixture {
  Fixture(uint32_t full_every, uint32_t keep) {
    static int fixtures = 0;
    dir = absl::StrFormat("%s/checkpointer_%d", testing::TempDir(), ++fixtures);
    std::filesystem::remove_all(dir);
    absl::StatusOr<config::Job> job = ParseJob(absl::StrFormat(R"pb(name: "ckpt"
                                                                    tables { name: "emb" dim: 4 }
                                                                    training { mode: ASYNC }
                                                                    cluster {
                                                                      num_servers: 1
                                                                      num_shards: 4
                                                                      checkpoint_dir: "%s"
                                                                      checkpoint_keep: %d
                                                                      checkpoint_full_every: %d
                                                                    })pb",
                                                               dir, keep, full_every),
                                               "ckpt.pbtxt");
    REQUIRE(job.ok());
    CoordinatorOptions options;
    options.job = *job;
    options.dead_after = absl::Hours(1);
    coordinator = std::move(Coordinator::Create(std::move(options))).value();
    checkpointer = std::make_unique<Checkpointer>(
        coordinator.get(),
        [this](const std::string&, const rpc::WriteCheckpointRequest& r)
            -> absl::StatusOr<rpc::WriteCheckpointResponse> {
          absl::MutexLock lock(&mu);
          requests.push_back(r);
          rpc::WriteCheckpointResponse response;
          for (uint32_t s : r.shards()) {
            rpc::CheckpointShardFile* file = response.add_files();
            file->set_shard(s);
            file->set_file(absl::StrFormat("shard-%05d.sst", s));
            // Empty, as the manifest says (no size).
            std::ofstream(absl::StrCat(r.path(), "/", file->file()));
            const bool incremental = r.base_id() != 0 && written_full.count(s) == 0;
            file->set_incremental(incremental);
            file->set_base_id(incremental ? r.base_id() : 0);
          }
          return response;
        },
        absl::Minutes(1), nullptr,
        [this](const std::string& address,
               const rpc::RestoreShardsRequest& r) -> absl::StatusOr<rpc::RestoreShardsResponse> {
          absl::MutexLock lock(&mu);
          restores.push_back(r);
          if (!restore_error.ok()) return restore_error;
          return rpc::RestoreShardsResponse();
        });
    REQUIRE(coordinator->Register(rpc::SERVER, "127.0.0.1:1", -1).ok());
  }
  ~Fixture() { std::filesystem::remove_all(dir); }

  // Takes a checkpoint; returns its manifest's base_id after checking that the server was asked
  // for the same base and told the checkpoint's id.
  uint64_t Take() {
    absl::StatusOr<rpc::CheckpointResponse> taken = checkpointer->Take(-1);
    INFO(taken.status().ToString());
    REQUIRE(taken.ok());
    absl::StatusOr<rpc::CheckpointManifest> m = ReadCheckpointManifest(taken->path());
    REQUIRE(m.ok());
    absl::MutexLock lock(&mu);
    CHECK(requests.back().id() == taken->id());
    if (m->base_id() != 0) CHECK(requests.back().base_id() == m->base_id());
    return m->base_id();
  }

  std::vector<uint64_t> Asked() {
    absl::MutexLock lock(&mu);
    std::vector<uint64_t> bases;
    for (const rpc::WriteCheckpointRequest& r : requests) bases.push_back(r.base_id());
    return bases;
  }

  std::vector<uint64_t> Kept() {
    absl::StatusOr<std::vector<rpc::CheckpointManifest>> all = ListCheckpoints(dir);
    REQUIRE(all.ok());
    std::vector<uint64_t> ids;
    for (const rpc::CheckpointManifest& m : *all) ids.push_back(m.id());
    return ids;
  }

  std::string dir;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<Checkpointer> checkpointer;
  absl::Mutex mu;
  std::vector<rpc::WriteCheckpointRequest> requests ABSL_GUARDED_BY(mu);
  std::set<uint32_t> written_full ABSL_GUARDED_BY(mu);
  std::vector<rpc::RestoreShardsRequest> restores ABSL_GUARDED_BY(mu);
  absl::Status restore_error ABSL_GUARDED_BY(mu);
};

TEST_CASE("every checkpoint_full_every-th checkpoint is full, the others build on the previous",
          "[checkpoint][incremental]") {
  Fixture f(/*full_every=*/3, /*keep=*/10);
  std::vector<uint64_t> bases;
  for (int i = 0; i < 7; ++i) bases.push_back(f.Take());
  CHECK(bases == std::vector<uint64_t>{0, 1, 2, 0, 4, 5, 0});
  CHECK(f.Asked() == bases);
}

TEST_CASE("by default every checkpoint is full", "[checkpoint][incremental]") {
  Fixture f(/*full_every=*/1, /*keep=*/10);
  for (int i = 0; i < 3; ++i) CHECK(f.Take() == 0);
  CHECK(f.Asked() == std::vector<uint64_t>{0, 0, 0});
}

TEST_CASE("a checkpoint whose shards were all written in full is a full one",
          "[checkpoint][incremental]") {
  Fixture f(/*full_every=*/3, /*keep=*/10);
  CHECK(f.Take() == 0);
  {
    absl::MutexLock lock(&f.mu);
    f.written_full = {0, 1, 2, 3};  // say, every shard restored or failed over since
  }
  CHECK(f.Take() == 0);  // asked to build on 1, but nothing needs it
  {
    absl::MutexLock lock(&f.mu);
    f.written_full = {2};  // a failover's new primary: that shard in full, the others on 2
  }
  CHECK(f.Take() == 2);
  CHECK(f.Take() == 3);
  CHECK(f.Take() == 0);  // 2 is full, 3 and 4 its increments
  CHECK(f.Asked() == std::vector<uint64_t>{0, 1, 2, 3, 0});
}

TEST_CASE("a previous checkpoint of another job or num_shards is no base",
          "[checkpoint][incremental]") {
  Fixture f(/*full_every=*/5, /*keep=*/10);
  const std::string old = f.dir + "/" + CheckpointFolderName(1);
  std::filesystem::create_directories(old);
  rpc::CheckpointManifest m;
  m.set_format(kCheckpointFormat);
  m.set_id(1);
  m.mutable_shard_map()->set_num_shards(4);  // the digest (0) is not this job's
  REQUIRE(WriteCheckpointManifest(old, m).ok());
  CHECK(f.Take() == 0);
  CHECK(f.Take() == 2);
}

TEST_CASE("retention keeps checkpoint_keep checkpoints and every base they need",
          "[checkpoint][incremental]") {
  Fixture f(/*full_every=*/3, /*keep=*/2);
  f.Take();  // 1 full
  f.Take();  // 2 on 1
  CHECK(f.Kept() == std::vector<uint64_t>{1, 2});
  f.Take();  // 3 on 2: keeps 2 and 3, and 1 for them
  CHECK(f.Kept() == std::vector<uint64_t>{1, 2, 3});
  f.Take();  // 4 full: keeps 3 and 4, and 3's chain
  CHECK(f.Kept() == std::vector<uint64_t>{1, 2, 3, 4});
  f.Take();  // 5 on 4: keeps 4 and 5; 1 to 3 are needed no more
  CHECK(f.Kept() == std::vector<uint64_t>{4, 5});
  for (uint64_t id : {1, 2, 3}) {
    CHECK_FALSE(std::filesystem::exists(f.dir + "/" + CheckpointFolderName(id)));
  }
  f.Take();  // 6 on 5
  CHECK(f.Kept() == std::vector<uint64_t>{4, 5, 6});
  f.Take();  // 7 full
  CHECK(f.Kept() == std::vector<uint64_t>{4, 5, 6, 7});
  f.Take();  // 8 on 7
  CHECK(f.Kept() == std::vector<uint64_t>{7, 8});
}

// A sync checkpoint that a server refused was retried under the same id (its folder is removed)
// and the same rendezvous key, which the workers had already answered, so the retry waited for
// states that never came while training ended (coordinator_restart_test, once in four runs).
TEST_CASE("a checkpoint retried after a refusal asks the workers under a new key",
          "[checkpoint][regression]") {
  const std::string dir = absl::StrCat(testing::TempDir(), "/checkpointer_retry");
  std::filesystem::remove_all(dir);
  absl::StatusOr<config::Job> job = ParseJob(
      absl::StrFormat(
          R"pb(name: "retry"
               tables { name: "emb" dim: 4 }
               training { mode: SYNC }
               cluster { num_servers: 1 num_workers: 1 num_shards: 2 checkpoint_dir: "%s" })pb",
          dir),
      "retry.pbtxt");
  REQUIRE(job.ok());
  CoordinatorOptions options;
  options.job = *job;
  options.dead_after = absl::Hours(1);
  std::unique_ptr<Coordinator> coordinator = Coordinator::Create(std::move(options)).value();
  REQUIRE(coordinator->Register(rpc::SERVER, "127.0.0.1:1", -1).ok());
  absl::StatusOr<rpc::RegisterResponse> worker = coordinator->Register(rpc::WORKER, "", 0);
  REQUIRE(worker.ok());

  // The fake server sees the notice as the worker's next clock report would, refuses the first
  // attempt (the boundary has passed) and, on the second, answers for the worker too. It runs on
  // the checkpointer's thread: it reports failures through its result, not Catch.
  std::vector<rpc::CheckpointNotice> notices;
  Checkpointer checkpointer(
      coordinator.get(),
      [&](const std::string&,
          const rpc::WriteCheckpointRequest& r) -> absl::StatusOr<rpc::WriteCheckpointResponse> {
        absl::StatusOr<rpc::ClockState> clocks = coordinator->ReportClock(worker->member_id(), 3);
        if (!clocks.ok()) return clocks.status();
        if (!clocks->has_checkpoint()) return absl::InternalError("no checkpoint notice");
        notices.push_back(clocks->checkpoint());
        if (notices.size() == 1) {
          return absl::FailedPreconditionError("step boundary 4 has passed");
        }
        rpc::CheckpointWorkerState state;
        state.set_rank(0);
        state.set_step(r.step());
        absl::Status put =
            coordinator->KvSet(absl::StrCat(notices.back().key(), 0), state.SerializeAsString());
        if (!put.ok()) return put;
        rpc::WriteCheckpointResponse response;
        for (uint32_t s : r.shards()) response.add_files()->set_shard(s);
        return response;
      });
  CHECK(absl::IsFailedPrecondition(checkpointer.Take(4).status()));
  absl::StatusOr<rpc::CheckpointResponse> retried = checkpointer.Take(5);
  INFO(retried.status().ToString());
  REQUIRE(retried.ok());
  REQUIRE(notices.size() == 2);
  CHECK(notices[0].id() == notices[1].id());  // the refused attempt's folder is gone
  CHECK(notices[0].key() != notices[1].key());
  CHECK(retried->step() == 5);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a restore asks the primary of every shard to replace it with the checkpoint's",
          "[checkpoint][restore]") {
  Fixture f(/*full_every=*/1, /*keep=*/3);
  absl::StatusOr<rpc::CheckpointResponse> taken = f.checkpointer->Take(-1);
  REQUIRE(taken.ok());
  const uint64_t map_version = f.coordinator->Status().shard_map().version();

  absl::StatusOr<rpc::RestoreCheckpointResponse> restored =
      f.checkpointer->Restore(taken->path(), absl::Seconds(1));
  INFO(restored.status().ToString());
  REQUIRE(restored.ok());
  CHECK(restored->step() == -1);
  {
    absl::MutexLock lock(&f.mu);
    REQUIRE(f.restores.size() == 1);
    CHECK(f.restores[0].path() == taken->path());
    CHECK(f.restores[0].header().map_version() == map_version);
    CHECK(std::vector<uint32_t>(f.restores[0].shards().begin(), f.restores[0].shards().end()) ==
          std::vector<uint32_t>{0, 1, 2, 3});
    f.restore_error = absl::UnavailableError("server down");
  }
  // A server's error is the restore's; a folder that holds no checkpoint asks no server.
  CHECK(f.checkpointer->Restore(taken->path(), absl::Seconds(1)).status().code() ==
        absl::StatusCode::kUnavailable);
  CHECK_FALSE(f.checkpointer->Restore(absl::StrCat(f.dir, "/none"), absl::Seconds(1)).ok());
  absl::MutexLock lock(&f.mu);
  CHECK(f.restores.size() == 2);
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

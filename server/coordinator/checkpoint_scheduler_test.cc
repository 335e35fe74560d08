#include "server/coordinator/checkpoint_scheduler.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint_catalog.h"
#include "common/job_config.h"
#include "tests/testing/eventually.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace coordinator {
namespace {

rpc::CheckpointRequest Step(int64_t step) {
  rpc::CheckpointRequest request;
  request.set_step(step);
  return request;
}

// A coordinator of one server and two workers whose checkpoints are written by a fake server
// that records the steps it is asked for.
struct Fixture {
  explicit Fixture(const std::string& mode, int every_steps, int every_seconds = 0) {
    static int fixtures = 0;
    const std::string dir = absl::StrFormat("%s/scheduler_%d", testing::TempDir(), ++fixtures);
    absl::StatusOr<config::Job> job =
        ParseJob(absl::StrFormat(R"pb(name: "sched"
                                      tables { name: "emb" dim: 4 }
                                      training { mode: %s }
                                      cluster {
                                        num_servers: 1
                                        num_workers: 2
                                        num_shards: 4
                                        checkpoint_dir: "%s"
                                        checkpoint_every_steps: %d
                                        checkpoint_every_seconds: %d
                                      })pb",
                                 mode, dir, every_steps, every_seconds),
                 "sched.pbtxt");
    REQUIRE(job.ok());
    CoordinatorOptions options;
    options.job = *job;
    options.dead_after = absl::Hours(1);  // no heartbeats here
    coordinator = std::move(Coordinator::Create(std::move(options))).value();
    checkpointer = std::make_unique<Checkpointer>(
        coordinator.get(),
        [this](const std::string&, const rpc::WriteCheckpointRequest& r)
            -> absl::StatusOr<rpc::WriteCheckpointResponse> {
          entered.fetch_add(1);
          if (block != nullptr) block->WaitForNotification();
          absl::MutexLock lock(&mu);
          steps.push_back(r.step());
          rpc::WriteCheckpointResponse response;
          for (uint32_t s : r.shards()) response.add_files()->set_shard(s);
          return response;
        });
    REQUIRE(coordinator->Register(rpc::SERVER, "127.0.0.1:1", -1).ok());
    for (int w = 0; w < 2; ++w) {
      workers.push_back(coordinator->Register(rpc::WORKER, "", -1).value().member_id());
    }
  }

  void Clock(int64_t clock) {
    for (uint32_t w : workers) REQUIRE(coordinator->ReportClock(w, clock).ok());
  }

  std::vector<int64_t> Steps() {
    absl::MutexLock lock(&mu);
    return steps;
  }

  // Sync jobs: the workers' side of a checkpoint. Puts every worker's state for the checkpoint the
  // clocks show, if any (as ps_worker does when its clock report shows it).
  void PutWorkerStates() {
    const rpc::ClockState clocks = coordinator->Clocks();
    if (!clocks.has_checkpoint()) return;
    for (int rank = 0; rank < 2; ++rank) {
      rpc::CheckpointWorkerState state;
      state.set_rank(rank);
      state.set_step(clocks.checkpoint().step());
      state.set_params(std::string(16, 'p'));
      REQUIRE(coordinator
                  ->KvSet(absl::StrCat(clocks.checkpoint().key(), rank), state.SerializeAsString())
                  .ok());
    }
  }

  // Waits until the fake servers were asked for `want`, answering the workers' part meanwhile.
  bool WaitSteps(const std::vector<int64_t>& want) {
    return testing::Eventually([&] {
      PutWorkerStates();
      return Steps() == want;
    });
  }

  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<Checkpointer> checkpointer;
  std::vector<uint32_t> workers;
  absl::Notification* block = nullptr;
  std::atomic<int> entered{0};  // calls of the fake server, blocked ones included
  absl::Mutex mu;
  std::vector<int64_t> steps ABSL_GUARDED_BY(mu);
};

TEST_CASE("sync jobs are checkpointed at every k-th step boundary, asked for two steps ahead",
          "[checkpoint][scheduler]") {
  Fixture f("SYNC", 3);
  CheckpointScheduler scheduler(f.coordinator.get(), f.checkpointer.get());
  f.Clock(0);
  f.Clock(1);  // boundary 3: every worker finished step 1
  REQUIRE(f.WaitSteps({3}));
  f.Clock(2);
  f.Clock(3);
  f.Clock(4);
  REQUIRE(f.WaitSteps({3, 6}));
  f.Clock(7);
  REQUIRE(f.WaitSteps({3, 6, 9}));
  REQUIRE(testing::Eventually([&] {
    f.PutWorkerStates();
    return scheduler.periodic_taken() == 3;
  }));
  CHECK(scheduler.periodic_failed() == 0);
  // Each holds both workers' state at its boundary.
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> list =
      ListCheckpoints(f.coordinator->job().cluster().checkpoint_dir());
  REQUIRE(list.ok());
  REQUIRE(list->size() == 3);
  for (const rpc::CheckpointManifest& m : *list) CHECK(m.workers_size() == 2);
  CHECK(!f.coordinator->Clocks().has_checkpoint());
}

TEST_CASE("a sync checkpoint fails clearly when a worker cannot give its state",
          "[checkpoint][scheduler]") {
  Fixture f("SYNC", 0);
  CheckpointScheduler scheduler(f.coordinator.get(), f.checkpointer.get());
  f.Clock(3);
  absl::Notification done;
  absl::StatusOr<rpc::CheckpointResponse> taken;
  scheduler.Request(Step(5), [&](absl::StatusOr<rpc::CheckpointResponse> r) {
    taken = std::move(r);
    done.Notify();
  });
  REQUIRE(testing::Eventually([&] { return f.coordinator->Clocks().has_checkpoint(); }));
  const std::string key = f.coordinator->Clocks().checkpoint().key();
  rpc::CheckpointWorkerState state;
  state.set_rank(0);
  state.set_step(5);
  REQUIRE(f.coordinator->KvSet(absl::StrCat(key, 0), state.SerializeAsString()).ok());
  REQUIRE(f.coordinator->KvSet(absl::StrCat(key, 1), "ERROR it was past step 5 already").ok());
  done.WaitForNotification();
  CHECK(taken.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(taken.status().message()),
             Catch::Contains("worker 1: it was past step 5 already"));
  CHECK(!f.coordinator->Clocks().has_checkpoint());
}

TEST_CASE(
    "other modes are checkpointed once the workers finished k more steps, skipping marks "
    "the clocks passed",
    "[checkpoint][scheduler]") {
  Fixture f("ASYNC", 2);
  CheckpointScheduler scheduler(f.coordinator.get(), f.checkpointer.get());
  f.Clock(1);
  REQUIRE(f.WaitSteps({-1}));
  // Armed for mark 4 (every worker done with step 3).
  REQUIRE(testing::Eventually([&] { return f.coordinator->NumPendingWaits() == 1; }));
  f.Clock(10);  // marks 4 to 10 passed at once: one checkpoint, then the next is 12
  REQUIRE(f.WaitSteps({-1, -1}));
  REQUIRE(testing::Eventually([&] { return f.coordinator->NumPendingWaits() == 1; }));
  CHECK(scheduler.periodic_taken() == 2);
  f.Clock(10);
  CHECK(f.Steps().size() == 2);
  f.Clock(11);
  REQUIRE(f.WaitSteps({-1, -1, -1}));
}

TEST_CASE("checkpoint_every_seconds checkpoints while the cluster runs",
          "[checkpoint][scheduler]") {
  Fixture f("ASYNC", 0, 1);
  CheckpointScheduler scheduler(f.coordinator.get(), f.checkpointer.get());
  REQUIRE(testing::Eventually([&] { return f.Steps().size() >= 2; }, absl::Seconds(20)));
}

TEST_CASE("one checkpoint at a time: a request meanwhile is refused, and Stop ends a waiting one",
          "[checkpoint][scheduler]") {
  Fixture f("ASYNC", 0);
  absl::Notification release;
  f.block = &release;
  CheckpointScheduler scheduler(f.coordinator.get(), f.checkpointer.get());
  absl::Notification first_done;
  absl::StatusOr<rpc::CheckpointResponse> first;
  scheduler.Request(Step(-1), [&](absl::StatusOr<rpc::CheckpointResponse> r) {
    first = std::move(r);
    first_done.Notify();
  });
  absl::Status second;
  scheduler.Request(Step(-1),
                    [&](absl::StatusOr<rpc::CheckpointResponse> r) { second = r.status(); });
  CHECK(second.code() == absl::StatusCode::kFailedPrecondition);
  release.Notify();
  first_done.WaitForNotification();
  REQUIRE(first.ok());
  CHECK(first->id() == 1);
  scheduler.Stop();
  scheduler.Request(Step(-1),
                    [&](absl::StatusOr<rpc::CheckpointResponse> r) { second = r.status(); });
  CHECK(second.code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("a request waits for the periodic checkpoint under way", "[checkpoint][scheduler]") {
  Fixture f("ASYNC", 1);
  absl::Notification release;
  f.block = &release;
  CheckpointScheduler scheduler(f.coordinator.get(), f.checkpointer.get());
  f.Clock(0);  // the periodic checkpoint of mark 1 starts, and blocks in the fake server
  REQUIRE(testing::Eventually([&] { return f.entered.load() == 1; }));
  absl::Notification done;
  absl::StatusOr<rpc::CheckpointResponse> requested;
  scheduler.Request(Step(-1), [&](absl::StatusOr<rpc::CheckpointResponse> r) {
    requested = std::move(r);
    done.Notify();
  });
  release.Notify();
  done.WaitForNotification();
  REQUIRE(requested.ok());
  CHECK(requested->id() == 2);  // after the periodic one
  CHECK(f.Steps().size() == 2);
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

#include "server/step_barrier.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"

namespace ps {
namespace server {
namespace {

StepBarrier::Options SyncOptions(size_t quorum_workers,
                                 absl::Duration timeout = absl::InfiniteDuration()) {
  StepBarrier::Options options;
  options.sync = true;
  options.quorum_workers = quorum_workers;
  options.quorum_timeout = timeout;
  return options;
}

// A barrier whose apply function records the steps it was asked to apply, in order.
struct Recorded {
  explicit Recorded(const StepBarrier::Options& options)
      : barrier(options, [this](int64_t step) {
          barrier.mu()->AssertHeld();
          applied.push_back(step);
        }) {}
  std::vector<int64_t> applied;  // written under barrier.mu()
  StepBarrier barrier;
};

TEST_CASE("the barrier's options follow the job's quorum and timeout", "[server][step_barrier]") {
  const auto [quorum, workers, expected] = GENERATE(table<float, uint32_t, size_t>(
      {{1.0f, 3, 3}, {0.67f, 3, 2}, {0.5f, 2, 1}, {0.1f, 3, 1}, {0.0f, 4, 1}}));
  config::Job job;
  job.mutable_training()->set_mode(config::Training::SYNC);
  job.mutable_training()->set_sync_quorum(quorum);
  job.mutable_training()->set_sync_timeout_ms(250);
  job.mutable_cluster()->set_num_workers(workers);
  const StepBarrier::Options options = StepBarrier::ForJob(job);
  CHECK(options.sync);
  CHECK(options.quorum_workers == expected);
  CHECK(options.quorum_timeout ==
        (quorum < 1.0f ? absl::Milliseconds(250) : absl::InfiniteDuration()));
  job.mutable_training()->set_mode(config::Training::ASYNC);
  CHECK_FALSE(StepBarrier::ForJob(job).sync);
}

TEST_CASE("outside sync mode the barrier does nothing", "[server][step_barrier]") {
  Recorded r(StepBarrier::Options{});
  CHECK(*r.barrier.EndStep(1, 0) == -1);
  CHECK(*r.barrier.EndStep(0, 7) == -1);
  CHECK(r.barrier.CheckPullStep(0).ok());
  bool ran = false;
  r.barrier.RunWhenApplied(5, [&](absl::Status s) { ran = s.ok(); });
  CHECK(ran);
  r.barrier.StartAt(10);
  CHECK(r.barrier.applied_step() == -1);
  {
    absl::ReaderMutexLock lock(r.barrier.mu());
    CHECK(*r.barrier.AdmitPushLocked(3));
  }
  CHECK(r.applied.empty());
}

TEST_CASE("a step is applied once, when the quorum of workers ended it",
          "[server][step_barrier][sync]") {
  Recorded r(SyncOptions(2));
  std::vector<int64_t> released;  // the waits run on the EndStep's thread, in step order
  for (int64_t step : {1, 0, 0}) {
    r.barrier.RunWhenApplied(step, [&released, step](absl::Status s) {
      CHECK(s.ok());
      released.push_back(step);
    });
  }
  {
    absl::ReaderMutexLock lock(r.barrier.mu());
    CHECK(*r.barrier.AdmitPushLocked(0));  // the pending step
    CHECK(r.barrier.AdmitPushLocked(1).status().code() == absl::StatusCode::kUnavailable);
  }
  CHECK(*r.barrier.EndStep(1, 0) == -1);
  CHECK(*r.barrier.EndStep(1, 0) == -1);  // the same worker twice is one worker
  CHECK(r.applied.empty());
  CHECK(r.barrier.CheckPullStep(0).ok());
  CHECK(*r.barrier.EndStep(2, 0) == 0);
  CHECK(r.applied == std::vector<int64_t>{0});
  CHECK(released == std::vector<int64_t>{0, 0});
  // Ending an applied step again is a no-op; a future step is refused; worker 0 is no worker.
  CHECK(*r.barrier.EndStep(1, 0) == 0);
  CHECK(r.barrier.EndStep(1, 2).status().code() == absl::StatusCode::kUnavailable);
  CHECK(r.barrier.EndStep(0, 1).status().code() == absl::StatusCode::kInvalidArgument);
  // A straggler's pull and push of the applied step.
  CHECK(r.barrier.CheckPullStep(0).code() == absl::StatusCode::kAborted);
  CHECK(r.barrier.CheckPullStep(1).ok());
  CHECK(r.barrier.CheckPullStep(-1).ok());
  {
    absl::ReaderMutexLock lock(r.barrier.mu());
    CHECK_FALSE(*r.barrier.AdmitPushLocked(0));
    CHECK(*r.barrier.AdmitPushLocked(1));
  }
  // A wait for an applied step runs at once.
  bool ran = false;
  r.barrier.RunWhenApplied(0, [&](absl::Status s) { ran = s.ok(); });
  CHECK(ran);
  CHECK(*r.barrier.EndStep(2, 1) == 0);
  CHECK(*r.barrier.EndStep(1, 1) == 1);
  CHECK(r.applied == std::vector<int64_t>{0, 1});
  CHECK(released == std::vector<int64_t>{0, 0, 1});
}

TEST_CASE("workers ending steps on threads of their own apply every step once, in order",
          "[server][step_barrier][sync]") {
  constexpr int kWorkers = 4;
  constexpr int64_t kSteps = 200;
  Recorded r(SyncOptions(kWorkers));
  std::vector<absl::Status> errors(kWorkers);  // checked here: Catch2 is not thread-safe
  std::vector<std::thread> workers;
  for (uint32_t w = 1; w <= kWorkers; ++w) {
    workers.emplace_back([&r, &errors, w] {
      for (int64_t step = 0; step < kSteps; ++step) {
        absl::StatusOr<int64_t> ended = r.barrier.EndStep(w, step);
        if (!ended.ok()) {
          errors[w - 1] = ended.status();
          return;
        }
        // As a sync worker does before its next step's pull.
        absl::Notification applied;
        r.barrier.RunWhenApplied(step, [&applied](absl::Status) { applied.Notify(); });
        applied.WaitForNotification();
      }
    });
  }
  for (std::thread& t : workers) t.join();
  for (const absl::Status& e : errors) CHECK(e.ok());
  std::vector<int64_t> expected(kSteps);
  for (int64_t s = 0; s < kSteps; ++s) expected[s] = s;
  CHECK(r.applied == expected);
  CHECK(r.barrier.applied_step() == kSteps - 1);
}

TEST_CASE("the quorum timer applies a step its timeout has passed",
          "[server][step_barrier][sync]") {
  Recorded r(SyncOptions(3, absl::Milliseconds(20)));
  absl::Notification applied;
  absl::Status seen;  // checked here: the wait runs on the timer's thread
  r.barrier.RunWhenApplied(0, [&](absl::Status s) {
    seen = s;
    applied.Notify();
  });
  CHECK(*r.barrier.EndStep(1, 0) == -1);
  REQUIRE(applied.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(seen.ok());
  CHECK(r.barrier.applied_step() == 0);
  // The next step's timeout starts with its first end.
  absl::Notification next;
  r.barrier.RunWhenApplied(1, [&](absl::Status) { next.Notify(); });
  CHECK(*r.barrier.EndStep(2, 1) == 0);
  REQUIRE(next.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(r.barrier.applied_step() == 1);
}

TEST_CASE("shutdown ends the waits with UNAVAILABLE and stops the quorum timer",
          "[server][step_barrier][sync]") {
  const absl::Duration timeout = GENERATE(absl::InfiniteDuration(), absl::Hours(1));
  auto r = std::make_unique<Recorded>(SyncOptions(2, timeout));
  absl::Status seen;
  r->barrier.RunWhenApplied(3, [&](absl::Status s) { seen = s; });
  // A pending step whose timer is armed (an hour away) does not hold the shutdown back.
  CHECK(*r->barrier.EndStep(1, 0) == -1);
  r->barrier.Shutdown();
  CHECK(seen.code() == absl::StatusCode::kUnavailable);
  absl::Status later;
  r->barrier.RunWhenApplied(0, [&](absl::Status s) { later = s; });
  CHECK(later.code() == absl::StatusCode::kUnavailable);
  r->barrier.Shutdown();  // idempotent
  r.reset();              // and the destructor's, after it
  CHECK(seen.code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("a restored barrier goes on from the checkpoint's step", "[server][step_barrier][sync]") {
  Recorded r(SyncOptions(1));
  r.barrier.StartAt(0);  // nothing to skip
  CHECK(r.barrier.applied_step() == -1);
  r.barrier.StartAt(5);
  CHECK(r.barrier.applied_step() == 4);
  r.barrier.StartAt(2);  // never back
  CHECK(r.barrier.applied_step() == 4);
  CHECK(r.barrier.EndStep(1, 3).value() == 4);  // applied already: a no-op
  CHECK(*r.barrier.EndStep(1, 5) == 5);
  CHECK(r.applied == std::vector<int64_t>{5});
}

}  // namespace
}  // namespace server
}  // namespace ps

// The consistency protocol of one worker around its pulls and pushes, as the job's mode asks
// (the table of modes is in worker/README.md):
//   SYNC               the servers hold a pull of step t until step t - 1 is applied, and apply a
//                      step when the workers have ended it: AfterPush ends the step.
//   BOUNDED_STALENESS  BeforePull(t) waits until every worker has finished step t - s - 1 (the
//                      coordinator's clocks); AfterPush reports the step finished. With a row
//                      cache (training.row_cache, refresh_steps r <= s) the wait tightens to
//                      t - (s - r) - 1: a row the cache serves at step t was pulled for a step
//                      t0 >= t - r, after every worker finished t0 - (s - r) - 1 >= t - s - 1,
//                      so it holds every push the bound promises.
//   ASYNC              nothing waits.
// In SYNC and ASYNC, AfterPush also reports the step finished to the coordinator, which times
// checkpoint_every_steps by the clocks: without waiting for the answer, except in SYNC jobs with
// a checkpoint_dir, where the answer may ask for the worker's state (checkpoint_notice()).
#ifndef PS_WORKER_STEP_SYNC_H_
#define PS_WORKER_STEP_SYNC_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "proto/job.pb.h"

namespace ps {
namespace worker {

// A StepSync runs the protocol for one worker. Thread-compatible. `client` and `coordinator` are
// not owned and outlive it. `coordinator` may be null for training in one process (an in-process
// store, no cluster): then no clock is reported, and what needs the coordinator's clocks
// (BOUNDED_STALENESS, a SYNC job's checkpoints) fails with FAILED_PRECONDITION.
class StepSync {
 public:
  StepSync(const config::Job& job, Client* client, CoordinatorClient* coordinator,
           uint32_t member_id, absl::Duration wait_timeout = absl::Minutes(10));

  // Call before pulling the rows of `step`. BOUNDED_STALENESS: waits (up to wait_timeout, then
  // DEADLINE_EXCEEDED) until every worker finished step - pull_staleness() - 1. Otherwise OK at
  // once.
  absl::Status BeforePull(int64_t step);

  // Call once this worker's pushes of `step` are acknowledged. Returns the step to continue
  // with: step + 1, or later in SYNC mode when the cluster applied steps without this worker (a
  // straggler outside the quorum). Errors of the client or the coordinator.
  absl::StatusOr<int64_t> AfterPush(int64_t step);

  // Whether the pull of step t + 1 may be issued before the push of step t is acknowledged:
  // ASYNC, and BOUNDED_STALENESS with pull_staleness() >= 2 (the pull of t + 1 needs every
  // worker done with t - pull_staleness(), and this worker reports t - 1 only after the push of
  // t - 1).
  bool can_prefetch() const;

  config::Training::Mode mode() const { return mode_; }
  // BOUNDED_STALENESS: the staleness a pull from the servers may have, training.staleness less
  // the row cache's refresh_steps (0 without a cache). 0 in the other modes.
  int64_t pull_staleness() const { return pull_staleness_; }

  // SYNC jobs with a checkpoint_dir: the checkpoint whose workers' state the latest clock answer
  // asked for (ClockState.checkpoint); nullopt otherwise.
  const std::optional<rpc::CheckpointNotice>& checkpoint_notice() const { return notice_; }

  // Reports `step` finished again, to refresh checkpoint_notice() once the worker is done.
  absl::Status Refresh(int64_t step);

 private:
  // FAILED_PRECONDITION without a coordinator.
  absl::Status NeedCoordinator() const;
  // Reports the worker's clock without waiting; nothing without a coordinator.
  void ReportClockAsync(int64_t step);

  Client* const client_;
  CoordinatorClient* const coordinator_;
  const uint32_t member_id_;
  const config::Training::Mode mode_;
  const int64_t pull_staleness_;
  const absl::Duration wait_timeout_;
  const bool checkpoints_;  // SYNC with a checkpoint_dir
  std::optional<rpc::CheckpointNotice> notice_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_STEP_SYNC_H_

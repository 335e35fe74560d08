// What a server knows of its workers' step clocks: per worker, the newest step it has pushed
// here, and how stale the pulls were (how many steps of some worker's pushes a pull at step t
// could be missing), reported in ServerStatus.
#ifndef PS_SERVER_STEP_CLOCKS_H_
#define PS_SERVER_STEP_CLOCKS_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps.pb.h"

namespace ps {
namespace server {

// StepClocks models the step clocks of a job's workers as one server sees them through the
// pushes and pulls it serves. Thread-safe.
class StepClocks {
 public:
  // `num_workers`: the job's workers (a worker not heard from yet has pushed nothing). `sync`:
  // sync training, where a pull at step t has every earlier step (staleness 0).
  StepClocks(uint32_t num_workers, bool sync) : num_workers_(num_workers), sync_(sync) {}

  StepClocks(const StepClocks&) = delete;
  StepClocks& operator=(const StepClocks&) = delete;

  // `worker_id` pushed at step `step`. A negative step (no clock) is ignored.
  void RecordPush(uint32_t worker_id, int64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // A pull at step `step`: counted, with what it could miss. A negative step is ignored.
  void RecordPull(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // Sets status's step_pulls, mean_pull_staleness (0 without pulls), max_pull_staleness and
  // last_pull_oldest_missing_step (-1 before any pull); nothing else of it changes.
  void FillStatus(rpc::ServerStatus* status) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Constant after construction.
  const uint32_t num_workers_;
  const bool sync_;

  mutable absl::Mutex mu_;
  // Per worker, the newest step it has pushed.
  absl::flat_hash_map<uint32_t, int64_t> pushed_step_ ABSL_GUARDED_BY(mu_);
  uint64_t step_pulls_ ABSL_GUARDED_BY(mu_) = 0;
  double staleness_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t staleness_max_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_oldest_missing_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_STEP_CLOCKS_H_

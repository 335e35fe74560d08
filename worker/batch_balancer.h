// Straggler-aware batch sizes for the modes that apply pushes on arrival (bounded staleness and
// async): each step's samples (workers x batch_size) are split among the workers in proportion
// to their measured speed, so a slow worker takes a smaller part of every step instead of holding
// the others back. This is load-balanced BSP (Chen et al., "Semi-Dynamic Load Balancing", SoCC
// 2020) applied to the step clocks of bounded staleness: the clocks of all workers advance at the
// same rate again, so the staleness bound costs no waiting, and the fast workers' spare speed
// goes into larger batches.
//
// The protocol, the same on every worker:
//   Record(samples, busy) after each step;
//   at a point every worker reaches in the same order (the trainer uses its dense collectives),
//   Report(...) into a zeroed vector of ExchangeFloats(), an AllReduce sum of it, then Update()
//   with the sum. Every worker computes the same shares from the same sum.
//
// Speed is samples over busy time: a step's time less its waits on other workers (the staleness
// bound, collectives). A worker's step costs a fixed part plus a part per sample, and the shares
// move towards equal busy step times: share' = mix of share and the part proportional to speed;
// with the same fixed part on every worker that converges to equal step times.
#ifndef PS_WORKER_BATCH_BALANCER_H_
#define PS_WORKER_BATCH_BALANCER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ps {
namespace worker {

// A BatchBalancer holds every worker's share of a step's samples. Thread-compatible.
class BatchBalancer {
 public:
  // `world` workers of `batch_size` samples each by default: the step's total is world *
  // batch_size and every share starts at batch_size. Both must be >= 1.
  BatchBalancer(int world, int batch_size);

  // Floats of the vector exchanged by Report() and Update(): 2 per worker.
  size_t ExchangeFloats() const { return 2 * static_cast<size_t>(world_); }

  // The current share of `rank`, in [1, world * batch_size]; the shares sum to the total.
  int batch(int rank) const { return shares_[rank]; }
  int total() const { return total_; }

  // Adds one step of this worker since the last Update(): `samples` trained in `busy` time.
  void Record(int samples, absl::Duration busy);

  // Writes this worker's figures since the last Update() into its slots of `out`
  // (ExchangeFloats() long, zero elsewhere: the other workers fill their slots, so an AllReduce
  // sum gives everyone every worker's figures exactly).
  void Report(int rank, absl::Span<float> out) const;

  // Recomputes every share from the summed figures of every worker and starts a new interval:
  // the first time every worker is measured, the shares become proportional to the speeds;
  // after that each update moves speeds and shares halfway towards the new measure. A worker
  // that reported no busy time keeps the speed it had. Returns INVALID_ARGUMENT when
  // `summed` has the wrong length or a negative or non-finite figure; the shares are unchanged.
  absl::Status Update(absl::Span<const float> summed);

 private:
  const int world_;
  const int total_;

  std::vector<int> shares_;
  // Samples per millisecond of busy time, per worker; 0 until measured.
  std::vector<double> speed_;
  int64_t samples_ = 0;
  double busy_ms_ = 0;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_BATCH_BALANCER_H_

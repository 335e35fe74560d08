// Where a worker's step time goes: its wall time cut into parts (issue 38), the figure every other
// speed-up is measured by.
//
// The parts, as the trainer measures them (worker/trainer.cc):
//   read       reading and parsing the batch (BatchReader::Next), the wait for the reader included
//   pull       waiting for the batch's rows and pooling them (FinishPull), and issuing the pulls
//              (deduping the keys); in SYNC a pull waits on the servers until every worker ended
//              the previous step, and that wait counts here: the worker cannot tell it apart
//   copy       host-to-device copies and back (GpuModel::last_copy_time), only where the backend
//              has them: absent on the CPU (ProgressReporter::Options::copy_measured)
//   compute    the model's forward and backward pass, and the dense optimizer
//   push       spreading the embedding gradients by key, issuing the pushes, waiting for their
//              acknowledgements and ending the step (StepSync::AfterPush); in the pipelined modes
//              the wait for the previous step's push, which is done here
//   allreduce  the dense collective: the gradients' AllReduce (the wait for the other workers to
//              reach it included), local SGD's averaging
//   wait       waiting for the other workers outside the dense collective: StepSync::BeforePull
//              (the staleness bound), the collectives of steps a straggler skipped, the batch
//              balancer's exchange of speeds
//   other      the rest of the wall time: checkpoints at step boundaries, held-out evaluations and
//              the dense master copy's push during training, progress reports, an induced
//              straggler's sleep (TrainerOptions::slowdown), and whatever was not measured
//
// Overlaps: in the pipelined modes (StepPipeline::pipelined) the next batch's pull runs in the
// background while this step computes; only the time the step's thread spends in a call counts,
// so a pull that completed in the background costs the next step only its pooling. The parts never
// overlap one another: they are consecutive intervals of one clock (a lap timer, each part ending
// where the next begins), with the parts measured inside an interval (Measure, Attribute) taken
// out of it, so they add up to the wall time exactly.
#ifndef PS_WORKER_STEP_BREAKDOWN_H_
#define PS_WORKER_STEP_BREAKDOWN_H_

#include <array>
#include <functional>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps {
namespace worker {

enum class StepPart : int {
  kRead = 0,
  kPull,
  kCopy,
  kCompute,
  kPush,
  kAllReduce,
  kWait,
  kOther,
};
inline constexpr int kNumStepParts = 8;

// "read", "pull", "copy", "compute", "push", "allreduce", "wait", "other": the names in progress
// lines, metrics and RESULT.
const char* StepPartName(StepPart part);

// The time of one or more steps by part, and their wall time, which the parts add up to.
struct StepTimes {
  std::array<absl::Duration, kNumStepParts> parts{};
  absl::Duration total;

  absl::Duration& operator[](StepPart part) { return parts[static_cast<int>(part)]; }
  absl::Duration operator[](StepPart part) const { return parts[static_cast<int>(part)]; }
  StepTimes& operator+=(const StepTimes& other);
};

// A StepBreakdown measures a thread's wall time as consecutive laps, each given to one part, with
// the calls measured inside a lap given to their own parts. Thread-compatible: one thread (the
// step's) drives it.
class StepBreakdown {
 public:
  // Where the time comes from: absl::Now by default, a fake clock in tests. Must not go back.
  using Clock = std::function<absl::Time()>;

  explicit StepBreakdown(Clock clock = [] { return absl::Now(); });

  StepBreakdown(const StepBreakdown&) = delete;
  StepBreakdown& operator=(const StepBreakdown&) = delete;

  // Starts the first lap now, with nothing measured yet.
  void Start();

  // Ends the current lap now and starts the next: its time, less what Measure and Attribute gave
  // other parts during it, goes to `part`. Must not be called inside Measure's `fn` (crashes).
  void Lap(StepPart part);

  // Runs `fn` (which returns a value) and gives its time, less what nested Measures and
  // Attributes gave other parts during it, to `part`, out of the enclosing lap or Measure.
  // Returns what `fn` returns.
  template <typename Fn>
  auto Measure(StepPart part, Fn&& fn) {
    const Segment outer = BeginMeasure();
    auto result = std::forward<Fn>(fn)();
    EndMeasure(part, outer);
    return result;
  }

  // Gives `time`, measured elsewhere within the current lap or Measure, to `part`, out of that lap
  // or Measure; at most what is left of it so far (so no part goes negative).
  void Attribute(StepPart part, absl::Duration time);

  // The laps ended since the last Take (or Start), and starts again from zero. Called between
  // laps (right after Lap) its parts add up to its total exactly.
  StepTimes Take();

 private:
  // The start of the interval being measured and what was given away from it so far.
  struct Segment {
    absl::Time start;
    absl::Duration given;
  };

  Segment BeginMeasure();
  void EndMeasure(StepPart part, Segment outer);

  const Clock clock_;
  Segment current_;
  int depth_ = 0;  // Measures under way
  StepTimes times_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_STEP_BREAKDOWN_H_

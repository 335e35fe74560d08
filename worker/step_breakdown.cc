#include "worker/step_breakdown.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace ps {
namespace worker {

const char* StepPartName(StepPart part) {
  switch (part) {
    case StepPart::kRead:
      return "read";
    case StepPart::kPull:
      return "pull";
    case StepPart::kCopy:
      return "copy";
    case StepPart::kCompute:
      return "compute";
    case StepPart::kPush:
      return "push";
    case StepPart::kAllReduce:
      return "allreduce";
    case StepPart::kWait:
      return "wait";
    case StepPart::kOther:
      return "other";
  }
  return "?";
}

StepTimes& StepTimes::operator+=(const StepTimes& other) {
  for (int i = 0; i < kNumStepParts; ++i) parts[i] += other.parts[i];
  total += other.total;
  return *this;
}

StepBreakdown::StepBreakdown(Clock clock) : clock_(std::move(clock)) { current_.start = clock_(); }

void StepBreakdown::Start() {
  current_ = Segment{clock_(), absl::ZeroDuration()};
  times_ = StepTimes();
}

void StepBreakdown::Lap(StepPart part) {
  if (depth_ != 0) {
    std::fprintf(stderr, "StepBreakdown::Lap inside Measure\n");
    std::abort();
  }
  const absl::Time now = clock_();
  const absl::Duration span = now - current_.start;
  times_[part] += span - current_.given;
  times_.total += span;
  current_ = Segment{now, absl::ZeroDuration()};
}

void StepBreakdown::Attribute(StepPart part, absl::Duration time) {
  const absl::Duration left = (clock_() - current_.start) - current_.given;
  time = std::clamp(time, absl::ZeroDuration(), std::max(left, absl::ZeroDuration()));
  times_[part] += time;
  current_.given += time;
}

StepTimes StepBreakdown::Take() { return std::exchange(times_, StepTimes()); }

StepBreakdown::Segment StepBreakdown::BeginMeasure() {
  ++depth_;
  return std::exchange(current_, Segment{clock_(), absl::ZeroDuration()});
}

void StepBreakdown::EndMeasure(StepPart part, Segment outer) {
  const absl::Duration span = clock_() - current_.start;
  times_[part] += span - current_.given;
  current_ = Segment{outer.start, outer.given + span};
  --depth_;
}

}  // namespace worker
}  // namespace ps

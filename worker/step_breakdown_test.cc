#include "worker/step_breakdown.h"

#include <catch2/catch.hpp>
#include <string>

#include "absl/status/status.h"

namespace ps {
namespace worker {
namespace {

// A clock that moves only when the test moves it.
struct FakeClock {
  absl::Time now = absl::UnixEpoch() + absl::Hours(1);
  StepBreakdown::Clock clock() {
    return [this] { return now; };
  }
  void Advance(absl::Duration d) { now += d; }
};

absl::Duration Ms(int64_t ms) { return absl::Milliseconds(ms); }

absl::Duration SumOfParts(const StepTimes& t) {
  absl::Duration sum;
  for (const absl::Duration part : t.parts) sum += part;
  return sum;
}

TEST_CASE("StepBreakdown gives each lap to its part, and the parts add up to the wall time",
          "[worker][step_breakdown]") {
  FakeClock fake;
  StepBreakdown breakdown(fake.clock());
  breakdown.Start();
  fake.Advance(Ms(3));
  breakdown.Lap(StepPart::kPull);
  fake.Advance(Ms(10));
  breakdown.Lap(StepPart::kCompute);
  fake.Advance(Ms(2));
  breakdown.Lap(StepPart::kPush);
  fake.Advance(Ms(1));
  breakdown.Lap(StepPart::kPush);
  const StepTimes t = breakdown.Take();
  CHECK(t[StepPart::kPull] == Ms(3));
  CHECK(t[StepPart::kCompute] == Ms(10));
  CHECK(t[StepPart::kPush] == Ms(3));
  CHECK(t[StepPart::kRead] == absl::ZeroDuration());
  CHECK(t.total == Ms(16));
  CHECK(SumOfParts(t) == t.total);

  // Take starts again from zero, and the next lap starts where the last one ended.
  CHECK(breakdown.Take().total == absl::ZeroDuration());
  fake.Advance(Ms(4));
  breakdown.Lap(StepPart::kOther);
  const StepTimes next = breakdown.Take();
  CHECK(next[StepPart::kOther] == Ms(4));
  CHECK(next.total == Ms(4));
}

TEST_CASE("StepBreakdown takes what Measure and Attribute measured out of the enclosing lap",
          "[worker][step_breakdown]") {
  FakeClock fake;
  StepBreakdown breakdown(fake.clock());
  breakdown.Start();
  fake.Advance(Ms(1));  // issuing the pull
  // A read of 5 ms inside the lap, and within it a wait of 2 ms for the reader's source.
  const absl::Status read = breakdown.Measure(StepPart::kRead, [&] {
    fake.Advance(Ms(1));
    const int waited = breakdown.Measure(StepPart::kWait, [&] {
      fake.Advance(Ms(2));
      return 7;
    });
    CHECK(waited == 7);
    fake.Advance(Ms(2));
    return absl::DataLossError("bad line");
  });
  CHECK(read.code() == absl::StatusCode::kDataLoss);  // what fn returned, whatever it is
  fake.Advance(Ms(4));
  breakdown.Attribute(StepPart::kWait, Ms(3));  // a wait measured by someone else
  breakdown.Lap(StepPart::kPull);
  const StepTimes t = breakdown.Take();
  CHECK(t[StepPart::kRead] == Ms(3));
  CHECK(t[StepPart::kWait] == Ms(5));
  CHECK(t[StepPart::kPull] == Ms(2));
  CHECK(t.total == Ms(10));
  CHECK(SumOfParts(t) == t.total);
}

TEST_CASE("StepBreakdown::Attribute never gives away more than the lap has left",
          "[worker][step_breakdown]") {
  FakeClock fake;
  StepBreakdown breakdown(fake.clock());
  breakdown.Start();
  fake.Advance(Ms(4));
  breakdown.Attribute(StepPart::kWait, Ms(3));
  breakdown.Attribute(StepPart::kCopy, Ms(3));   // only 1 ms is left
  breakdown.Attribute(StepPart::kCopy, -Ms(3));  // nothing
  breakdown.Lap(StepPart::kCompute);
  const StepTimes t = breakdown.Take();
  CHECK(t[StepPart::kWait] == Ms(3));
  CHECK(t[StepPart::kCopy] == Ms(1));
  CHECK(t[StepPart::kCompute] == absl::ZeroDuration());
  CHECK(t.total == Ms(4));
  CHECK(SumOfParts(t) == t.total);
}

TEST_CASE("StepBreakdown on the real clock: the parts add up to the wall time exactly",
          "[worker][step_breakdown]") {
  StepBreakdown breakdown;
  const absl::Time before = absl::Now();
  breakdown.Start();
  volatile double sink = 0;
  for (int step = 0; step < 50; ++step) {
    breakdown.Measure(StepPart::kRead, [&] {
      for (int i = 0; i < 1000; ++i) sink = sink + i;
      return 0;
    });
    breakdown.Lap(StepPart::kPull);
    for (int i = 0; i < 1000; ++i) sink = sink + i;
    breakdown.Lap(StepPart::kCompute);
  }
  const StepTimes t = breakdown.Take();
  CHECK(t.total <= absl::Now() - before);
  CHECK(SumOfParts(t) == t.total);
  for (const absl::Duration part : t.parts) CHECK(part >= absl::ZeroDuration());
}

TEST_CASE("StepTimes add up part by part, and the parts have their names",
          "[worker][step_breakdown]") {
  StepTimes a;
  a[StepPart::kPush] = Ms(2);
  a.total = Ms(2);
  StepTimes b;
  b[StepPart::kPush] = Ms(1);
  b[StepPart::kOther] = Ms(4);
  b.total = Ms(5);
  a += b;
  CHECK(a[StepPart::kPush] == Ms(3));
  CHECK(a[StepPart::kOther] == Ms(4));
  CHECK(a.total == Ms(7));
  std::string names;
  for (int i = 0; i < kNumStepParts; ++i) {
    names += StepPartName(static_cast<StepPart>(i));
    names += ' ';
  }
  CHECK(names == "read pull copy compute push allreduce wait other ");
}

}  // namespace
}  // namespace worker
}  // namespace ps

#include "tests/testing/measure.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

namespace ps {
namespace testing {
namespace {

TEST_CASE("a process's resident set is read, and 0 for one that does not exist", "[measure]") {
  const uint64_t own = ResidentBytesOf(getpid());
  CHECK(own > 1024 * 1024);
  CHECK(own < uint64_t{64} << 30);
  CHECK(ResidentBytesOf(0x7FFFFFF0) == 0);
}

TEST_CASE("a process's CPU seconds grow as it works, and are -1 for one that does not exist",
          "[measure]") {
  const double before = CpuSecondsOf(getpid());
  REQUIRE(before >= 0);
  // Work until the kernel's clock ticks have counted some of it (a tick is 10 ms at most).
  volatile uint64_t sink = 0;
  double after = before;
  for (uint64_t i = 0; after <= before && i < (uint64_t{1} << 36); ++i) {
    sink = sink + i * i;
    if ((i & 0xFFFFF) == 0) after = CpuSecondsOf(getpid());
  }
  CHECK(after > before);
  CHECK(after < before + 60);
  CHECK(CpuSecondsOf(0x7FFFFFF0) == -1);
}

TEST_CASE("percentiles are the nearest rank, rounded half up", "[measure]") {
  CHECK(Percentile({}, 0.5) == 0);
  CHECK(Percentile({3, 1, 2}, 0.5) == 2);
  CHECK(Percentile({3, 1, 2}, 0.0) == 1);
  CHECK(Percentile({3, 1, 2}, 1.0) == 3);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  CHECK(Percentile(v, 0.99) == 99);
  CHECK(Percentile(v, 0.5) == 51);
}

}  // namespace
}  // namespace testing
}  // namespace ps

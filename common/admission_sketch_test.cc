#include "common/admission_sketch.h"

#include <cstdint>
#include <random>
#include <vector>

#include "catch2/catch.hpp"

namespace ps {
namespace {

TEST_CASE("an id is admitted exactly at its min_count-th sighting", "[admission_sketch]") {
  const uint32_t min_count = GENERATE(1u, 2u, 3u, 8u, 15u);
  AdmissionOptions options;
  options.min_count = min_count;
  options.width = 1 << 12;
  AdmissionSketch sketch(options);
  for (uint64_t id = 1; id <= 50; ++id) {
    for (uint32_t seen = 1; seen <= min_count; ++seen) {
      CHECK(sketch.Admit(id) == (seen >= min_count));
    }
  }
}

TEST_CASE("the estimate never undercounts and saturates at 15", "[admission_sketch]") {
  AdmissionOptions options;
  options.width = 1 << 10;
  AdmissionSketch sketch(options);
  std::mt19937_64 rng(7);
  std::vector<uint32_t> counts(300, 0);
  // Fewer sightings than the width: no aging.
  for (int i = 0; i < 1000; ++i) {
    const size_t k = rng() % counts.size();
    sketch.Admit(k * 0x9E3779B97F4A7C15ull);
    ++counts[k];
  }
  REQUIRE(sketch.agings() == 0);
  for (size_t k = 0; k < counts.size(); ++k) {
    CHECK(sketch.Estimate(k * 0x9E3779B97F4A7C15ull) >= std::min<uint32_t>(counts[k], 15));
  }
}

TEST_CASE("ids seen once are refused far more often than not", "[admission_sketch]") {
  AdmissionOptions options;
  options.min_count = 2;
  options.width = 1 << 14;
  AdmissionSketch sketch(options);
  // As many distinct ids as half the width, each seen once: few all-four-counter collisions.
  int admitted = 0;
  for (uint64_t id = 0; id < 8192; ++id) admitted += sketch.Admit(id * 1315423911ull + 17);
  CHECK(admitted < 8192 / 50);
}

TEST_CASE("aging halves the counts after width sightings", "[admission_sketch]") {
  AdmissionOptions options;
  options.min_count = 4;
  options.width = 64;
  AdmissionSketch sketch(options);
  for (int i = 0; i < 3; ++i) sketch.Admit(42);
  CHECK(sketch.Estimate(42) == 3);
  // Other ids' sightings bring the total to the width: every counter is halved.
  for (uint64_t id = 1000; id < 1061; ++id) sketch.Admit(id);
  CHECK(sketch.agings() == 1);
  CHECK(sketch.Estimate(42) <= 2);
  CHECK(sketch.Estimate(42) >= 1);
}

TEST_CASE("probability admits about that share, the same way every time", "[admission_sketch]") {
  AdmissionOptions options;
  options.probability = 0.25;
  options.width = 1 << 16;
  options.seed = 99;
  AdmissionSketch a(options), b(options);
  int admitted = 0;
  for (uint64_t id = 0; id < 20000; ++id) {
    const bool admit = a.Admit(id);
    CHECK(admit == b.Admit(id));
    admitted += admit;
  }
  CHECK(admitted > 4500);
  CHECK(admitted < 5500);
}

TEST_CASE("Clear forgets every count", "[admission_sketch]") {
  AdmissionOptions options;
  options.min_count = 2;
  options.width = 256;
  AdmissionSketch sketch(options);
  sketch.Admit(5);
  sketch.Clear();
  CHECK(sketch.Estimate(5) == 0);
  CHECK_FALSE(sketch.Admit(5));
  CHECK(sketch.MemoryBytes() == 4 * 256 / 2);
}

}  // namespace
}  // namespace ps

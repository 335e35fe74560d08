#include "server/storage/initializer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace ps {
namespace server {
namespace {

config::Initializer Options(config::Initializer::Kind kind) {
  config::Initializer o;
  o.set_kind(kind);
  return o;
}

std::unique_ptr<Initializer> Make(const config::Initializer& options, uint64_t seed = 1,
                                  const std::string& table = "user") {
  auto init = Initializer::Create(options, seed, table);
  REQUIRE(init.ok());
  return std::move(init).value();
}

std::vector<float> Row(const Initializer& init, uint64_t id, uint32_t dim) {
  std::vector<float> row(dim);
  init.Fill(id, dim, row.data());
  return row;
}

uint32_t Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

std::vector<uint32_t> RowBits(const Initializer& init, uint64_t id, uint32_t dim) {
  std::vector<uint32_t> bits;
  for (float f : Row(init, id, dim)) bits.push_back(Bits(f));
  return bits;
}

config::Initializer::Kind AnyRandomKind() {
  return GENERATE(config::Initializer::UNIFORM, config::Initializer::NORMAL,
                  config::Initializer::TRUNCATED_NORMAL);
}

TEST_CASE("rows are a function of seed, table and id", "[storage][initializer]") {
  const config::Initializer options = Options(AnyRandomKind());
  CAPTURE(options.ShortDebugString());
  const auto a = Make(options, 7, "user");
  const auto b = Make(options, 7, "user");
  for (uint64_t id : {uint64_t{0}, uint64_t{1}, uint64_t{42}, ~uint64_t{0}}) {
    CHECK(RowBits(*a, id, 64) == RowBits(*b, id, 64));
    CHECK(RowBits(*a, id, 64) == RowBits(*a, id, 64));
  }
  // Any change of id, table or seed gives another row.
  const std::vector<uint32_t> base = RowBits(*a, 42, 16);
  CHECK(RowBits(*a, 43, 16) != base);
  CHECK(RowBits(*Make(options, 7, "item"), 42, 16) != base);
  CHECK(RowBits(*Make(options, 8, "user"), 42, 16) != base);
  config::Initializer own_seed = options;
  own_seed.set_seed(3);
  CHECK(RowBits(*Make(own_seed, 7, "user"), 42, 16) != base);
  // A row's prefix does not depend on dim.
  const std::vector<uint32_t> longer = RowBits(*a, 42, 17);
  CHECK(std::vector<uint32_t>(longer.begin(), longer.begin() + 16) == base);
}

TEST_CASE("zeros are zeros", "[storage][initializer]") {
  const auto init = Make(Options(config::Initializer::ZEROS));
  std::vector<float> row(9, 1.0f);
  init->Fill(5, 9, row.data());
  for (float f : row) CHECK(Bits(f) == 0);
}

// Mean and variance over many rows, against the distribution's.
TEST_CASE("moments are those of the distribution", "[storage][initializer]") {
  const config::Initializer::Kind kind = AnyRandomKind();
  config::Initializer options = Options(kind);
  options.set_low(-0.5f);
  options.set_high(1.5f);
  options.set_mean(0.25f);
  options.set_stddev(2.0f);
  const auto init = Make(options, 123, "moments");
  double expected_mean, expected_var;
  switch (kind) {
    case config::Initializer::UNIFORM:
      expected_mean = 0.5;
      expected_var = 4.0 / 12;
      break;
    case config::Initializer::NORMAL:
      expected_mean = 0.25;
      expected_var = 4.0;
      break;
    default:
      // A standard normal truncated to [-2, 2] has variance 1 - 4 phi(2) / (2 Phi(2) - 1).
      expected_mean = 0.25;
      expected_var = 4.0 * (1 - 4 * 0.05399096651318806 / (2 * 0.9772498680518208 - 1));
      break;
  }
  const int rows = 20000;
  const uint32_t dim = 16;
  double sum = 0, sum_sq = 0;
  float min = std::numeric_limits<float>::infinity(), max = -min;
  for (int id = 0; id < rows; ++id) {
    for (float f : Row(*init, id, dim)) {
      sum += f;
      sum_sq += double{f} * f;
      min = std::min(min, f);
      max = std::max(max, f);
    }
  }
  const double n = double{rows} * dim;
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  // 6 standard errors: the mean's is sqrt(var / n), the variance's about var * sqrt(2 / n).
  CHECK(std::fabs(mean - expected_mean) < 6 * std::sqrt(expected_var / n));
  CHECK(std::fabs(var - expected_var) < 6 * expected_var * std::sqrt(2 / n) * 1.5);
  if (kind == config::Initializer::UNIFORM) {
    CHECK(min >= -0.5f);
    CHECK(max < 1.5f);
  }
  if (kind == config::Initializer::TRUNCATED_NORMAL) {
    CHECK(min >= 0.25f - 4.0f * (1 + 1e-6f));
    CHECK(max <= 0.25f + 4.0f * (1 + 1e-6f));
    // The bound is reached closely: the truncation is at 2 stddev, not tighter.
    CHECK(max > 0.25f + 3.9f);
  }
  if (kind == config::Initializer::NORMAL) CHECK(max > 0.25f + 4.0f);  // some beyond 2 stddev
}

TEST_CASE("uniform stays below high even when rounding reaches it", "[storage][initializer]") {
  config::Initializer options = Options(config::Initializer::UNIFORM);
  // So narrow an interval that low + (high - low) * u rounds to one of two floats.
  options.set_low(1.0f);
  options.set_high(std::nextafter(1.0f, 2.0f));
  const auto init = Make(options);
  for (uint64_t id = 0; id < 1000; ++id) {
    for (float f : Row(*init, id, 8)) CHECK(f == 1.0f);
  }
}

// These values are part of the contract between servers, replicas and restarts: if this test
// fails, rows that were never pushed would change value across a release.
TEST_CASE("initial values are pinned", "[storage][initializer]") {
  const auto uniform = Make(Options(config::Initializer::UNIFORM), 1, "user");
  const auto normal = Make(Options(config::Initializer::NORMAL), 1, "user");
  const auto truncated = Make(Options(config::Initializer::TRUNCATED_NORMAL), 1, "user");
  CHECK(RowBits(*uniform, 0, 4) ==
        std::vector<uint32_t>{0x3bab371fu, 0x3bd07ab2u, 0xb896b5adu, 0xb93ee4b7u});
  CHECK(RowBits(*normal, 0, 4) ==
        std::vector<uint32_t>{0x3bb7695bu, 0x3bdf5476u, 0xbc6ea0d0u, 0xbd172078u});
  // The fourth draw of id 0 is beyond 2 stddev and drawn again.
  CHECK(RowBits(*truncated, 0, 4) ==
        std::vector<uint32_t>{0x3bb7695bu, 0x3bdf5476u, 0xbc6ea0d0u, 0xbbc4d5b0u});
  CHECK(RowBits(*uniform, 42, 4) ==
        std::vector<uint32_t>{0x3b9b211cu, 0xbc198ef7u, 0xbc016c9eu, 0x3b4b6688u});
  CHECK(RowBits(*normal, 42, 4) ==
        std::vector<uint32_t>{0xbbf70864u, 0x3b421da5u, 0x3b4085dcu, 0xbbe8a75bu});
}

TEST_CASE("Create refuses bad parameters", "[storage][initializer]") {
  struct Case {
    const char* what;
    void (*mutate)(config::Initializer*);
  };
  const Case c = GENERATE(values<Case>({
      {"empty uniform interval",
       [](config::Initializer* o) {
         o->set_low(1.0f);
         o->set_high(1.0f);
       }},
      {"infinite high", [](config::Initializer* o) { o->set_high(INFINITY); }},
      {"NaN low", [](config::Initializer* o) { o->set_low(NAN); }},
      {"zero stddev",
       [](config::Initializer* o) {
         o->set_kind(config::Initializer::NORMAL);
         o->set_stddev(0.0f);
       }},
      {"negative stddev",
       [](config::Initializer* o) {
         o->set_kind(config::Initializer::TRUNCATED_NORMAL);
         o->set_stddev(-1.0f);
       }},
      {"NaN mean",
       [](config::Initializer* o) {
         o->set_kind(config::Initializer::NORMAL);
         o->set_mean(NAN);
       }},
  }));
  config::Initializer o;
  c.mutate(&o);
  CAPTURE(c.what);
  const auto init = Initializer::Create(o, 1, "t");
  REQUIRE_FALSE(init.ok());
  CHECK(init.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace server
}  // namespace ps

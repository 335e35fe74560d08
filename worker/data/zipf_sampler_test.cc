#include "worker/data/zipf_sampler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/match.h"

namespace ps {
namespace worker {
namespace {

ZipfSampler MustCreate(uint64_t n, double s) {
  absl::StatusOr<ZipfSampler> sampler = ZipfSampler::Create(n, s);
  INFO(sampler.status().ToString());
  REQUIRE(sampler.ok());
  return *sampler;
}

TEST_CASE("draws follow Zipf's law over a small range", "[worker][zipf]") {
  const double s = GENERATE(0.0, 0.5, 1.0, 1.05, 2.0, 4.0);
  INFO("s = " << s);
  constexpr uint64_t kN = 1000;
  constexpr int kDraws = 400000;
  const ZipfSampler sampler = MustCreate(kN, s);
  std::mt19937_64 random(42);
  std::vector<int64_t> counts(kN + 1, 0);
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t k = sampler.Draw(random);
    REQUIRE(k >= 1);
    REQUIRE(k <= kN);
    ++counts[k];
  }
  // The most frequent ranks one by one.
  for (uint64_t k = 1; k <= 20; ++k) {
    INFO("rank " << k);
    const double expected = sampler.Probability(k) * kDraws;
    CHECK(std::abs(counts[k] - expected) <= 5 * std::sqrt(expected) + 1);
  }
  // All of them: a chi-squared test over consecutive ranks merged until each bin expects 25.
  double chi2 = 0;
  int bins = 0;
  double bin_expected = 0, bin_count = 0;
  for (uint64_t k = 1; k <= kN; ++k) {
    bin_expected += sampler.Probability(k) * kDraws;
    bin_count += counts[k];
    if (bin_expected >= 25 || k == kN) {
      chi2 += (bin_count - bin_expected) * (bin_count - bin_expected) / bin_expected;
      ++bins;
      bin_expected = bin_count = 0;
    }
  }
  const double freedom = bins - 1;
  INFO("chi2 " << chi2 << " over " << bins << " bins");
  CHECK(bins > 10);
  CHECK(chi2 < freedom + 6 * std::sqrt(2 * freedom));

  double total = 0;
  for (uint64_t k = 1; k <= kN; ++k) total += sampler.Probability(k);
  CHECK(total == Approx(1.0).epsilon(1e-12));
  CHECK(sampler.Probability(0) == 0);
  CHECK(sampler.Probability(kN + 1) == 0);
}

TEST_CASE("draws stay within a range of 2^40 and reach its tail", "[worker][zipf]") {
  const uint64_t n = GENERATE(uint64_t{1} << 40, ZipfSampler::kMaxN);
  const ZipfSampler sampler = MustCreate(n, 1.05);
  std::mt19937_64 random(7);
  constexpr int kDraws = 1000000;
  int64_t upper_half = 0, ones = 0;
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t k = sampler.Draw(random);
    REQUIRE(k >= 1);
    REQUIRE(k <= n);
    upper_half += k > n / 2 ? 1 : 0;
    ones += k == 1 ? 1 : 0;
  }
  // The mass above n/2, from the density's integral (the terms there differ by under 1e-12).
  const double tail =
      (std::pow(n / 2 + 0.5, -0.05) - std::pow(n + 0.5, -0.05)) / 0.05 / sampler.normalizer();
  const double expected = tail * kDraws;
  INFO("upper half " << upper_half << ", expected " << expected);
  CHECK(expected > 1000);
  CHECK(std::abs(upper_half - expected) < 5 * std::sqrt(expected));
  const double expected_ones = sampler.Probability(1) * kDraws;
  CHECK(std::abs(ones - expected_ones) < 5 * std::sqrt(expected_ones));
}

TEST_CASE("edge cases of the range and exponent", "[worker][zipf]") {
  std::mt19937_64 random(3);
  const ZipfSampler one = MustCreate(1, 1.1);
  for (int i = 0; i < 1000; ++i) REQUIRE(one.Draw(random) == 1);
  CHECK(one.Probability(1) == 1.0);
  // A steep law over a large range: (almost) always rank 1, never outside the range.
  const ZipfSampler steep = MustCreate(uint64_t{1} << 40, 60.0);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t k = steep.Draw(random);
    REQUIRE(k >= 1);
    REQUIRE(k <= uint64_t{1} << 40);
  }
  // A draw is a pure function of the random numbers it is given.
  const ZipfSampler sampler = MustCreate(100000000, 1.05);
  std::mt19937_64 a(11), b(11);
  for (int i = 0; i < 1000; ++i) REQUIRE(sampler.Draw(a) == sampler.Draw(b));
}

TEST_CASE("the normalizer and expected distinct count match exact sums", "[worker][zipf]") {
  const double s = GENERATE(0.0, 0.8, 1.0, 1.05, 1.5);
  INFO("s = " << s);
  constexpr uint64_t kN = 2000000;
  const ZipfSampler sampler = MustCreate(kN, s);
  double normalizer = 0;
  for (uint64_t k = kN; k >= 1; --k) normalizer += std::pow(static_cast<double>(k), -s);
  CHECK(sampler.normalizer() == Approx(normalizer).epsilon(1e-9));
  for (const double draws : {0.0, 1.0, 1e3, 1e5, 1e7, 1e9}) {
    INFO("draws " << draws);
    double distinct = 0;
    for (uint64_t k = kN; k >= 1; --k) {
      const double p = std::pow(static_cast<double>(k), -s) / normalizer;
      distinct += -std::expm1(draws * std::log1p(-p));
    }
    CHECK(sampler.ExpectedDistinct(draws) == Approx(distinct).epsilon(1e-6).margin(1e-9));
  }
}

TEST_CASE("the expected distinct count matches draws", "[worker][zipf]") {
  const ZipfSampler sampler = MustCreate(100000000, 1.05);
  std::mt19937_64 random(5);
  std::vector<uint64_t> seen;
  constexpr int kDraws = 200000;
  for (int i = 0; i < kDraws; ++i) seen.push_back(sampler.Draw(random));
  std::sort(seen.begin(), seen.end());
  const double distinct = std::unique(seen.begin(), seen.end()) - seen.begin();
  const double expected = sampler.ExpectedDistinct(kDraws);
  INFO("distinct " << distinct << ", expected " << expected);
  CHECK(distinct == Approx(expected).epsilon(0.01));
}

TEST_CASE("bad ranges and exponents are refused", "[worker][zipf]") {
  const auto refused = [](uint64_t n, double s, const char* name) {
    const absl::Status status = ZipfSampler::Create(n, s).status();
    INFO(status.ToString());
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(status.message(), name));
  };
  refused(0, 1.0, "n must");
  refused(ZipfSampler::kMaxN + 1, 1.0, "n must");
  refused(10, -0.1, "s must");
  refused(10, NAN, "s must");
  refused(10, INFINITY, "s must");
  CHECK(ZipfSampler::Create(ZipfSampler::kMaxN, 0.0).ok());
}

}  // namespace
}  // namespace worker
}  // namespace ps

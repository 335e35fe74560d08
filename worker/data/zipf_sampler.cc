#include "worker/data/zipf_sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ps {
namespace worker {

namespace {

// Ranks up to here are summed term by term in the normalizer and ExpectedDistinct; beyond, the
// terms vary slowly enough for the midpoint rule and quadrature.
constexpr uint64_t kExactRanks = 4096;
// Simpson intervals over log(x) for ExpectedDistinct's tail (even).
constexpr int kQuadratureIntervals = 4096;

// expm1(t) / t, and its limit 1 at t = 0.
double Expm1OverT(double t) {
  if (std::abs(t) > 1e-8) return std::expm1(t) / t;
  return 1.0 + t * (0.5 + t * (1.0 / 6.0 + t * (1.0 / 24.0)));
}

// log1p(t) / t, and its limit 1 at t = 0.
double Log1pOverT(double t) {
  if (std::abs(t) > 1e-8) return std::log1p(t) / t;
  return 1.0 + t * (-0.5 + t * (1.0 / 3.0 + t * (-0.25)));
}

}  // namespace

absl::StatusOr<ZipfSampler> ZipfSampler::Create(uint64_t n, double s) {
  if (n < 1 || n > kMaxN) {
    return absl::InvalidArgumentError(
        absl::StrCat("zipf sampler: n must be in [1, 2^48], got ", n));
  }
  if (!std::isfinite(s) || s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("zipf sampler: s must be finite and >= 0, got ", s));
  }
  return ZipfSampler(n, s);
}

ZipfSampler::ZipfSampler(uint64_t n, double s) : n_(n), s_(s) {
  integral_low_ = Integral(1.5) - 1.0;
  integral_high_ = Integral(static_cast<double>(n) + 0.5);
  // The accepted part of k's interval begins at InverseIntegral(Integral(k + 1/2) - k^-s), which
  // is furthest left of k (relative to k) at k = 2.
  squeeze_ = 2.0 - InverseIntegral(Integral(2.5) - Density(2.0));

  const uint64_t exact = std::min(n, kExactRanks);
  normalizer_ = 0;
  for (uint64_t k = 1; k <= exact; ++k) normalizer_ += Density(static_cast<double>(k));
  if (n > exact) {
    normalizer_ += integral_high_ - Integral(static_cast<double>(exact) + 0.5);
  }
}

// The integral of x^-s from 1 to x: (x^(1-s) - 1) / (1 - s), or log(x) at s = 1, written so that
// it is accurate near s = 1.
double ZipfSampler::Integral(double x) const {
  const double log_x = std::log(x);
  return Expm1OverT((1.0 - s_) * log_x) * log_x;
}

// Solves Integral(x) = y for x.
double ZipfSampler::InverseIntegral(double y) const {
  return std::exp(Log1pOverT((1.0 - s_) * y) * y);
}

double ZipfSampler::Probability(uint64_t k) const {
  if (k < 1 || k > n_) return 0;
  return Density(static_cast<double>(k)) / normalizer_;
}

double ZipfSampler::ExpectedDistinct(double draws) const {
  if (!(draws > 0)) return 0;
  // Rank k is seen at least once with probability 1 - (1 - p_k)^draws.
  const auto seen = [draws](double p) { return -std::expm1(draws * std::log1p(-p)); };
  const uint64_t exact = std::min(n_, kExactRanks);
  double total = 0;
  for (uint64_t k = 1; k <= exact; ++k) total += seen(Probability(k));
  if (n_ == exact) return total;
  // The remaining ranks as the integral of seen(x^-s / Z) over [exact + 1/2, n + 1/2], by
  // Simpson's rule in t = log x, where the integrand seen(e^(-s t) / Z) e^t is smooth.
  const double t0 = std::log(static_cast<double>(exact) + 0.5);
  const double t1 = std::log(static_cast<double>(n_) + 0.5);
  const double step = (t1 - t0) / kQuadratureIntervals;
  const auto integrand = [&](double t) {
    return seen(std::exp(-s_ * t) / normalizer_) * std::exp(t);
  };
  double sum = integrand(t0) + integrand(t1);
  for (int i = 1; i < kQuadratureIntervals; ++i) {
    sum += (i % 2 == 1 ? 4.0 : 2.0) * integrand(t0 + i * step);
  }
  return total + sum * step / 3.0;
}

}  // namespace worker
}  // namespace ps

// Zipf's law over a range too large to tabulate: P(k) = k^-s / Z(n, s) for k in [1, n], drawn in
// O(1) memory and expected O(1) time by rejection-inversion (W. Hörmann and G. Derflinger,
// "Rejection-inversion to generate variates from monotone discrete distributions", ACM TOMACS
// 6(3), 1996).
//
// How it works: the integer k owns the interval [k - 1/2, k + 1/2] of the continuous density
// x^-s. A point x is drawn from that density by inverting its integral, and k = round(x) is kept
// when x falls in the part of k's interval whose area is exactly k^-s (the right end of it; the
// density is convex, so the interval's area is at least k^-s). Rank 1's interval is cut to area
// 1, so it is always kept. Every k is thus kept with probability proportional to k^-s. A fixed
// "squeeze" accepts most draws without evaluating the integral; under 2% of tries are rejected
// for any s, so a draw costs about one log and one exp.
#ifndef PS_WORKER_DATA_ZIPF_SAMPLER_H_
#define PS_WORKER_DATA_ZIPF_SAMPLER_H_

#include <cmath>
#include <cstdint>

#include "absl/status/statusor.h"

namespace ps {
namespace worker {

// A ZipfSampler is the distribution Zipf(s) over [1, n]: a few doubles, whatever n. Immutable
// after Create(): thread-safe.
class ZipfSampler {
 public:
  // The largest n: x = k +- 1/2 must be exact in a double.
  static constexpr uint64_t kMaxN = uint64_t{1} << 48;

  // Returns the sampler of Zipf(s) over [1, n], or INVALID_ARGUMENT when n is outside [1, kMaxN]
  // or s is negative or not finite (s = 0 is uniform).
  static absl::StatusOr<ZipfSampler> Create(uint64_t n, double s);

  // Draws k in [1, n]. `bits` is called for a uniformly random uint64_t once per try (one try in
  // more than 98% of draws), so the result is a pure function of the numbers it returns.
  template <typename Bits>
  uint64_t Draw(Bits&& bits) const;

  // The probability of k: k^-s / Z(n, s), 0 outside [1, n].
  double Probability(uint64_t k) const;

  // The expected number of distinct values in `draws` independent draws (draws >= 0), summed
  // exactly over the first 4096 ranks and by quadrature beyond (relative error below 1e-6).
  double ExpectedDistinct(double draws) const;

  uint64_t n() const { return n_; }
  double s() const { return s_; }
  // Z(n, s) = sum of k^-s over [1, n] (exact over the first 4096 ranks, the rest by the
  // midpoint rule, relative error below 1e-9).
  double normalizer() const { return normalizer_; }

 private:
  ZipfSampler(uint64_t n, double s);

  // The density x^-s, its integral from 1 to x, and that integral's inverse.
  double Density(double x) const { return std::exp(-s_ * std::log(x)); }
  double Integral(double x) const;
  double InverseIntegral(double y) const;

  uint64_t n_;
  double s_;
  double integral_low_;   // Integral(1.5) - 1: rank 1's interval has area 1
  double integral_high_;  // Integral(n + 1/2)
  double squeeze_;        // x >= k - squeeze_ is always inside k's accepted part
  double normalizer_;
};

template <typename Bits>
uint64_t ZipfSampler::Draw(Bits&& bits) const {
  const double n = static_cast<double>(n_);
  while (true) {
    const double uniform = static_cast<double>(bits() >> 11) * 0x1.0p-53;  // [0, 1)
    const double y = integral_high_ + uniform * (integral_low_ - integral_high_);
    const double x = InverseIntegral(y);
    const double rounded = std::floor(x + 0.5);
    // Rounding at the ends of the range may step outside it (or give NaN, for y at the very top
    // when s is large): clamp, and let the exact test decide.
    uint64_t k;
    if (!(rounded < n)) {
      k = n_;
    } else if (rounded < 1) {
      k = 1;
    } else {
      k = static_cast<uint64_t>(rounded);
    }
    const double k_real = static_cast<double>(k);
    if (k_real - x <= squeeze_ || y >= Integral(k_real + 0.5) - Density(k_real)) return k;
  }
}

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DATA_ZIPF_SAMPLER_H_

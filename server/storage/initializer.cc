#include "server/storage/initializer.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "xxhash.h"

#include "common/byte_order.h"

namespace ps {
namespace server {
namespace {

// Everything below uses only IEEE-754 basic operations (+ - * / sqrt, exactly rounded everywhere)
// and exact bit manipulations (frexp, nextafter) so that rows are the same on every platform; the
// BUILD file turns off floating-point contraction for this file so that no FMA changes a rounding.

uint64_t HashU64(uint64_t value, uint64_t seed) {
  const uint64_t le = LittleEndian64(value);
  return XXH3_64bits_withSeed(&le, sizeof(le), seed);
}

// The random stream of one row: splitmix64 (Steele, Lea and Flood, 2014), i.e. its output mixer
// applied to a Weyl sequence starting at the row's key. Counter-based: draw k is a pure function of
// (key, k).
class RowStream {
 public:
  explicit RowStream(uint64_t key) : state_(key) {}

  uint64_t NextU64() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // Uniform on [0, 1), a multiple of 2^-53.
  double NextUnit() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// Natural logarithm of a finite x > 0 with basic arithmetic: x = m * 2^e with m in
// [sqrt(1/2), sqrt(2)), then log(m) = 2 atanh(t) with t = (m - 1) / (m + 1), |t| < 0.172, whose
// series to t^21 is accurate to well below double precision (the result is rounded to float).
double Log(double x) {
  int e;
  double m = std::frexp(x, &e);  // m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2;
    --e;
  }
  const double t = (m - 1) / (m + 1);
  const double t2 = t * t;
  double series = 1.0 / 21;
  for (int k = 19; k >= 1; k -= 2) series = series * t2 + 1.0 / k;
  constexpr double kLn2 = 0.69314718055994530942;
  return e * kLn2 + 2 * t * series;
}

// Standard normal variates, one at a time, from Marsaglia's polar form of Box-Muller (pairs from
// one accepted point in the unit disc; the second of a pair is kept for the next call).
class NormalStream {
 public:
  explicit NormalStream(uint64_t key) : uniform_(key) {}

  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double x, y, s;
    do {
      x = 2 * uniform_.NextUnit() - 1;
      y = 2 * uniform_.NextUnit() - 1;
      s = x * x + y * y;
    } while (s >= 1 || s == 0);
    const double f = std::sqrt(-2 * Log(s) / s);
    spare_ = y * f;
    has_spare_ = true;
    return x * f;
  }

 private:
  RowStream uniform_;
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Initializer>> Initializer::Create(const config::Initializer& options,
                                                                 uint64_t job_seed,
                                                                 absl::string_view table) {
  switch (options.kind()) {
    case config::Initializer::ZEROS:
      break;
    case config::Initializer::UNIFORM:
      if (!std::isfinite(options.low()) || !std::isfinite(options.high()) ||
          !(options.low() < options.high())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("initializer: uniform needs finite low < high, got low %g high %g",
                            options.low(), options.high()));
      }
      break;
    case config::Initializer::NORMAL:
    case config::Initializer::TRUNCATED_NORMAL:
      if (!std::isfinite(options.mean())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("initializer.mean: must be finite, got %g", options.mean()));
      }
      if (!std::isfinite(options.stddev()) || !(options.stddev() > 0)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("initializer.stddev: must be > 0, got %g", options.stddev()));
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("initializer.kind: unknown initializer kind %d", options.kind()));
  }
  const uint64_t seed = options.seed() == 0 ? job_seed : HashU64(options.seed(), job_seed);
  const uint64_t table_key = XXH3_64bits_withSeed(table.data(), table.size(), seed);
  return std::unique_ptr<Initializer>(new Initializer(options, table_key));
}

Initializer::Initializer(const config::Initializer& options, uint64_t table_key)
    : kind_(options.kind()),
      low_(options.low()),
      high_(options.high()),
      mean_(options.mean()),
      stddev_(options.stddev()),
      table_key_(table_key) {}

void Initializer::Fill(uint64_t id, uint32_t dim, float* out) const {
  const uint64_t row_key = HashU64(id, table_key_);
  switch (kind_) {
    case config::Initializer::ZEROS:
      std::memset(out, 0, sizeof(float) * dim);
      return;
    case config::Initializer::UNIFORM: {
      RowStream stream(row_key);
      const double low = low_, width = static_cast<double>(high_) - low_;
      for (uint32_t i = 0; i < dim; ++i) {
        float v = static_cast<float>(low + width * stream.NextUnit());
        // Rounding to float may reach `high`; the interval is half-open.
        if (v >= high_) v = std::nextafter(high_, low_);
        out[i] = v;
      }
      return;
    }
    case config::Initializer::NORMAL: {
      NormalStream stream(row_key);
      for (uint32_t i = 0; i < dim; ++i) {
        out[i] = static_cast<float>(mean_ + static_cast<double>(stddev_) * stream.Next());
      }
      return;
    }
    case config::Initializer::TRUNCATED_NORMAL: {
      NormalStream stream(row_key);
      for (uint32_t i = 0; i < dim; ++i) {
        double z;
        do {
          z = stream.Next();
        } while (!(std::fabs(z) <= 2));
        out[i] = static_cast<float>(mean_ + static_cast<double>(stddev_) * z);
      }
      return;
    }
  }
}

}  // namespace server
}  // namespace ps

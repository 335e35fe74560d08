#include "common/half.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/internal/half_kernels.h"

namespace ps {
namespace {

using half_internal::BitsFloat;
using half_internal::FloatBits;

// References written another way: the value of a pattern with ldexp, and rounding with
// std::nearbyint in double (ties to even in the default rounding mode). The step of a binade is
// exact in double, and so is every quotient below, so nearbyint does the only rounding. Overflow
// is not a constant here: it is whatever rounding carries past the largest exponent.

bool Fp16IsNan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }
bool Bf16IsNan(uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) != 0; }

// The value of a finite fp16 pattern.
double ReferenceFp16Value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int fraction = h & 0x3FF;
  const double magnitude =
      exponent == 0 ? std::ldexp(fraction, -24) : std::ldexp(1024 + fraction, exponent - 25);
  return (h & 0x8000u) ? -magnitude : magnitude;
}

// Rounds |x| to a format with `fraction_bits` fraction bits and smallest normal exponent
// `min_exponent`; returns the pattern without its sign, `infinity` when it does not fit.
uint32_t ReferenceRound(double magnitude, int fraction_bits, int min_exponent, uint32_t infinity) {
  if (magnitude == 0) return 0;
  int e;
  std::frexp(magnitude, &e);  // magnitude = m * 2^e, m in [0.5, 1)
  const int exponent = std::max(e - 1, min_exponent);
  const double steps = std::nearbyint(std::ldexp(magnitude, fraction_bits - exponent));
  const int64_t bits = (int64_t{exponent} - min_exponent + 1) * (int64_t{1} << fraction_bits) +
                       static_cast<int64_t>(steps) - (int64_t{1} << fraction_bits);
  return bits >= infinity ? infinity : static_cast<uint32_t>(bits);
}

uint16_t ReferenceFp16(float x) {
  const uint32_t sign = (FloatBits(x) >> 16) & 0x8000u;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7E00u | ((FloatBits(x) >> 13) & 0x3FFu));
  if (std::isinf(x)) return static_cast<uint16_t>(sign | 0x7C00u);
  return static_cast<uint16_t>(sign | ReferenceRound(std::fabs(double{x}), 10, -14, 0x7C00u));
}

uint16_t ReferenceBf16(float x) {
  const uint32_t sign = (FloatBits(x) >> 16) & 0x8000u;
  if (std::isnan(x)) return static_cast<uint16_t>((FloatBits(x) >> 16) | 0x40u);
  if (std::isinf(x)) return static_cast<uint16_t>(sign | 0x7F80u);
  return static_cast<uint16_t>(sign | ReferenceRound(std::fabs(double{x}), 7, -126, 0x7F80u));
}

// Floats of three kinds: any bit pattern (every exponent, NaNs and infinities included); a
// random sign and fraction with an exponent around fp16's range; and ties and their neighbours,
// the midpoints of adjacent fp16 values (exact in float) and one float step either side.
std::vector<float> RandomFloats(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<float> out;
  out.reserve(n);
  while (out.size() < n) {
    const uint32_t r = static_cast<uint32_t>(rng());
    switch (rng() % 3) {
      case 0:
        out.push_back(BitsFloat(r));
        break;
      case 1: {
        const uint32_t exponent = 127 - 28 + static_cast<uint32_t>(rng() % 46);  // 2^-28 .. 2^17
        out.push_back(BitsFloat((r & 0x807FFFFFu) | (exponent << 23)));
        break;
      }
      default: {
        const uint16_t h = static_cast<uint16_t>(r % 0x7BFFu);  // finite, the next one too
        const double mid = (ReferenceFp16Value(h) + ReferenceFp16Value(h + 1)) / 2;
        const float tie = static_cast<float>((r & 0x10000u) ? -mid : mid);
        REQUIRE(double{std::fabs(tie)} == mid);
        const int side = static_cast<int>(rng() % 3);
        out.push_back(side == 0   ? tie
                      : side == 1 ? std::nextafter(tie, INFINITY)
                                  : std::nextafter(tie, -INFINITY));
      }
    }
  }
  return out;
}

// Every way this build encodes fp16: the scalar function, the bulk function (which picks a
// kernel) and each kernel that can run here.
std::vector<std::vector<uint16_t>> EncodeFp16AllWays(const std::vector<float>& in) {
  std::vector<std::vector<uint16_t>> ways;
  std::vector<uint16_t> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = FloatToFp16(in[i]);
  ways.push_back(out);
  EncodeFp16(in.data(), in.size(), out.data());
  ways.push_back(out);
  half_internal::EncodeFp16Portable(in.data(), in.size(), out.data());
  ways.push_back(out);
  if (half_internal::HasF16c()) {
    half_internal::EncodeFp16F16c(in.data(), in.size(), out.data());
    ways.push_back(out);
  }
  return ways;
}

std::vector<std::vector<float>> DecodeFp16AllWays(const std::vector<uint16_t>& in) {
  std::vector<std::vector<float>> ways;
  std::vector<float> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = Fp16ToFloat(in[i]);
  ways.push_back(out);
  DecodeFp16(in.data(), in.size(), out.data());
  ways.push_back(out);
  half_internal::DecodeFp16Portable(in.data(), in.size(), out.data());
  ways.push_back(out);
  if (half_internal::HasF16c()) {
    half_internal::DecodeFp16F16c(in.data(), in.size(), out.data());
    ways.push_back(out);
  }
  return ways;
}

std::vector<uint16_t> AllPatterns() {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  return all;
}

TEST_CASE("the F16C kernels are tested where the CPU has them", "[common][half]") {
  // Not a requirement (the portable code stands in), but a test run that never exercised them
  // should say so.
  if (!half_internal::HasF16c()) WARN("no F16C on this CPU: only the portable fp16 code ran");
  SUCCEED();
}

TEST_CASE("fp16: every pattern decodes exactly and encodes back to itself", "[common][half]") {
  const std::vector<uint16_t> all = AllPatterns();
  const auto decoded = DecodeFp16AllWays(all);
  for (const std::vector<float>& way : decoded) {
    REQUIRE(std::memcmp(way.data(), decoded[0].data(), all.size() * sizeof(float)) == 0);
  }
  const std::vector<float>& values = decoded[0];
  for (uint32_t h = 0; h < 65536; ++h) {
    CAPTURE(h);
    const float x = values[h];
    REQUIRE(std::signbit(x) == ((h & 0x8000u) != 0));
    if (Fp16IsNan(static_cast<uint16_t>(h))) {
      REQUIRE(std::isnan(x));
      // Quiet, with the payload in the top fraction bits.
      REQUIRE((FloatBits(x) & 0x7FFFFFFFu) == (0x7FC00000u | ((h & 0x3FFu) << 13)));
    } else if ((h & 0x7FFFu) == 0x7C00u) {
      REQUIRE(std::isinf(x));
    } else {
      REQUIRE(double{x} == ReferenceFp16Value(static_cast<uint16_t>(h)));
    }
  }
  const auto encoded = EncodeFp16AllWays(values);
  for (const std::vector<uint16_t>& way : encoded) {
    for (uint32_t h = 0; h < 65536; ++h) {
      CAPTURE(h);
      const uint16_t expected = Fp16IsNan(static_cast<uint16_t>(h)) ? (h | 0x200u) : h;
      REQUIRE(way[h] == expected);
    }
  }
}

TEST_CASE("fp16: encoding rounds to nearest even, as a reference in double does",
          "[common][half]") {
  const std::vector<float> in = RandomFloats(20261127, 300000);
  const auto encoded = EncodeFp16AllWays(in);
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t expected = ReferenceFp16(in[i]);
    for (size_t way = 0; way < encoded.size(); ++way) {
      if (encoded[way][i] != expected) {
        FAIL("float bits " << std::hex << FloatBits(in[i]) << " way " << way << ": got "
                           << encoded[way][i] << ", reference " << expected);
      }
    }
  }
}

TEST_CASE("fp16: zeros, subnormals, ties, overflow and NaNs", "[common][half]") {
  struct Case {
    float x;
    uint16_t infinity;  // the IEEE result
    uint16_t saturate;  // with Fp16Overflow::kSaturate
  };
  const float kSmallest = 0x1.0p-24f;  // fp16's smallest subnormal
  const std::vector<Case> cases = {
      {0.0f, 0x0000, 0x0000},
      {-0.0f, 0x8000, 0x8000},
      {1.0f, 0x3C00, 0x3C00},
      {-2.0f, 0xC000, 0xC000},
      {1.0f + 0x1.0p-11f, 0x3C00, 0x3C00},      // a tie: to the even 1
      {1.0f + 3 * 0x1.0p-11f, 0x3C02, 0x3C02},  // a tie: to the even 1 + 2^-9
      {65504.0f, 0x7BFF, 0x7BFF},               // the largest finite half
      {std::nextafter(65520.0f, 0.0f), 0x7BFF, 0x7BFF},
      {65520.0f, 0x7C00, 0x7BFF},  // the tie above it: to the even 2^16, inf
      {-65520.0f, 0xFC00, 0xFBFF},
      {1e10f, 0x7C00, 0x7BFF},
      {-FLT_MAX, 0xFC00, 0xFBFF},
      {INFINITY, 0x7C00, 0x7C00},
      {-INFINITY, 0xFC00, 0xFC00},
      {0x1.0p-14f, 0x0400, 0x0400},                   // the smallest normal
      {0x1.0p-14f - 0x1.0p-25f, 0x0400, 0x0400},      // a tie between 1023 and 1024 steps: 1024
      {0x1.0p-14f - 3 * 0x1.0p-25f, 0x03FE, 0x03FE},  // 1022.5 steps: to the even 1022
      {kSmallest, 0x0001, 0x0001},
      {-kSmallest, 0x8001, 0x8001},
      {0x1.0p-25f, 0x0000, 0x0000},  // half the smallest: a tie, to the even 0
      {-0x1.0p-25f, 0x8000, 0x8000},
      {std::nextafter(0x1.0p-25f, 1.0f), 0x0001, 0x0001},
      {1.5f * kSmallest, 0x0002, 0x0002},  // a tie: to the even 2
      {2.5f * kSmallest, 0x0002, 0x0002},  // a tie: to the even 2
      {0x1.0p-26f, 0x0000, 0x0000},
      {FLT_MIN, 0x0000, 0x0000},                 // float's smallest normal
      {-BitsFloat(1), 0x8000, 0x8000},           // float's smallest subnormal
      {BitsFloat(0x7FC00000u), 0x7E00, 0x7E00},  // the quiet NaN
      {BitsFloat(0xFFC00000u), 0xFE00, 0xFE00},  // with its sign
      {BitsFloat(0x7F800001u), 0x7E00, 0x7E00},  // signalling, payload below fp16's bits
      {BitsFloat(0x7FA00000u), 0x7F00, 0x7F00},  // signalling, payload kept, made quiet
      {BitsFloat(0xFFFFFFFFu), 0xFFFF, 0xFFFF},
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(c.x);
  const auto encoded = EncodeFp16AllWays(in);
  std::vector<uint16_t> saturated(in.size());
  EncodeFp16(in.data(), in.size(), saturated.data(), Fp16Overflow::kSaturate);
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i, FloatBits(cases[i].x));
    for (const std::vector<uint16_t>& way : encoded) CHECK(way[i] == cases[i].infinity);
    CHECK(FloatToFp16(cases[i].x, Fp16Overflow::kSaturate) == cases[i].saturate);
    CHECK(saturated[i] == cases[i].saturate);
    CHECK(ReferenceFp16(cases[i].x) == cases[i].infinity);  // the reference agrees, too
  }
}

TEST_CASE("fp16: the F16C and portable kernels agree bit for bit, tails included",
          "[common][half]") {
  if (!half_internal::HasF16c()) {
    WARN("no F16C on this CPU");
    return;
  }
  const size_t n = GENERATE(0u, 1u, 7u, 8u, 9u, 15u, 17u, 1000u, 100003u);
  CAPTURE(n);
  const std::vector<float> in = RandomFloats(n + 1, n);
  std::vector<uint16_t> portable(n), f16c(n);
  half_internal::EncodeFp16Portable(in.data(), n, portable.data());
  half_internal::EncodeFp16F16c(in.data(), n, f16c.data());
  REQUIRE(portable == f16c);
  // Decoding random patterns, NaNs included.
  std::vector<float> back_portable(n), back_f16c(n);
  std::mt19937_64 rng(n);
  for (uint16_t& h : portable) h = static_cast<uint16_t>(rng());
  half_internal::DecodeFp16Portable(portable.data(), n, back_portable.data());
  half_internal::DecodeFp16F16c(portable.data(), n, back_f16c.data());
  REQUIRE(std::memcmp(back_portable.data(), back_f16c.data(), n * sizeof(float)) == 0);
}

TEST_CASE("fp16: saturation leaves every other value as IEEE encoding has it", "[common][half]") {
  const std::vector<float> in = RandomFloats(77, 100000);
  std::vector<uint16_t> ieee(in.size()), saturated(in.size());
  EncodeFp16(in.data(), in.size(), ieee.data());
  EncodeFp16(in.data(), in.size(), saturated.data(), Fp16Overflow::kSaturate);
  for (size_t i = 0; i < in.size(); ++i) {
    CAPTURE(FloatBits(in[i]));
    const bool clamped = std::isfinite(in[i]) && std::fabs(in[i]) >= 65520.0f;
    const uint16_t expected =
        clamped ? static_cast<uint16_t>((ieee[i] & 0x8000u) | 0x7BFFu) : ieee[i];
    REQUIRE(saturated[i] == expected);
    REQUIRE(FloatToFp16(in[i], Fp16Overflow::kSaturate) == expected);
  }
}

TEST_CASE("bf16: every pattern decodes exactly and encodes back to itself", "[common][half]") {
  const std::vector<uint16_t> all = AllPatterns();
  std::vector<float> values(all.size());
  DecodeBf16(all.data(), all.size(), values.data());
  std::vector<uint16_t> back(all.size());
  EncodeBf16(values.data(), values.size(), back.data());
  for (uint32_t h = 0; h < 65536; ++h) {
    CAPTURE(h);
    REQUIRE(FloatBits(values[h]) == h << 16);  // exact, NaN payloads and signs included
    REQUIRE(FloatBits(Bf16ToFloat(static_cast<uint16_t>(h))) == h << 16);
    const uint16_t expected = Bf16IsNan(static_cast<uint16_t>(h)) ? (h | 0x40u) : h;
    REQUIRE(back[h] == expected);
    REQUIRE(FloatToBf16(values[h]) == expected);
  }
}

TEST_CASE("bf16: encoding rounds to nearest even, as a reference in double does",
          "[common][half]") {
  std::vector<float> in = RandomFloats(4242, 200000);
  // And ties of bf16: a random pattern with its low 16 bits 0x8000, and its neighbours.
  std::mt19937_64 rng(99);
  for (int i = 0; i < 50000; ++i) {
    const uint32_t tie = (static_cast<uint32_t>(rng()) & 0xFFFF0000u) | 0x8000u;
    in.push_back(BitsFloat(tie));
    in.push_back(BitsFloat(tie + 1));
    in.push_back(BitsFloat(tie - 1));
  }
  std::vector<uint16_t> out(in.size());
  EncodeBf16(in.data(), in.size(), out.data());
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t expected = ReferenceBf16(in[i]);
    if (out[i] != expected || FloatToBf16(in[i]) != expected) {
      FAIL("float bits " << std::hex << FloatBits(in[i]) << ": got " << out[i] << ", reference "
                         << expected);
    }
  }
}

TEST_CASE("bf16: zeros, subnormals, ties, overflow and NaNs", "[common][half]") {
  struct Case {
    float x;
    uint16_t expected;
  };
  const std::vector<Case> cases = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3F80},
      {-1.0f, 0xBF80},
      {1.0f + 0x1.0p-8f, 0x3F80},      // a tie: to the even 1
      {1.0f + 3 * 0x1.0p-8f, 0x3F82},  // a tie: up to the even
      {std::nextafter(1.0f + 0x1.0p-8f, 2.0f), 0x3F81},
      {0x1.fep127f, 0x7F7F},  // the largest finite bf16
      {std::nextafter(0x1.ffp127f, 0.0f), 0x7F7F},
      {0x1.ffp127f, 0x7F80},  // the tie above it: infinity
      {FLT_MAX, 0x7F80},
      {-FLT_MAX, 0xFF80},
      {INFINITY, 0x7F80},
      {-INFINITY, 0xFF80},
      {FLT_MIN, 0x0080},                 // float's smallest normal
      {BitsFloat(0x00008000u), 0x0000},  // a subnormal tie: to the even 0
      {BitsFloat(0x00018000u), 0x0002},  // a subnormal tie: to the even 2
      {BitsFloat(0x80010000u), 0x8001},
      {BitsFloat(1), 0x0000},
      {BitsFloat(0x7FC00000u), 0x7FC0},  // the quiet NaN
      {BitsFloat(0xFFC00000u), 0xFFC0},
      {BitsFloat(0x7F800001u), 0x7FC0},  // signalling, payload in the low bits only
      {BitsFloat(0x7F810000u), 0x7FC1},  // signalling, payload kept, made quiet
      {BitsFloat(0x7FFFFFFFu), 0x7FFF},  // not rounded up into the sign
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(c.x);
  std::vector<uint16_t> out(in.size());
  EncodeBf16(in.data(), in.size(), out.data());
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i, FloatBits(cases[i].x));
    CHECK(FloatToBf16(cases[i].x) == cases[i].expected);
    CHECK(out[i] == cases[i].expected);
    CHECK(ReferenceBf16(cases[i].x) == cases[i].expected);
  }
}

// Every float, through the scalar fp16 code and the F16C kernel, and through the bf16 code and its
// reference: minutes unoptimised, so not run by default (`half_test "[exhaustive]"`, best with
// -c opt).
TEST_CASE("every float encodes alike on every path", "[.][exhaustive][half]") {
  constexpr uint64_t kBlock = 1 << 20;
  std::vector<float> in(kBlock);
  std::vector<uint16_t> scalar(kBlock), f16c(kBlock), bf16(kBlock);
  uint64_t mismatches = 0;
  for (uint64_t start = 0; start < (uint64_t{1} << 32); start += kBlock) {
    for (uint64_t i = 0; i < kBlock; ++i) in[i] = BitsFloat(static_cast<uint32_t>(start + i));
    half_internal::EncodeFp16Portable(in.data(), kBlock, scalar.data());
    if (half_internal::HasF16c()) {
      half_internal::EncodeFp16F16c(in.data(), kBlock, f16c.data());
      mismatches += !(scalar == f16c);
    }
    EncodeBf16(in.data(), kBlock, bf16.data());
    for (uint64_t i = 0; i < kBlock; ++i) {
      if (bf16[i] != ReferenceBf16(in[i]) || scalar[i] != ReferenceFp16(in[i])) ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}

}  // namespace
}  // namespace ps

// 16-bit floats for compact stored weights (issue 35): IEEE binary16 ("fp16": 1 sign, 5 exponent,
// 10 fraction bits) and bfloat16 ("bf16": the top 16 bits of a float, 8 exponent and 7 fraction
// bits), held as uint16_t bit patterns. Arithmetic stays in float: a row is decoded, updated in
// float and encoded again.
//
// Encoding (float -> 16 bits) rounds to nearest, ties to even, as IEEE 754 and the hardware
// converters (x86 F16C's vcvtps2ph with round-to-nearest, CUDA's __float2half_rn and
// __float2bfloat16_rn) do:
//   - Signed zeros keep their sign. Values too small for the format's smallest subnormal round to
//     zero or to that subnormal by the same rule (fp16: 2^-24; |x| <= 2^-25 gives zero; bf16
//     keeps float's subnormals).
//   - Overflow: fp16's largest finite value is 65504; a float of magnitude >= 65520 (the midpoint
//     to the next power of two, which rounds to even 2^16) encodes as infinity with its sign, and
//     everything below 65520 rounds to at most 65504. Fp16Overflow::kSaturate instead gives
//     +-65504 for every finite float beyond the range, so a finite weight never becomes infinite
//     (infinities and NaNs still encode as themselves). bf16 has float's range: only floats within
//     half a bf16 step of FLT_MAX (>= 0x1.ffp127 in magnitude) overflow, to infinity, with no
//     saturating form.
//   - NaN stays NaN with its sign and is made quiet: the top fraction bits of the float are kept
//     (fp16: 10, bf16: 7) and the highest of them, the quiet bit, is set, which is what
//     vcvtps2ph does; a NaN never becomes infinity.
// Decoding (16 bits -> float) is exact: every fp16 and bf16 value is a float. An fp16 signalling
// NaN decodes to the quiet NaN with the same payload, as vcvtph2ps does; bf16 decoding is the
// shift by 16 and keeps every bit. So Encode(Decode(h)) == h for every h that is not a NaN, and
// a NaN comes back as the same NaN made quiet.
//
// The bulk functions convert n values; `in` and `out` must not overlap. EncodeFp16 and DecodeFp16
// use F16C's 8-wide conversions when the CPU has them (checked once at run time), and otherwise
// portable code with bit-identical results (half_test checks both on edge cases and many random
// floats); the bf16 loops are plain bit arithmetic that the compiler vectorises. All are
// thread-safe (no state but the CPU check, done once).
#ifndef PS_COMMON_HALF_H_
#define PS_COMMON_HALF_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ps {

// What fp16 encoding does with finite floats beyond its largest finite value, 65504.
enum class Fp16Overflow {
  kInfinity,  // IEEE: magnitudes >= 65520 become infinity with their sign
  kSaturate,  // finite floats clamp to +-65504; infinities and NaNs encode as themselves
};

namespace half_internal {

inline uint32_t FloatBits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

inline float BitsFloat(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

}  // namespace half_internal

// The fp16 bit pattern nearest to `x` (module comment: ties to even, overflow by `overflow`).
// Computed without branches (every case, then selects), so that rounding decisions on real data
// cost no mispredictions.
inline uint16_t FloatToFp16(float x, Fp16Overflow overflow = Fp16Overflow::kInfinity) {
  const uint32_t bits = half_internal::FloatBits(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  // A normal half (2^-14 <= |x| < 65520): rebias the exponent by 127 - 15 and drop 13 bits.
  // Adding 0xFFF plus the lowest kept bit carries exactly when the dropped bits are above half, or
  // half with an odd kept part: round to nearest, ties to even. A carry moves into the exponent,
  // rightly.
  const uint32_t normal = (abs - 0x38000000u + 0xFFFu + ((abs >> 13) & 1u)) >> 13;
  // A subnormal half (|x| < 2^-14): the significand with its implicit bit in units of 2^-24,
  // rounded the same way; 2^-14 minus a little rounds up to the first normal. The shift is capped
  // at 31, where everything (|x| < 2^-32, float subnormals included) rounds to 0.
  const int32_t exponent = static_cast<int32_t>(abs >> 23);
  const int32_t uncapped = 126 - exponent;
  const int32_t shift = uncapped < 1 ? 1 : uncapped > 31 ? 31 : uncapped;
  const uint32_t significand = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t subnormal =
      (significand + (1u << (shift - 1)) - 1u + ((significand >> shift) & 1u)) >> shift;
  uint32_t result = abs < 0x38800000u ? subnormal : normal;
  // >= 65520, the midpoint between the largest finite half and 2^16: infinity, or saturated.
  const uint32_t too_large = overflow == Fp16Overflow::kSaturate ? 0x7BFFu : 0x7C00u;
  result = abs >= 0x477FF000u ? too_large : result;
  // Infinity, or a NaN made quiet with the top 10 bits of its payload.
  const uint32_t special = 0x7C00u | (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0u);
  result = abs >= 0x7F800000u ? special : result;
  return static_cast<uint16_t>(sign | result);
}

// The float that the fp16 pattern `h` holds, exactly (a signalling NaN is made quiet).
inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t fraction = h & 0x3FFu;
  if (exponent == 0x1Fu) {  // infinity, or NaN made quiet
    return half_internal::BitsFloat(sign | 0x7F800000u |
                                    (fraction != 0 ? 0x400000u | (fraction << 13) : 0u));
  }
  if (exponent != 0) {  // normal: rebias the exponent
    return half_internal::BitsFloat(sign | ((exponent + 112u) << 23) | (fraction << 13));
  }
  // Zero or subnormal: fraction * 2^-24, exact in float.
  const float magnitude = static_cast<float>(fraction) * 0x1.0p-24f;
  return half_internal::BitsFloat(sign | half_internal::FloatBits(magnitude));
}

// The bf16 bit pattern nearest to `x` (module comment: ties to even; NaN stays a quiet NaN).
inline uint16_t FloatToBf16(float x) {
  const uint32_t bits = half_internal::FloatBits(x);
  // Adding 0x7FFF plus the lowest kept bit rounds the dropped half to nearest, ties to even; a
  // carry moves into the exponent, and past the largest finite value into infinity, rightly.
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

// The float that the bf16 pattern `h` holds: its 16 bits followed by 16 zeros.
inline float Bf16ToFloat(uint16_t h) { return half_internal::BitsFloat(uint32_t{h} << 16); }

// out[i] = FloatToFp16(in[i], overflow) for i < n.
void EncodeFp16(const float* in, size_t n, uint16_t* out,
                Fp16Overflow overflow = Fp16Overflow::kInfinity);

// out[i] = Fp16ToFloat(in[i]) for i < n.
void DecodeFp16(const uint16_t* in, size_t n, float* out);

// out[i] = FloatToBf16(in[i]) for i < n.
void EncodeBf16(const float* in, size_t n, uint16_t* out);

// out[i] = Bf16ToFloat(in[i]) for i < n.
void DecodeBf16(const uint16_t* in, size_t n, float* out);

}  // namespace ps

#endif  // PS_COMMON_HALF_H_

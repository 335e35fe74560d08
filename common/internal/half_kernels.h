// The two implementations behind common/half.h's EncodeFp16 and DecodeFp16, named so that
// half_test can run both and compare them bit for bit. Not for other callers: half.h picks one.
#ifndef PS_COMMON_INTERNAL_HALF_KERNELS_H_
#define PS_COMMON_INTERNAL_HALF_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace ps {
namespace half_internal {

// Whether this build has the F16C kernels and the CPU they run on has F16C and AVX (checked once).
bool HasF16c();

// IEEE encoding (Fp16Overflow::kInfinity) and exact decoding, one value at a time with half.h's
// inline functions.
void EncodeFp16Portable(const float* in, size_t n, uint16_t* out);
void DecodeFp16Portable(const uint16_t* in, size_t n, float* out);

// The same with F16C's vcvtps2ph (round to nearest even) and vcvtph2ps, 8 values at a time.
// Only when HasF16c().
void EncodeFp16F16c(const float* in, size_t n, uint16_t* out);
void DecodeFp16F16c(const uint16_t* in, size_t n, float* out);

}  // namespace half_internal
}  // namespace ps

#endif  // PS_COMMON_INTERNAL_HALF_KERNELS_H_

#include "common/half.h"

#include <algorithm>

#include "common/internal/half_kernels.h"

// The F16C kernels are compiled for x86 with GCC or Clang, whatever the build's -m flags: the
// functions carry their own target attribute, and run only after the CPU check.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define PS_HALF_F16C_KERNELS 1
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace ps {
namespace half_internal {

void EncodeFp16Portable(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToFp16(in[i]);
}

void DecodeFp16Portable(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp16ToFloat(in[i]);
}

#ifdef PS_HALF_F16C_KERNELS

namespace {

// CPUID leaf 1 has F16C and AVX, and the OS saves the YMM registers (XCR0 bits 1 and 2) that
// the 8-wide conversions use. By hand: Clang 14's __builtin_cpu_supports knows no "f16c".
bool CpuHasF16c() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const unsigned needed = bit_OSXSAVE | bit_AVX | bit_F16C;
  if ((ecx & needed) != needed) return false;
  unsigned xcr0, xcr0_high;
  __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
  return (xcr0 & 6u) == 6u;
}

}  // namespace

bool HasF16c() {
  static const bool has = CpuHasF16c();
  return has;
}

// The last n % 8 values go through a zero-padded block of 8, so every value is converted by the
// same instruction.
__attribute__((target("avx,f16c"))) void EncodeFp16F16c(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  if (i < n) {
    alignas(32) float block[8] = {};
    alignas(16) uint16_t halves[8];
    std::copy(in + i, in + n, block);
    _mm_store_si128(reinterpret_cast<__m128i*>(halves),
                    _mm256_cvtps_ph(_mm256_load_ps(block), _MM_FROUND_TO_NEAREST_INT));
    std::copy(halves, halves + (n - i), out + i);
  }
}

__attribute__((target("avx,f16c"))) void DecodeFp16F16c(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  if (i < n) {
    alignas(16) uint16_t halves[8] = {};
    alignas(32) float block[8];
    std::copy(in + i, in + n, halves);
    _mm256_store_ps(block, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<__m128i*>(halves))));
    std::copy(block, block + (n - i), out + i);
  }
}

#else  // no F16C kernels in this build: HasF16c() is false and these are never chosen

bool HasF16c() { return false; }

void EncodeFp16F16c(const float* in, size_t n, uint16_t* out) { EncodeFp16Portable(in, n, out); }

void DecodeFp16F16c(const uint16_t* in, size_t n, float* out) { DecodeFp16Portable(in, n, out); }

#endif  // PS_HALF_F16C_KERNELS

}  // namespace half_internal

namespace {

// Saturation after IEEE encoding: an infinity that came from a finite float becomes the largest
// finite half of its sign (0x7C00 - 1 = 0x7BFF, 0xFC00 - 1 = 0xFBFF). A branch-free loop.
void Saturate(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t finite = (half_internal::FloatBits(in[i]) & 0x7F800000u) != 0x7F800000u;
    const uint32_t infinite = (out[i] & 0x7FFFu) == 0x7C00u;
    out[i] = static_cast<uint16_t>(out[i] - (finite & infinite));
  }
}

}  // namespace

void EncodeFp16(const float* in, size_t n, uint16_t* out, Fp16Overflow overflow) {
  // In blocks, so that saturation reads what was just written while it is in the cache.
  constexpr size_t kBlock = 4096;
  const bool f16c = half_internal::HasF16c();
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t count = std::min(kBlock, n - at);
    if (f16c) {
      half_internal::EncodeFp16F16c(in + at, count, out + at);
    } else {
      half_internal::EncodeFp16Portable(in + at, count, out + at);
    }
    if (overflow == Fp16Overflow::kSaturate) Saturate(in + at, count, out + at);
  }
}

void DecodeFp16(const uint16_t* in, size_t n, float* out) {
  if (half_internal::HasF16c()) {
    half_internal::DecodeFp16F16c(in, n, out);
  } else {
    half_internal::DecodeFp16Portable(in, n, out);
  }
}

void EncodeBf16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

void DecodeBf16(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

}  // namespace ps

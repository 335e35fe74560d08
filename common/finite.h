// A fast check that a float buffer holds no NaN or Inf, for validating gradients on the hot path.
#ifndef PS_COMMON_FINITE_H_
#define PS_COMMON_FINITE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ps {

// True iff none of data[0..n) is NaN or +-Inf (exponent bits all ones). Integer operations only
// (no fast-math needed), 16 floats a round with SSE2: GCC at -O2 does not vectorise the plain
// loop, which then cost 5% of a server's time on pushes.
inline bool AllFinite(const float* data, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i exponent = _mm_set1_epi32(0x7f800000);
  __m128i bad4 = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16) {
    for (size_t j = 0; j < 16; j += 4) {
      const __m128i v =
          _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i + j)), exponent);
      bad4 = _mm_or_si128(bad4, _mm_cmpeq_epi32(v, exponent));
    }
  }
  if (_mm_movemask_epi8(bad4) != 0) return false;
#endif
  uint32_t bad = 0;
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// AllFinite over pieces (rows checked one by one inside another loop), with one answer at the
// end: the pieces' SSE2 results are or-ed without a branch per piece.
class FiniteCheck {
 public:
  void Add(const float* data, size_t n) {
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i exponent = _mm_set1_epi32(0x7f800000);
    for (; i + 4 <= n; i += 4) {
      const __m128i v =
          _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i)), exponent);
      bad4_ = _mm_or_si128(bad4_, _mm_cmpeq_epi32(v, exponent));
    }
#endif
    for (; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i, sizeof(bits));
      bad_ |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
  }

  // Whether everything added was finite.
  bool ok() const {
#if defined(__SSE2__)
    if (_mm_movemask_epi8(bad4_) != 0) return false;
#endif
    return bad_ == 0;
  }

 private:
#if defined(__SSE2__)
  __m128i bad4_ = _mm_setzero_si128();
#endif
  uint32_t bad_ = 0;
};

}  // namespace ps

#endif  // PS_COMMON_FINITE_H_

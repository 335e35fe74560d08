// A fast check that a float buffer holds no NaN or Inf, for validating gradients on the hot path.
#ifndef PS_COMMON_FINITE_H_
#define PS_COMMON_FINITE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ps {

// True iff none of data[0..n) is NaN or +-Inf (exponent bits all ones). Integer operations only,
// so the compiler vectorises the loop without fast-math.
inline bool AllFinite(const float* data, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace ps

#endif  // PS_COMMON_FINITE_H_

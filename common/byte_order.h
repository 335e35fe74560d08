// Byte order of the integers that the wire and the files fix: the key hash reads an id's 8
// little-endian bytes (common/hash.h), row initializers hash values the same way, checkpoint keys
// carry big-endian numbers so that they sort as numbers.
//
// Our own few lines instead of Abseil's `absl/base/internal/endian.h`, which is internal to Abseil
// and may change or vanish between its releases, while these conversions are part of the project's
// on-disk and on-wire contract. Every function is inline and pure (thread-safe).
#ifndef PS_COMMON_BYTE_ORDER_H_
#define PS_COMMON_BYTE_ORDER_H_

#include <cstdint>

#if !defined(__BYTE_ORDER__) || !defined(__ORDER_LITTLE_ENDIAN__) || \
    !defined(__ORDER_BIG_ENDIAN__)
#error "common/byte_order.h needs the compiler's __BYTE_ORDER__ (GCC and Clang define it)"
#endif

namespace ps {

// True on hosts that store integers least significant byte first (x86-64, AArch64 as run here).
inline constexpr bool kHostIsLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

// The value whose in-memory bytes are `v`'s in little-endian order (the identity on
// little-endian hosts, a byte swap on big-endian ones). Its own inverse.
inline uint64_t LittleEndian64(uint64_t v) {
  return kHostIsLittleEndian ? v : __builtin_bswap64(v);
}

// The value whose in-memory bytes are `v`'s in big-endian (network) order. Its own inverse.
inline uint32_t BigEndian32(uint32_t v) { return kHostIsLittleEndian ? __builtin_bswap32(v) : v; }
inline uint64_t BigEndian64(uint64_t v) { return kHostIsLittleEndian ? __builtin_bswap64(v) : v; }

}  // namespace ps

#endif  // PS_COMMON_BYTE_ORDER_H_

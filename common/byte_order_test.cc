#include "common/byte_order.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>

namespace ps {
namespace {

// The bytes of an integer as it lies in memory.
template <typename T>
void BytesOf(T v, unsigned char* out) {
  std::memcpy(out, &v, sizeof(v));
}

TEST_CASE("LittleEndian64 lays the least significant byte first", "[common][byte_order]") {
  unsigned char b[8];
  BytesOf(LittleEndian64(0x0102030405060708ull), b);
  const unsigned char want[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  CHECK(std::memcmp(b, want, 8) == 0);
  CHECK(LittleEndian64(LittleEndian64(0xdeadbeefcafef00dull)) == 0xdeadbeefcafef00dull);
}

TEST_CASE("BigEndian32 and BigEndian64 lay the most significant byte first",
          "[common][byte_order]") {
  unsigned char b4[4];
  BytesOf(BigEndian32(0x01020304u), b4);
  const unsigned char want4[4] = {0x01, 0x02, 0x03, 0x04};
  CHECK(std::memcmp(b4, want4, 4) == 0);
  unsigned char b8[8];
  BytesOf(BigEndian64(0x0102030405060708ull), b8);
  const unsigned char want8[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
  CHECK(std::memcmp(b8, want8, 8) == 0);
  CHECK(BigEndian32(BigEndian32(0x89abcdefu)) == 0x89abcdefu);
  CHECK(BigEndian64(BigEndian64(0x0123456789abcdefull)) == 0x0123456789abcdefull);
}

}  // namespace
}  // namespace ps

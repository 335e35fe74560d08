// Seeded test data for the AllReduce tests and their rank processes.
#ifndef PS_WORKER_COLLECTIVE_INTERNAL_RANDOM_VALUES_FOR_TEST_H_
#define PS_WORKER_COLLECTIVE_INTERNAL_RANDOM_VALUES_FOR_TEST_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace ps {
namespace worker {
namespace internal {

// Rank `rank`'s `n` values in round `round`: floats of mixed signs and magnitudes (2^-8 to 2^8),
// so that sums round and the order of additions shows. The same on every call and machine.
inline std::vector<float> RandomValues(int rank, int round, size_t n) {
  std::mt19937 random(1000 * round + rank + 7);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-8, 8);
  std::vector<float> values(n);
  for (float& v : values) v = std::ldexp(mantissa(random), exponent(random));
  return values;
}

// The serial sum over ranks [0, ranks) of RandomValues(rank, round, n), in rank order.
inline std::vector<float> SerialSum(int ranks, int round, size_t n) {
  std::vector<float> sum = RandomValues(0, round, n);
  for (int rank = 1; rank < ranks; ++rank) {
    const std::vector<float> values = RandomValues(rank, round, n);
    for (size_t i = 0; i < n; ++i) sum[i] += values[i];
  }
  return sum;
}

// FNV-1a over the floats' bytes: equal digests for bit-identical buffers.
inline uint64_t Digest(const std::vector<float>& values) {
  uint64_t hash = 14695981039346656037ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (size_t i = 0; i < values.size() * sizeof(float); ++i) {
    hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  return hash;
}

}  // namespace internal
}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_INTERNAL_RANDOM_VALUES_FOR_TEST_H_

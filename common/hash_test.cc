#include "common/hash.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ps {
namespace {

// These values are part of the on-disk and on-wire contract (shard maps, checkpoints): if this test
// fails, the hash changed and every existing cluster would route keys to the wrong shards.
// proto/ps.proto quotes them (rule 2 of its wire contract) as test vectors for clients in other
// languages: change neither without the other.
TEST_CASE("hash values are pinned", "[common][hash]") {
  // XXH3-64 of the empty input, the published test vector of the specification.
  CHECK(NameHash("") == 0x2d06800538d394c2ull);
  const uint64_t user = NameHash("user");
  CHECK(user == 0x99e389d25c10af32ull);
  CHECK(KeyHash(user, 0) == 0x0e0d26d4d1ab87afull);
  CHECK(KeyHash(user, 1) == 0x3bdb682a6fa2b5ccull);
  CHECK(KeyHash(user, 42) == 0xc9f8bb4ca24dddb5ull);
  CHECK(KeyHash(user, 0xffffffffffffffffull) == 0x87a3633a7538f147ull);
  CHECK(KeyHash(user, 1234567890123ull) == 0x5f5340b4fecfabf4ull);
  CHECK(ShardOf(user, 0, 64) == 3);
  CHECK(ShardOf(user, 1, 64) == 14);
  CHECK(ShardOf(user, 42, 64) == 50);
  CHECK(ShardOf(user, 42, 7) == 5);
  CHECK(ShardOf(user, 1234567890123ull, 7) == 2);
  CHECK(ShardOf(user, 1234567890123ull, 64) == 23);
  CHECK(ShardOf(user, 0, 7) == 0);
  CHECK(ShardOf(user, 0xffffffffffffffffull, 64) == 33);
  // The id is hashed as its 8 little-endian bytes: 08 07 06 05 04 03 02 01.
  CHECK(KeyHash(user, 0x0102030405060708ull) == 0x06ede54ddeee863dull);
  CHECK(ShardOf(user, 0x0102030405060708ull, 64) == 1);
  // Dense chunks: the tensor's name, and the chunk index as the id.
  const uint64_t mlp = NameHash("mlp");
  CHECK(mlp == 0xe23ff8f6a8dec6c2ull);
  CHECK(KeyHash(mlp, 0) == 0x91df0e043a7738f0ull);
  CHECK(KeyHash(mlp, 1) == 0x048b8e179af74de5ull);
  CHECK(KeyHash(mlp, 2) == 0xd9a771d6e59f9034ull);
  CHECK(ShardOf(mlp, 0, 64) == 36);
  CHECK(ShardOf(mlp, 1, 64) == 1);
  CHECK(ShardOf(mlp, 2, 64) == 54);
}

TEST_CASE("sequential ids spread evenly over the shards", "[common][hash]") {
  const uint32_t num_shards = GENERATE(7u, 64u, 1000u);
  const uint64_t table = NameHash("item");
  const int n = 1 << 20;
  std::vector<int> counts(num_shards, 0);
  for (int id = 0; id < n; ++id) {
    const uint32_t s = ShardOf(table, static_cast<uint64_t>(id), num_shards);
    REQUIRE(s < num_shards);
    ++counts[s];
  }
  // Chi-square against the uniform distribution: with k-1 degrees of freedom its mean is k-1 and
  // its standard deviation sqrt(2(k-1)); 6 standard deviations above is a certain failure of mixing.
  const double expected = static_cast<double>(n) / num_shards;
  double chi2 = 0;
  for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  const double dof = num_shards - 1;
  CHECK(chi2 < dof + 6 * std::sqrt(2 * dof));
}

TEST_CASE("different tables partition the same ids differently", "[common][hash]") {
  const uint64_t a = NameHash("user");
  const uint64_t b = NameHash("item");
  int same = 0;
  const int n = 100000;
  for (int id = 0; id < n; ++id) same += ShardOf(a, id, 64) == ShardOf(b, id, 64);
  // Independent assignments agree on about 1/64 of the ids.
  CHECK(same > n / 64 / 2);
  CHECK(same < n / 64 * 2);
}

TEST_CASE("flipping one input bit flips about half the hash bits", "[common][hash]") {
  const uint64_t table = NameHash("t");
  double total = 0;
  int trials = 0;
  for (uint64_t id = 1; id < 2000; id += 7) {
    for (int bit = 0; bit < 64; ++bit) {
      const uint64_t d = KeyHash(table, id) ^ KeyHash(table, id ^ (uint64_t{1} << bit));
      total += __builtin_popcountll(d);
      ++trials;
    }
  }
  const double mean = total / trials;
  CHECK(mean > 31.0);
  CHECK(mean < 33.0);
}

}  // namespace
}  // namespace ps

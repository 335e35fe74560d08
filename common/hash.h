// Key-to-shard partitioning.
//
// A sparse key is (table, id); a dense chunk is (tensor name, chunk index). Both are hashed with
// XXH3-64 (xxHash 0.8's stable specification): the name's bytes give a 64-bit seed, the id's 8
// little-endian bytes are hashed with that seed. The result is the same on every platform and every
// release of this project (common/hash_test.cc pins values): shard maps, checkpoints and replicas
// depend on it, so these functions must never change.
#ifndef PS_COMMON_HASH_H_
#define PS_COMMON_HASH_H_

#include <cstdint>

#include "absl/numeric/int128.h"
#include "absl/strings/string_view.h"
// Inlined: @system//:xxhash defines XXH_INLINE_ALL for everything that depends on it, so hashing
// an 8-byte id is a few multiplies with no call into libxxhash.
#include "xxhash.h"

#include "common/byte_order.h"

namespace ps {

// The hash of a table or dense tensor name; compute it once per table, not per key.
inline uint64_t NameHash(absl::string_view name) {
  return XXH3_64bits(name.data(), name.size());
}

// The well-mixed 64-bit hash of `id` in the table whose NameHash is `name_hash`.
inline uint64_t KeyHash(uint64_t name_hash, uint64_t id) {
  const uint64_t le = LittleEndian64(id);
  return XXH3_64bits_withSeed(&le, sizeof(le), name_hash);
}

// Maps a key hash to one of `num_shards` shards (num_shards > 0) using the hash's high bits
// (multiply-shift, Lemire's "fastrange"): as even as `%` and without a division.
inline uint32_t ShardOfHash(uint64_t key_hash, uint32_t num_shards) {
  return static_cast<uint32_t>(
      absl::Uint128High64(absl::uint128(key_hash) * absl::uint128(num_shards)));
}

// The shard of (table, id): ShardOfHash(KeyHash(name_hash, id), num_shards).
inline uint32_t ShardOf(uint64_t name_hash, uint64_t id, uint32_t num_shards) {
  return ShardOfHash(KeyHash(name_hash, id), num_shards);
}

}  // namespace ps

#endif  // PS_COMMON_HASH_H_

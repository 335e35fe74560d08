#include "client/internal/key_router.h"

#include <algorithm>
#include <numeric>

#include "common/hash.h"

namespace ps {
namespace client_internal {
namespace {

// Appends the segments [shard, begin, count) to parts, starting new parts at server changes and
// when a part is full.
void AddSegment(uint32_t server, uint32_t shard, uint32_t begin, uint32_t count,
                uint32_t max_keys, std::vector<Part>* parts) {
  while (count > 0) {
    if (parts->empty() || parts->back().server != server || parts->back().num_keys >= max_keys) {
      parts->emplace_back();
      parts->back().server = server;
    }
    Part& part = parts->back();
    const uint32_t take = std::min(count, max_keys - part.num_keys);
    part.segments.push_back(Segment{shard, begin, take});
    part.num_keys += take;
    begin += take;
    count -= take;
  }
}

}  // namespace

KeyPlan PlanKeys(absl::Span<const uint64_t> keys, uint64_t name_hash,
                 absl::Span<const uint32_t> shard_to_server, uint32_t max_keys_per_part) {
  const uint32_t num_shards = static_cast<uint32_t>(shard_to_server.size());
  const size_t n = keys.size();
  KeyPlan plan;
  plan.inverse.resize(n);
  if (n == 0) return plan;

  // Shards in (server, shard) order, so that every server's keys end up contiguous.
  std::vector<uint32_t> shard_order(num_shards);
  std::iota(shard_order.begin(), shard_order.end(), 0);
  std::stable_sort(shard_order.begin(), shard_order.end(), [&](uint32_t a, uint32_t b) {
    return shard_to_server[a] < shard_to_server[b];
  });
  std::vector<uint32_t> rank_of_shard(num_shards);
  for (uint32_t r = 0; r < num_shards; ++r) rank_of_shard[shard_order[r]] = r;

  // Counting sort of the key positions by shard rank.
  std::vector<uint64_t> hashes(n);
  std::vector<uint32_t> rank_of_key(n);
  std::vector<uint32_t> start(num_shards + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    hashes[i] = KeyHash(name_hash, keys[i]);
    rank_of_key[i] = rank_of_shard[ShardOfHash(hashes[i], num_shards)];
    ++start[rank_of_key[i] + 1];
  }
  for (uint32_t r = 0; r < num_shards; ++r) start[r + 1] += start[r];
  std::vector<uint32_t> order(n);
  {
    std::vector<uint32_t> fill(start.begin(), start.end() - 1);
    for (size_t i = 0; i < n; ++i) order[fill[rank_of_key[i]]++] = static_cast<uint32_t>(i);
  }

  plan.shard_begin.assign(num_shards, 0);
  plan.shard_end.assign(num_shards, 0);
  // Dedupe within each shard with a small open-addressing table (indexes into `unique`, +1).
  plan.unique.reserve(n);
  std::vector<uint32_t> table;
  for (uint32_t r = 0; r < num_shards; ++r) {
    const uint32_t lo = start[r];
    const uint32_t hi = start[r + 1];
    if (lo == hi) continue;
    size_t capacity = 16;
    while (capacity < 2 * static_cast<size_t>(hi - lo)) capacity *= 2;
    table.assign(capacity, 0);
    const size_t mask = capacity - 1;
    const uint32_t first_unique = static_cast<uint32_t>(plan.unique.size());
    for (uint32_t p = lo; p < hi; ++p) {
      const uint32_t i = order[p];
      // The low bits: the high bits chose the shard and are nearly equal within it.
      size_t slot = static_cast<size_t>(hashes[i]) & mask;
      while (true) {
        const uint32_t u = table[slot];
        if (u == 0) {
          plan.unique.push_back(keys[i]);
          table[slot] = static_cast<uint32_t>(plan.unique.size());
          plan.inverse[i] = static_cast<uint32_t>(plan.unique.size() - 1);
          break;
        }
        if (plan.unique[u - 1] == keys[i]) {
          plan.inverse[i] = u - 1;
          break;
        }
        slot = (slot + 1) & mask;
      }
    }
    const uint32_t shard = shard_order[r];
    plan.shard_begin[shard] = lo;
    plan.shard_end[shard] = hi;
    AddSegment(shard_to_server[shard], shard, first_unique,
               static_cast<uint32_t>(plan.unique.size()) - first_unique, max_keys_per_part,
               &plan.parts);
  }
  plan.order = std::move(order);
  return plan;
}

std::vector<Part> Reroute(const Part& part, absl::Span<const uint32_t> shard_to_server) {
  std::vector<Part> parts;
  for (const Segment& segment : part.segments) {
    const uint32_t server = shard_to_server[segment.shard];
    auto it = std::find_if(parts.begin(), parts.end(),
                           [server](const Part& p) { return p.server == server; });
    if (it == parts.end()) {
      parts.emplace_back();
      parts.back().server = server;
      it = parts.end() - 1;
    }
    it->segments.push_back(segment);
    it->num_keys += segment.count;
  }
  return parts;
}

}  // namespace client_internal
}  // namespace ps

#include "client/internal/key_router.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>

#include "common/finite.h"
#include "common/hash.h"

namespace ps {
namespace client_internal {
namespace {

// Appends the segments [shard, begin, count) to parts, starting new parts at server changes and
// when a part is full.
void AddSegment(uint32_t server, uint32_t shard, uint32_t begin, uint32_t count, uint32_t max_keys,
                std::vector<Part>* parts) {
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

// log2 of the dedupe table's size for `keys` keys: at least twice as many slots, at least 16.
int TableBits(uint32_t keys) {
  int bits = 4;
  while ((size_t{1} << bits) < 2 * static_cast<size_t>(keys)) ++bits;
  return bits;
}

}  // namespace

KeyPlan PlanKeys(absl::Span<const uint64_t> keys, uint64_t name_hash,
                 absl::Span<const uint32_t> shard_to_server, uint32_t max_keys_per_part,
                 absl::Span<const float> rows, uint32_t dim) {
  const uint32_t num_shards = static_cast<uint32_t>(shard_to_server.size());
  const size_t n = keys.size();
  KeyPlan plan;
  plan.shard_begin.assign(num_shards, 0);
  plan.shard_end.assign(num_shards, 0);
  if (n == 0) return plan;

  // Shards in (server, shard) order, so that every server's keys end up contiguous.
  std::vector<uint32_t> shard_order(num_shards);
  std::iota(shard_order.begin(), shard_order.end(), 0);
  std::stable_sort(shard_order.begin(), shard_order.end(),
                   [&](uint32_t a, uint32_t b) { return shard_to_server[a] < shard_to_server[b]; });
  std::vector<uint32_t> rank_of_shard(num_shards);
  for (uint32_t r = 0; r < num_shards; ++r) rank_of_shard[shard_order[r]] = r;

  // Counting sort by shard rank, moving each key with its hash and position, so that the dedupe
  // below reads sequentially.
  // Scratch arrays are left uninitialised: every element is written before it is read.
  std::unique_ptr<uint32_t[]> rank_of_key(new uint32_t[n]);
  std::vector<uint32_t> start(num_shards + 1, 0);
  if (rows.empty()) {
    for (size_t i = 0; i < n; ++i) {
      rank_of_key[i] = rank_of_shard[ShardOf(name_hash, keys[i], num_shards)];
      ++start[rank_of_key[i] + 1];
    }
  } else {
    // The rows' loads overlap the keys' hashing.
    FiniteCheck finite;
    for (size_t i = 0; i < n; ++i) {
      rank_of_key[i] = rank_of_shard[ShardOf(name_hash, keys[i], num_shards)];
      ++start[rank_of_key[i] + 1];
      finite.Add(rows.data() + i * dim, dim);
    }
    plan.rows_finite = finite.ok();
  }
  for (uint32_t r = 0; r < num_shards; ++r) start[r + 1] += start[r];
  std::unique_ptr<uint64_t[]> sorted_keys(new uint64_t[n]);
  plan.order.resize(n);
  {
    std::vector<uint32_t> fill(start.begin(), start.end() - 1);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t p = fill[rank_of_key[i]]++;
      sorted_keys[p] = keys[i];
      plan.order[p] = static_cast<uint32_t>(i);
    }
  }

  // Dedupe within each shard with a small open-addressing table (indexes into `unique`, +1),
  // addressed by a multiplicative hash of the key (its shard hash's high bits are nearly equal
  // within a shard). One table serves every shard without being cleared: an entry below the
  // shard's first unique index (+1) was left by an earlier shard and counts as empty.
  plan.unique.reserve(n);
  plan.unique_of.resize(n);
  uint32_t largest = 0;
  for (uint32_t r = 0; r < num_shards; ++r) largest = std::max(largest, start[r + 1] - start[r]);
  std::vector<uint32_t> table(size_t{1} << TableBits(largest), 0);
  for (uint32_t r = 0; r < num_shards; ++r) {
    const uint32_t lo = start[r];
    const uint32_t hi = start[r + 1];
    if (lo == hi) continue;
    const int bits = TableBits(hi - lo);
    const size_t mask = (size_t{1} << bits) - 1;
    const uint32_t first_unique = static_cast<uint32_t>(plan.unique.size());
    for (uint32_t p = lo; p < hi; ++p) {
      const uint64_t key = sorted_keys[p];
      size_t slot = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - bits));
      while (true) {
        const uint32_t u = table[slot];
        if (u <= first_unique) {
          plan.unique.push_back(key);
          table[slot] = static_cast<uint32_t>(plan.unique.size());
          plan.unique_of[p] = static_cast<uint32_t>(plan.unique.size() - 1);
          break;
        }
        if (plan.unique[u - 1] == key) {
          plan.unique_of[p] = u - 1;
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
  return plan;
}

std::optional<KeyPlan> PlanCache::Find(absl::Span<const uint64_t> keys, uint64_t name_hash,
                                       absl::Span<const uint32_t> shard_to_server,
                                       uint32_t max_keys_per_part) const {
  if (keys.size() < kMinKeys) return std::nullopt;
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    const Entry& e = *it;
    if (e.name_hash != name_hash || e.max_keys_per_part != max_keys_per_part ||
        e.keys.size() != keys.size() || e.shard_to_server.size() != shard_to_server.size() ||
        !std::equal(e.shard_to_server.begin(), e.shard_to_server.end(), shard_to_server.begin()) ||
        std::memcmp(e.keys.data(), keys.data(), keys.size() * sizeof(uint64_t)) != 0) {
      continue;
    }
    return e.plan;
  }
  return std::nullopt;
}

void PlanCache::Remember(absl::Span<const uint64_t> keys, uint64_t name_hash,
                         absl::Span<const uint32_t> shard_to_server, uint32_t max_keys_per_part,
                         const KeyPlan& plan) {
  if (keys.size() < kMinKeys || capacity_ == 0) return;
  Entry e;
  e.name_hash = name_hash;
  e.max_keys_per_part = max_keys_per_part;
  e.shard_to_server.assign(shard_to_server.begin(), shard_to_server.end());
  e.keys.assign(keys.begin(), keys.end());
  e.plan = plan;
  absl::MutexLock lock(&mu_);
  entries_.push_back(std::move(e));
  while (entries_.size() > capacity_) entries_.pop_front();
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

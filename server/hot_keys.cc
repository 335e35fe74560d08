#include "server/hot_keys.h"

#include <algorithm>
#include <utility>

#include "absl/numeric/bits.h"

namespace ps {
namespace server {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The index's home bucket of a key: Fibonacci hashing, the high bits of the product.
size_t Home(uint64_t key, size_t mask) {
  return static_cast<size_t>((key * 0x9e3779b97f4a7c15ULL) >> 32) & mask;
}

}  // namespace

HotKeys::HotKeys(const Options& options)
    : capacity_(std::max<uint32_t>(1, options.capacity)),
      sample_every_(std::max<uint32_t>(1, options.sample_every)),
      // At most a quarter full: short probes.
      index_mask_(absl::bit_ceil(size_t{4} * capacity_) - 1),
      rng_(options.seed),
      counters_(capacity_),
      heap_(capacity_),
      heap_at_(capacity_),
      index_(index_mask_ + 1) {}

bool HotKeys::Record(absl::Span<const uint64_t> keys) {
  if (keys.empty()) return true;
  if (!mu_.TryLock()) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const size_t offset = sample_every_ == 1 ? 0 : SplitMix64(&rng_) % sample_every_;
  for (size_t i = offset; i < keys.size(); i += sample_every_) OfferLocked(keys[i], sample_every_);
  mu_.Unlock();
  return true;
}

void HotKeys::Add(uint64_t key, uint64_t weight) {
  absl::MutexLock lock(&mu_);
  OfferLocked(key, weight);
}

std::vector<HotKey> HotKeys::Top(uint32_t k) const {
  std::vector<HotKey> top;
  {
    absl::MutexLock lock(&mu_);
    top.reserve(size_);
    for (uint32_t i = 0; i < size_; ++i) {
      const Counter& c = counters_[heap_[i].slot];
      top.push_back(HotKey{c.key, heap_[i].count, c.error});
    }
  }
  const size_t n = std::min<size_t>(k, top.size());
  std::partial_sort(top.begin(), top.begin() + n, top.end(), [](const HotKey& a, const HotKey& b) {
    return a.count != b.count ? a.count > b.count : a.id < b.id;
  });
  top.resize(n);
  return top;
}

void HotKeys::OfferLocked(uint64_t key, uint64_t weight) {
  const size_t bucket = FindBucketLocked(key);
  if (index_[bucket].slot >= 0) {
    const uint32_t at = heap_at_[index_[bucket].slot];
    heap_[at].count += weight;
    SiftDownLocked(at);
    return;
  }
  if (size_ < capacity_) {
    const uint32_t slot = size_++;
    counters_[slot] = Counter{key, 0};
    index_[bucket] = Bucket{key, static_cast<int32_t>(slot)};
    heap_[slot] = Node{weight, slot};
    heap_at_[slot] = slot;
    SiftUpLocked(slot);
    return;
  }
  // Space-saving: the key takes the place of the smallest count, which becomes its error.
  Node& min = heap_[0];
  Counter& c = counters_[min.slot];
  EraseBucketLocked(FindBucketLocked(c.key));
  c.key = key;
  c.error = min.count;
  min.count += weight;
  // The erase may have moved the bucket the key would go to: find it again.
  index_[FindBucketLocked(key)] = Bucket{key, static_cast<int32_t>(min.slot)};
  SiftDownLocked(0);
}

size_t HotKeys::FindBucketLocked(uint64_t key) const {
  size_t b = Home(key, index_mask_);
  while (index_[b].slot >= 0 && index_[b].key != key) b = (b + 1) & index_mask_;
  return b;
}

void HotKeys::EraseBucketLocked(size_t hole) {
  // Backward-shift deletion: move later entries of the probe run into the hole when their home
  // does not lie cyclically in (hole, j].
  for (size_t j = (hole + 1) & index_mask_; index_[j].slot >= 0; j = (j + 1) & index_mask_) {
    const size_t home = Home(index_[j].key, index_mask_);
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    index_[hole] = index_[j];
    hole = j;
  }
  index_[hole].slot = -1;
}

void HotKeys::SiftUpLocked(uint32_t at) {
  const Node node = heap_[at];
  while (at > 0) {
    const uint32_t parent = (at - 1) / kArity;
    if (heap_[parent].count <= node.count) break;
    heap_[at] = heap_[parent];
    heap_at_[heap_[at].slot] = at;
    at = parent;
  }
  heap_[at] = node;
  heap_at_[node.slot] = at;
}

void HotKeys::SiftDownLocked(uint32_t at) {
  const Node node = heap_[at];
  for (;;) {
    const uint32_t first = kArity * at + 1;
    if (first >= size_) break;
    const uint32_t last = std::min(first + kArity, size_);
    uint32_t smallest = first;
    for (uint32_t c = first + 1; c < last; ++c) {
      if (heap_[c].count < heap_[smallest].count) smallest = c;
    }
    if (node.count <= heap_[smallest].count) break;
    heap_[at] = heap_[smallest];
    heap_at_[heap_[at].slot] = at;
    at = smallest;
  }
  heap_[at] = node;
  heap_at_[node.slot] = at;
}

}  // namespace server
}  // namespace ps

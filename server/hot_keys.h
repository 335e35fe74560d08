// The most frequent keys of a stream, approximately, in constant memory: the space-saving sketch of
// Metwally, Agrawal and El Abbadi ("Efficient computation of frequent and top-k elements in data
// streams", ICDT 2005).
//
// The sketch monitors at most `capacity` keys, each with a count and an error. A monitored key's
// weight adds to its count; an unmonitored key takes the place of the monitored key with the
// smallest count c, inheriting c as its error and c + weight as its count. So for every monitored
// key, with `true` the total weight offered for it since the sketch began:
//
//   count - error <= true <= count,
//
// any key whose true weight exceeds (total weight offered) / capacity is monitored, and a key not
// monitored has a true weight of at most the smallest count (0 while fewer than `capacity` keys
// were ever offered).
//
// On the data path (Record) the sketch sees a sample: every `sample_every`-th key of a request,
// starting at a pseudo-random offset in [0, sample_every), each with weight sample_every, so a
// count estimates keys, not samples. The bounds above then hold for the sampled weights; against
// the keys actually requested a count is an unbiased estimate whose relative noise shrinks as the
// key gets hotter (a key requested n times is sampled about n / sample_every times), which is what
// matters for the keys a top-k lists. A request that finds the sketch busy (another thread in
// Record or Top) is not recorded at all and counted in skipped(): the data path never waits.
#ifndef PS_SERVER_HOT_KEYS_H_
#define PS_SERVER_HOT_KEYS_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace ps {
namespace server {

// One key of a top-k: its estimated count and the count's error (count - error <= true <= count,
// on the sampled weights).
struct HotKey {
  uint64_t id = 0;
  uint64_t count = 0;
  uint64_t error = 0;

  bool operator==(const HotKey& other) const {
    return id == other.id && count == other.count && error == other.error;
  }
};

// A HotKeys sketch: the approximate top keys of one table in one direction (pulled or pushed).
// Thread-safe. Record never blocks: it takes the sketch's lock with TryLock and skips the request
// when the lock is held. Memory is allocated once, at construction: recording allocates nothing.
class HotKeys {
 public:
  // The default number of keys monitored; ServerStatusRequest.hot_keys_k may ask for up to this.
  static constexpr uint32_t kDefaultCapacity = 256;
  // The default sampling: one key in this many.
  // The default sampling: one key in this many. On a stream of distinct keys (the worst case:
  // every sample replaces a counter) a sample costs about 50 ns with the sketch in cache, more
  // when the request's rows have evicted it; ps_bench's pulls of 100k random keys lost 2.8% of
  // their rate to 1 in 64 and more to 1 in 32 (tests/bench/README.md), so the default is 1 in 128.
  // At a million keys a second a server still samples about 8000 keys a second.
  static constexpr uint32_t kDefaultSampleEvery = 128;

  struct Options {
    // Keys monitored; >= 1. Default kDefaultCapacity.
    uint32_t capacity = kDefaultCapacity;
    // Record samples every sample_every-th key of a request, each with weight sample_every; >= 1
    // (1: every key, weight 1). Default kDefaultSampleEvery.
    uint32_t sample_every = kDefaultSampleEvery;
    // Seeds the pseudo-random offsets of the samples, so that a test's stream gives the same
    // sketch on every run. Default 1.
    uint64_t seed = 1;
  };

  HotKeys() : HotKeys(Options()) {}
  explicit HotKeys(const Options& options);

  HotKeys(const HotKeys&) = delete;
  HotKeys& operator=(const HotKeys&) = delete;

  // The data path: offers the sampled keys of one request (see the top of this file). Returns
  // true when they were recorded, false when the sketch was busy and the request was skipped
  // (counted in skipped()). An empty span records nothing and returns true.
  bool Record(absl::Span<const uint64_t> keys) ABSL_LOCKS_EXCLUDED(mu_);

  // Offers `key` with `weight` (>= 1), waiting for the lock: for tests, and for callers that
  // count exactly.
  void Add(uint64_t key, uint64_t weight = 1) ABSL_LOCKS_EXCLUDED(mu_);

  // The min(k, monitored) keys with the highest counts, highest first (equal counts: smaller id
  // first). Waits for the lock, so a Record meanwhile is skipped.
  std::vector<HotKey> Top(uint32_t k) const ABSL_LOCKS_EXCLUDED(mu_);

  // Requests Record skipped because the sketch was busy.
  uint64_t skipped() const { return skipped_.load(std::memory_order_relaxed); }

  uint32_t capacity() const { return capacity_; }
  uint32_t sample_every() const { return sample_every_; }

 private:
  // A monitored key: its count lives in its heap node, next to the counts it is compared with.
  struct Counter {
    uint64_t key = 0;
    uint64_t error = 0;
  };
  struct Node {
    uint64_t count = 0;
    uint32_t slot = 0;  // in counters_
  };
  // An index bucket: the key beside its slot, so that probing reads one array.
  struct Bucket {
    uint64_t key = 0;
    int32_t slot = -1;  // -1: empty
  };
  // The heap has this many children per node: shallower than a binary heap, and a node's
  // children share a cache line or two.
  static constexpr uint32_t kArity = 4;

  void OfferLocked(uint64_t key, uint64_t weight) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The index's bucket holding `key`, or the empty bucket where it would go.
  size_t FindBucketLocked(uint64_t key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Empties `bucket` (which holds a key), moving later keys of its probe run back.
  void EraseBucketLocked(size_t bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Restores the min-heap order of heap_ around position `at`.
  void SiftUpLocked(uint32_t at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SiftDownLocked(uint32_t at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const uint32_t capacity_;
  const uint32_t sample_every_;
  const size_t index_mask_;  // the index has index_mask_ + 1 buckets, a power of two

  std::atomic<uint64_t> skipped_{0};

  mutable absl::Mutex mu_;
  uint64_t rng_ ABSL_GUARDED_BY(mu_);                   // splitmix64 state for the sample offsets
  std::vector<Counter> counters_ ABSL_GUARDED_BY(mu_);  // capacity_ slots, `size_` used
  uint32_t size_ ABSL_GUARDED_BY(mu_) = 0;
  // A kArity-ary min-heap of the used slots by count (heap_[0]: the smallest), and each slot's
  // place in it.
  std::vector<Node> heap_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> heap_at_ ABSL_GUARDED_BY(mu_);
  // Open addressing with linear probing, at most a quarter full: key -> slot.
  std::vector<Bucket> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_HOT_KEYS_H_

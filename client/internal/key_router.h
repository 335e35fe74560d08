// Planning of a sparse call: dedupe keys, group them by server and shard, cut them into requests.
// Private to the client library.
#ifndef PS_CLIENT_INTERNAL_KEY_ROUTER_H_
#define PS_CLIENT_INTERNAL_KEY_ROUTER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace ps {
namespace client_internal {

// Consecutive unique keys [begin, begin + count) of one shard.
struct Segment {
  uint32_t shard = 0;
  uint32_t begin = 0;
  uint32_t count = 0;
};

// The keys of one request to one server.
struct Part {
  uint32_t server = 0;
  std::vector<Segment> segments;
  uint32_t num_keys = 0;
};

// A planned call.
struct KeyPlan {
  // The distinct keys, grouped by server, then shard.
  std::vector<uint64_t> unique;
  // The positions in the call of its keys, grouped by shard: the keys of shard s are at
  // positions order[shard_begin[s]] ... order[shard_end[s] - 1].
  std::vector<uint32_t> order;
  // Beside `order`: the key at position order[p] of the call is unique[unique_of[p]].
  std::vector<uint32_t> unique_of;
  // By shard: where its keys start and end in `order`.
  std::vector<uint32_t> shard_begin;
  std::vector<uint32_t> shard_end;
  std::vector<Part> parts;
  // With `rows` given to PlanKeys: whether every one of them is finite (no NaN or Inf).
  bool rows_finite = true;
};

// Plans a call on `keys` of the table whose NameHash is `name_hash`. `shard_to_server[s]` is the
// server of shard s (its size is the number of shards). Each part holds at most
// `max_keys_per_part` (>= 1) keys and the keys of one server. `rows`, when not empty, holds
// keys.size() rows of `dim` floats (a push's gradients), checked for NaN and Inf in the same pass
// over the keys (KeyPlan::rows_finite) rather than in a pass of their own.
KeyPlan PlanKeys(absl::Span<const uint64_t> keys, uint64_t name_hash,
                 absl::Span<const uint32_t> shard_to_server, uint32_t max_keys_per_part,
                 absl::Span<const float> rows = {}, uint32_t dim = 0);

// The plans of the last few calls, so that a call on the very keys of a recent one (a worker
// pushes the gradients of the distinct keys it has just pulled, in the same order) takes a copy
// of its plan instead of hashing, sorting and deduping the keys again. A plan is found only for
// the same table, the same owners of every shard, the same request size and keys equal element
// by element (compared, not trusted to a pointer). Thread-safe.
class PlanCache {
 public:
  // Calls of fewer keys are cheaper to plan than to compare: not remembered.
  static constexpr size_t kMinKeys = 256;

  // Remembers at most `capacity` plans, the most recent.
  explicit PlanCache(size_t capacity = 4) : capacity_(capacity) {}

  // A copy of the plan remembered for these arguments (its rows_finite is the remembered call's:
  // a push must check its own rows), or nullopt.
  std::optional<KeyPlan> Find(absl::Span<const uint64_t> keys, uint64_t name_hash,
                              absl::Span<const uint32_t> shard_to_server,
                              uint32_t max_keys_per_part) const ABSL_LOCKS_EXCLUDED(mu_);

  // Remembers `plan`, made by PlanKeys for these arguments (nothing for fewer than kMinKeys keys),
  // forgetting the oldest beyond capacity.
  void Remember(absl::Span<const uint64_t> keys, uint64_t name_hash,
                absl::Span<const uint32_t> shard_to_server, uint32_t max_keys_per_part,
                const KeyPlan& plan) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    uint64_t name_hash = 0;
    uint32_t max_keys_per_part = 0;
    std::vector<uint32_t> shard_to_server;
    std::vector<uint64_t> keys;
    KeyPlan plan;
  };

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);  // the most recent last
};

// Regroups the segments of `part` (planned with an older map) by the servers of
// `shard_to_server`, keeping each segment whole.
std::vector<Part> Reroute(const Part& part, absl::Span<const uint32_t> shard_to_server);

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_KEY_ROUTER_H_

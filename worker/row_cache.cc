#include "worker/row_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/admission_sketch.h"

namespace ps {
namespace worker {
namespace {

// An index entry without a slot, and AssignSlots' mark of a key not admitted.
constexpr uint32_t kEmpty = ~uint32_t{0};
constexpr uint32_t kNoSlot = ~uint32_t{0};
constexpr uint64_t kMaxRows = uint64_t{1} << 30;
// The admission sketch's counters a row, at least (128 KiB a table).
constexpr size_t kMinSketchWidth = size_t{1} << 16;

// Keys ahead of the one looked up whose index entry is prefetched, and (half as far) whose slot
// is, once its entry has arrived; and slots ahead of CLOCK's hand whose key's entry is.
constexpr size_t kEntryAhead = 16;
constexpr size_t kSlotAhead = 8;
constexpr uint32_t kVictimAhead = 8;
// Bytes of index and slots from which a table prefetches: below, they stay in a core's own
// caches, and the prefetches' work only adds (row_cache_bench: about 26 against 18 ns a key looked
// up with 2,000 rows).
constexpr size_t kPrefetchFrom = size_t{512} << 10;

}  // namespace

HostRowStorage::HostRowStorage(uint32_t slots, int dim) : dim_(dim), floats_(size_t(slots) * dim) {}

void HostRowStorage::ReadRows(absl::Span<const uint32_t> slots, absl::Span<const uint32_t> places,
                              float* rows) const {
  const size_t bytes = size_t(dim_) * sizeof(float);
  for (size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(rows + size_t(places[i]) * dim_, floats_.data() + size_t(slots[i]) * dim_, bytes);
  }
}

void HostRowStorage::WriteRows(absl::Span<const uint32_t> slots, absl::Span<const uint32_t> places,
                               const float* rows) {
  const size_t bytes = size_t(dim_) * sizeof(float);
  for (size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(floats_.data() + size_t(slots[i]) * dim_, rows + size_t(places[i]) * dim_, bytes);
  }
}

// One table's slots: slot s holds slots[s].key's row (in storage), pulled for slots[s].step.
// Slots [0, used) are taken; the index maps a key to its slot by linear probing. An index entry
// carries the top 32 bits of its key's hash, from which its home follows, so that a probe
// compares within the index and touches a slot only where those bits match; a slot's key, step
// and mark share a cache line. So a lookup of a key not in cache memory waits on memory twice,
// which Lookup and Admit hide by prefetching a few keys ahead.
struct RowCache::Table {
  struct Entry {
    uint32_t hash = 0;  // Hash(key) >> 32
    uint32_t slot = kEmpty;
  };
  struct Slot {
    uint64_t key = 0;
    int64_t step = 0;
    uint8_t referenced = 0;
  };

  int dim = 0;
  uint32_t capacity = 0;
  uint32_t used = 0;
  uint32_t hand = 0;  // CLOCK's
  std::vector<Slot> slots;
  std::vector<Entry> index;
  uint64_t mask = 0;
  int shift = 63;
  std::unique_ptr<RowStorage> storage;
  std::unique_ptr<AdmissionSketch> sketch;  // with min_pulls > 1
  // Whether index and slots outgrow a core's cache (kPrefetchFrom), so that prefetching pays.
  bool prefetch = false;

  // Fibonacci hashing: keys may be small integers, whose low bits alone do not spread. The index
  // has at most 2^31 entries, so shift >= 33 and a home is a function of the hash's top 32 bits.
  static uint32_t Hash(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 32; }
  uint64_t Home(uint32_t hash) const { return hash >> (shift - 32); }
};

RowCache::Options RowCache::OptionsOf(const config::RowCache& row_cache, std::vector<int> dims) {
  Options options;
  options.max_rows = row_cache.max_rows();
  options.refresh_steps = row_cache.refresh_steps();
  options.min_pulls = row_cache.min_pulls();
  options.dims = std::move(dims);
  return options;
}

absl::StatusOr<std::unique_ptr<RowCache>> RowCache::Create(const Options& options) {
  if (options.max_rows < 1 || options.max_rows > kMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat("row cache: max_rows must be between 1 and ",
                                                   kMaxRows, ", got ", options.max_rows));
  }
  if (options.refresh_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("row cache: refresh_steps must be >= 1, got ", options.refresh_steps));
  }
  if (options.min_pulls < 1 || options.min_pulls > AdmissionSketch::kMaxCount) {
    return absl::InvalidArgumentError(absl::StrCat("row cache: min_pulls must be between 1 and ",
                                                   AdmissionSketch::kMaxCount, ", got ",
                                                   options.min_pulls));
  }
  if (options.dims.empty()) return absl::InvalidArgumentError("row cache: no table");
  for (int dim : options.dims) {
    if (dim < 1) return absl::InvalidArgumentError(absl::StrCat("row cache: dim ", dim));
  }
  return std::unique_ptr<RowCache>(new RowCache(options));
}

RowCache::RowCache(const Options& options)
    : refresh_steps_(options.refresh_steps), on_device_(options.on_device) {
  const uint32_t capacity = static_cast<uint32_t>(options.max_rows);
  uint64_t index_size = 16;
  int shift = 60;
  while (index_size < 2 * uint64_t{capacity}) {
    index_size *= 2;
    --shift;
  }
  for (int dim : options.dims) {
    auto t = std::make_unique<Table>();
    t->dim = dim;
    t->capacity = capacity;
    t->slots.resize(capacity);
    t->index.resize(index_size);
    t->prefetch =
        capacity * sizeof(Table::Slot) + index_size * sizeof(Table::Entry) >= kPrefetchFrom;
    t->mask = index_size - 1;
    t->shift = shift;
    if (!options.on_device) t->storage = std::make_unique<HostRowStorage>(capacity, dim);
    if (options.min_pulls > 1) {
      AdmissionOptions admission;
      admission.min_count = options.min_pulls;
      // Pulls between agings: a small cache still counts over many batches' misses.
      admission.width = std::max<size_t>(4 * size_t{capacity}, kMinSketchWidth);
      admission.seed = tables_.size();
      t->sketch = std::make_unique<AdmissionSketch>(admission);
    }
    tables_.push_back(std::move(t));
  }
  if (options.registry != nullptr) {
    const metrics::Labels rank = {{"rank", absl::StrCat(options.rank)}};
    metrics::Registry* r = options.registry;
    lookups_series_ =
        r->GetCounter("ps_worker_row_cache_lookups_total",
                      "Distinct keys of the batches looked up in the row cache.", rank);
    hits_series_ = r->GetCounter("ps_worker_row_cache_hits_total",
                                 "Keys served from the row cache (fresh rows), not pulled.", rank);
    const std::string bytes_help =
        "Bytes of embedding rows the worker used, by where they came from: the row cache, or "
        "pulled from the servers.";
    metrics::Labels cache = rank;
    cache.emplace_back("source", "cache");
    metrics::Labels server = rank;
    server.emplace_back("source", "server");
    cache_bytes_series_ = r->GetCounter("ps_worker_row_cache_bytes_total", bytes_help, cache);
    server_bytes_series_ = r->GetCounter("ps_worker_row_cache_bytes_total", bytes_help, server);
    refused_series_ = r->GetCounter(
        "ps_worker_row_cache_refused_total",
        "Pulled rows kept out of the row cache: their keys' pulls had not reached min_pulls.",
        rank);
    rows_series_ =
        r->GetGauge("ps_worker_row_cache_rows", "Rows held in the row cache, every table.", rank);
  }
}

RowCache::~RowCache() = default;

uint32_t RowCache::Probe(const Table& t, uint64_t key) const {
  const uint32_t hash = Table::Hash(key);
  uint64_t i = t.Home(hash);
  while (true) {
    const Table::Entry& e = t.index[i];
    if (e.slot == kEmpty || (e.hash == hash && t.slots[e.slot].key == key)) {
      return static_cast<uint32_t>(i);
    }
    i = (i + 1) & t.mask;
  }
}

void RowCache::Unindex(Table& t, uint32_t slot) {
  uint64_t i = Probe(t, t.slots[slot].key);
  if (t.index[i].slot != slot) {
    std::fprintf(stderr, "row cache: slot %u is not in the index\n", slot);
    std::abort();
  }
  // Backward-shift deletion: moves back every later entry of the run whose home is not in
  // (i, j], so that no probe stops at the hole.
  uint64_t j = i;
  while (true) {
    j = (j + 1) & t.mask;
    const Table::Entry moved = t.index[j];
    if (moved.slot == kEmpty) break;
    const uint64_t home = t.Home(moved.hash);
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (stays) continue;
    t.index[i] = moved;
    i = j;
  }
  t.index[i].slot = kEmpty;
}

uint32_t RowCache::TakeSlot(Table& t, int64_t step) {
  if (t.used < t.capacity) return t.used++;
  const int64_t oldest_fresh = step - refresh_steps_;
  // Two laps at most: the first clears every mark it passes.
  while (true) {
    const uint32_t s = t.hand;
    t.hand = t.hand + 1 == t.capacity ? 0 : t.hand + 1;
    // The index entry of a slot the hand reaches soon, which Unindex may look for then.
    if (t.prefetch) {
      const uint32_t soon =
          s + kVictimAhead < t.capacity ? s + kVictimAhead : s + kVictimAhead - t.capacity;
      __builtin_prefetch(&t.index[t.Home(Table::Hash(t.slots[soon].key))]);
    }
    Table::Slot& slot = t.slots[s];
    if (slot.step >= oldest_fresh && slot.referenced != 0) {
      slot.referenced = 0;
      continue;
    }
    Unindex(t, s);
    return s;
  }
}

// Always inlined: a call to it has no effect GCC can see (prefetches are none), so a call left
// out of line is deleted as dead code.
[[gnu::always_inline]] inline void RowCache::PrefetchAhead(const Table& t,
                                                           absl::Span<const uint64_t> keys,
                                                           size_t i) const {
  if (i + kEntryAhead < keys.size()) {
    __builtin_prefetch(&t.index[t.Home(Table::Hash(keys[i + kEntryAhead]))]);
  }
  if (i + kSlotAhead < keys.size()) {
    const uint32_t hash = Table::Hash(keys[i + kSlotAhead]);
    const Table::Entry& e = t.index[t.Home(hash)];
    if (e.slot != kEmpty && e.hash == hash) __builtin_prefetch(&t.slots[e.slot]);
  }
}

void RowCache::FindHits(int table, int64_t step, absl::Span<const uint64_t> keys,
                        std::vector<uint32_t>* hit_slots, std::vector<uint32_t>* hit_places,
                        std::vector<uint32_t>* misses) {
  Table& t = *tables_[table];
  // Sized for every outcome, then cut: no growth checks in the loop.
  misses->resize(keys.size());
  hit_slots->resize(keys.size());
  hit_places->resize(keys.size());
  size_t num_hits = 0;
  size_t num_misses = 0;
  const int64_t oldest_fresh = step - refresh_steps_;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (t.prefetch) PrefetchAhead(t, keys, i);
    const uint32_t slot = t.index[Probe(t, keys[i])].slot;
    if (slot != kEmpty && t.slots[slot].step >= oldest_fresh) {
      t.slots[slot].referenced = 1;
      (*hit_slots)[num_hits] = slot;
      (*hit_places)[num_hits++] = static_cast<uint32_t>(i);
    } else {
      (*misses)[num_misses++] = static_cast<uint32_t>(i);
    }
  }
  misses->resize(num_misses);
  hit_slots->resize(num_hits);
  hit_places->resize(num_hits);
  const int64_t hits = static_cast<int64_t>(num_hits);
  const int64_t bytes = hits * t.dim * static_cast<int64_t>(sizeof(float));
  stats_.lookups += static_cast<int64_t>(keys.size());
  stats_.hits += hits;
  stats_.cache_bytes += bytes;
  if (lookups_series_ != nullptr) {
    lookups_series_->Increment(keys.size());
    hits_series_->Increment(hits);
    cache_bytes_series_->Increment(bytes);
  }
}

void RowCache::Lookup(int table, int64_t step, absl::Span<const uint64_t> keys, float* rows,
                      std::vector<uint32_t>* misses) {
  FindHits(table, step, keys, &slots_, &places_, misses);
  tables_[table]->storage->ReadRows(slots_, places_, rows);
}

void RowCache::LookupSlots(int table, int64_t step, absl::Span<const uint64_t> keys,
                           std::vector<uint32_t>* hit_slots, std::vector<uint32_t>* hit_places,
                           std::vector<uint32_t>* misses) {
  FindHits(table, step, keys, hit_slots, hit_places, misses);
}

void RowCache::AssignSlots(int table, int64_t step, absl::Span<const uint64_t> keys,
                           std::vector<uint32_t>* slots) {
  Table& t = *tables_[table];
  slots->resize(keys.size());
  const uint32_t used_before = t.used;
  int64_t refused = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (t.prefetch) PrefetchAhead(t, keys, i);
    uint32_t at = Probe(t, keys[i]);
    uint32_t slot = t.index[at].slot;
    if (slot != kEmpty) {
      t.slots[slot].referenced = 1;  // an expired row read again
    } else if (t.sketch != nullptr && !t.sketch->Admit(keys[i])) {
      ++refused;
      (*slots)[i] = kNoSlot;
      continue;
    } else {
      slot = TakeSlot(t, step);
      at = Probe(t, keys[i]);  // TakeSlot's eviction may have moved entries
      t.index[at] = Table::Entry{Table::Hash(keys[i]), slot};
      t.slots[slot].key = keys[i];
      t.slots[slot].referenced = 0;
    }
    t.slots[slot].step = step;
    (*slots)[i] = slot;
  }
  const int64_t bytes =
      static_cast<int64_t>(keys.size()) * t.dim * static_cast<int64_t>(sizeof(float));
  stats_.pulled_bytes += bytes;
  stats_.refused += refused;
  stats_.rows += t.used - used_before;
  if (server_bytes_series_ != nullptr) {
    server_bytes_series_->Increment(bytes);
    refused_series_->Increment(refused);
    rows_series_->Set(static_cast<double>(stats_.rows));
  }
}

void RowCache::Admit(int table, int64_t step, absl::Span<const uint64_t> keys,
                     const float* pulled) {
  AssignSlots(table, step, keys, &slots_);
  places_.clear();
  size_t n = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i] == kNoSlot) continue;
    slots_[n++] = slots_[i];
    places_.push_back(static_cast<uint32_t>(i));
  }
  slots_.resize(n);
  // In order: a slot taken twice in this call ends with its later row.
  tables_[table]->storage->WriteRows(slots_, places_, pulled);
}

void RowCache::AdmitSlots(int table, int64_t step, absl::Span<const uint64_t> keys,
                          std::vector<uint32_t>* slots, std::vector<uint32_t>* places) {
  AssignSlots(table, step, keys, &slots_);
  // A slot taken twice in this call keeps its later row: only the last write of each slot is
  // handed out, so that writes made side by side (a device's threads) never collide.
  seen_.resize(tables_[table]->capacity);  // zero between calls
  slots->clear();
  places->clear();
  for (size_t i = slots_.size(); i-- > 0;) {
    if (slots_[i] == kNoSlot || seen_[slots_[i]] != 0) continue;
    seen_[slots_[i]] = 1;
    slots->push_back(slots_[i]);
    places->push_back(static_cast<uint32_t>(i));
  }
  for (const uint32_t slot : *slots) seen_[slot] = 0;
}

RowCacheStats RowCache::stats() const { return stats_; }

std::string RowCacheStatsJson(const RowCacheStats& c) {
  return absl::StrFormat(
      "{\"lookups\":%d,\"hits\":%d,\"hit_rate\":%.4f,\"cache_bytes\":%d,\"pulled_bytes\":%d,"
      "\"refused\":%d,\"rows\":%d}",
      c.lookups, c.hits, c.hit_rate(), c.cache_bytes, c.pulled_bytes, c.refused, c.rows);
}

uint32_t RowCache::capacity() const { return tables_.empty() ? 0 : tables_[0]->capacity; }

}  // namespace worker
}  // namespace ps

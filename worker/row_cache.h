// A worker's cache of hot embedding rows (training.row_cache): per table, a fixed number of rows,
// each with the step whose pull brought it, so that a batch's popular keys (Zipf-distributed
// data names the same few keys every step) are served from the worker's memory for
// refresh_steps steps instead of being pulled again each step. Never used in SYNC training
// (job validation refuses it there): a cached row misses the pushes since its pull.
//
// Freshness: a row pulled for step t0 is served at steps t0 .. t0 + refresh_steps (Lookup at step
// t hits when t0 >= t - refresh_steps), then counts as a miss and is pulled again; the pull's row
// replaces it in place. What that costs the staleness bound is StepSync's part (step_sync.h).
//
// Eviction: CLOCK (second chance). Each table's slots form a ring with a hand; a hit marks its
// slot referenced. A row admitted into a full table takes the first slot from the hand on that
// is expired (pulled before step - refresh_steps) or not referenced, clearing the marks it passes.
// So a row read since the hand last passed stays, a row seen once goes first, and nothing is
// allocated or sorted per step (LRU would need a list update per hit). A new row starts
// unreferenced: a key must be read again while cached to be kept over others.
//
// Admission (min_pulls > 1): a pulled row enters the cache only on its key's min_pulls-th pull
// among recent pulls, counted per table by a count-min sketch (common/admission_sketch.h: 4 x
// max_rows counters a row, at least 2^16, rounded up to a power of two; halved after as many
// pulls). A key pulled once
// (Zipf data's long tail) then never takes the slot of a row that is read again and again, which
// matters when a batch's distinct keys outnumber the cache's rows: admitting every miss would
// evict the hot rows every step. A row already cached is always refreshed in place.
//
// Memory: allocated once, in Create: per table max_rows x dim floats (RowStorage) plus per slot
// its key, step and mark (24 bytes), and an open-addressing index of 2 x max_rows (rounded up to
// a power of two) entries of hash and slot (8 bytes); with min_pulls > 1, the sketch's 8 bytes a
// row (128 KiB at least).
//
// Storage: on the CPU route the rows live behind RowStorage, on the host (HostRowStorage), and
// Lookup / Admit copy them. On the GPU route (a model that pools on its device) they live in the
// device's memory, which the model holds (GpuModel: max_rows x dim floats per table): the cache
// keeps only the index and hands out (slot, place) pairs (LookupSlots, AdmitSlots), and the
// model's pass copies the hits from their slots into the batch's rows and the pulled misses into
// their slots, on the device, in that order (worker/model/pooled_input.h).
#ifndef PS_WORKER_ROW_CACHE_H_
#define PS_WORKER_ROW_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/metrics/registry.h"
#include "proto/job.pb.h"

namespace ps {
namespace worker {

// The rows of one table's cache slots. Implementations need not be thread-safe: RowCache calls
// them from its own (thread-compatible) methods only.
class RowStorage {
 public:
  virtual ~RowStorage() = default;
  // For each i, copies slot slots[i]'s row to rows + places[i] * dim (host memory).
  virtual void ReadRows(absl::Span<const uint32_t> slots, absl::Span<const uint32_t> places,
                        float* rows) const = 0;
  // For each i, copies rows + places[i] * dim (host memory) into slot slots[i].
  virtual void WriteRows(absl::Span<const uint32_t> slots, absl::Span<const uint32_t> places,
                         const float* rows) = 0;
};

// RowStorage in host memory: one array of slots x dim floats, allocated at construction.
// Thread-compatible.
class HostRowStorage final : public RowStorage {
 public:
  HostRowStorage(uint32_t slots, int dim);
  void ReadRows(absl::Span<const uint32_t> slots, absl::Span<const uint32_t> places,
                float* rows) const override;
  void WriteRows(absl::Span<const uint32_t> slots, absl::Span<const uint32_t> places,
                 const float* rows) override;

 private:
  const int dim_;
  std::vector<float> floats_;
};

// What a RowCache did, since it was made.
struct RowCacheStats {
  int64_t lookups = 0;       // keys looked up (a batch's distinct keys, per table)
  int64_t hits = 0;          // of which served from the cache
  int64_t cache_bytes = 0;   // bytes of rows served from the cache (hits x dim x 4)
  int64_t pulled_bytes = 0;  // bytes of rows pulled (the misses), admitted or not
  int64_t refused = 0;       // pulled rows not admitted (min_pulls not reached)
  int64_t rows = 0;          // rows resident now, every table
  double hit_rate() const { return lookups > 0 ? static_cast<double>(hits) / lookups : 0.0; }
};

// `stats` as the JSON object that RESULT lines carry: {"lookups":..,"hits":..,"hit_rate":..,
// "cache_bytes":..,"pulled_bytes":..,"refused":..,"rows":..}.
std::string RowCacheStatsJson(const RowCacheStats& stats);

// A RowCache holds the cached rows of every table a worker pulls. Thread-compatible: the worker
// calls it from its training thread only (StartPull's Lookup and FinishPull's Admit are never
// concurrent); the Prometheus series it updates are thread-safe for scrapes.
class RowCache {
 public:
  struct Options {
    // training.row_cache.max_rows: rows kept per table, 1 to 2^30. Default 1.
    uint64_t max_rows = 1;
    // training.row_cache.refresh_steps: a row pulled for step t0 is served at steps up to
    // t0 + refresh_steps; >= 1. Default 1.
    int64_t refresh_steps = 1;
    // training.row_cache.min_pulls: pulls of a key among recent ones before its row is admitted;
    // 1 to 15 (AdmissionSketch::kMaxCount). Default 1: every pulled row is admitted.
    uint32_t min_pulls = 1;
    // Per table of the layout (EmbeddingLayout::tables(), in order): its dim (>= 1). At least
    // one table; default none (refused).
    std::vector<int> dims;
    // If set (not owned, outliving the cache), its series are registered here, labelled
    // rank="<rank>": ps_worker_row_cache_lookups_total, ps_worker_row_cache_hits_total,
    // ps_worker_row_cache_bytes_total{source="cache"|"server"}, ps_worker_row_cache_refused_total
    // and ps_worker_row_cache_rows.
    // Default null: no series.
    metrics::Registry* registry = nullptr;
    // The worker's rank, for the series' label. Default 0.
    int rank = 0;
    // The rows live on the device of a model that pools there (GpuModel keeps them): the cache
    // keeps only the index and hands out slots (LookupSlots, AdmitSlots); Lookup and Admit, which
    // copy rows, must not be called. Default false: the rows live here (HostRowStorage).
    bool on_device = false;
  };

  // Allocates every table's slots, index, rows and sketch. INVALID_ARGUMENT when max_rows is 0 or
  // above 2^30, refresh_steps < 1, min_pulls is not in 1..15, there is no table, or a dim < 1.
  static absl::StatusOr<std::unique_ptr<RowCache>> Create(const Options& options);
  // The options of `row_cache` for tables of `dims`.
  static Options OptionsOf(const config::RowCache& row_cache, std::vector<int> dims);

  ~RowCache();
  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  // Looks up table `table`'s distinct `keys` for a pull at `step`. Each key whose row is cached
  // and fresh (pulled for a step >= step - refresh_steps) is a hit: its row is copied to
  // rows + i * dim (i its place in keys) and its slot marked referenced. `*misses` is set to the
  // places in `keys` of the others, in order, which the caller pulls. `rows` holds keys.size() x
  // dim floats; the misses' rows are left as they were. `keys` must be distinct.
  void Lookup(int table, int64_t step, absl::Span<const uint64_t> keys, float* rows,
              std::vector<uint32_t>* misses);

  // Admits the rows of `keys` pulled for `step` (pulled + i * dim for keys[i]; distinct keys):
  // a key already cached (an expired row pulled again) gets its row and step replaced in place
  // and is marked referenced; a new one, if admitted (this is its min_pulls-th pull), takes a free
  // slot, else the one CLOCK evicts; a new one not admitted yet is only counted. When one call
  // admits more keys than fit, its later keys may evict its earlier ones.
  void Admit(int table, int64_t step, absl::Span<const uint64_t> keys, const float* pulled);

  // On the device (Options::on_device): as Lookup, but instead of copying the hits' rows, gives
  // their slots and their places in `keys` (in order), for the device to copy.
  void LookupSlots(int table, int64_t step, absl::Span<const uint64_t> keys,
                   std::vector<uint32_t>* hit_slots, std::vector<uint32_t>* hit_places,
                   std::vector<uint32_t>* misses);
  // On the device: as Admit, but instead of copying the pulled rows, gives the slots they go to
  // and their places in `keys`, for the device to copy (keys not admitted have none). A slot taken
  // twice in one call is given once, with its later key's place (no two entries of *slots are
  // equal).
  void AdmitSlots(int table, int64_t step, absl::Span<const uint64_t> keys,
                  std::vector<uint32_t>* slots, std::vector<uint32_t>* places);
  bool on_device() const { return on_device_; }
  // Rows per table (max_rows).
  uint32_t capacity() const;

  RowCacheStats stats() const;
  int64_t refresh_steps() const { return refresh_steps_; }
  size_t num_tables() const { return tables_.size(); }

 private:
  struct Table;
  explicit RowCache(const Options& options);

  // Where `key` is in table t's index: the position of its entry, or of the empty one it would
  // take.
  uint32_t Probe(const Table& t, uint64_t key) const;
  // Prefetches the index entry of keys[i + 16] and, when its entry is there, the slot of
  // keys[i + 8] (a lookup of keys in order otherwise waits on memory twice a key).
  void PrefetchAhead(const Table& t, absl::Span<const uint64_t> keys, size_t i) const;
  // Removes the key of slot `slot` from table t's index (backward-shift deletion).
  void Unindex(Table& t, uint32_t slot);
  // The slot a new row of table t takes at `step`: a free one, else CLOCK's victim (unindexed).
  uint32_t TakeSlot(Table& t, int64_t step);
  // Lookup's and LookupSlots' part: the hits' slots and places, the misses, the counters.
  void FindHits(int table, int64_t step, absl::Span<const uint64_t> keys,
                std::vector<uint32_t>* hit_slots, std::vector<uint32_t>* hit_places,
                std::vector<uint32_t>* misses);
  // Admit's and AdmitSlots' part: each key's slot (in order; kNoSlot for a key not admitted),
  // the counters.
  void AssignSlots(int table, int64_t step, absl::Span<const uint64_t> keys,
                   std::vector<uint32_t>* slots);

  // Constant after construction.
  const int64_t refresh_steps_;
  const bool on_device_;
  std::vector<std::unique_ptr<Table>> tables_;
  metrics::Counter* lookups_series_ = nullptr;
  metrics::Counter* hits_series_ = nullptr;
  metrics::Counter* cache_bytes_series_ = nullptr;
  metrics::Counter* server_bytes_series_ = nullptr;
  metrics::Counter* refused_series_ = nullptr;
  metrics::Gauge* rows_series_ = nullptr;

  RowCacheStats stats_;
  // Scratch of Lookup and Admit, kept between calls.
  std::vector<uint32_t> slots_;
  std::vector<uint32_t> places_;
  std::vector<uint8_t> seen_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_ROW_CACHE_H_

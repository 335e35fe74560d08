// The rows of embedding tables on a server: a table's constant parameters (TableSpec) and the
// memory-optimised store of its rows within one shard (TableShard).
//
// Layout of a TableShard, designed for about 19 bytes of overhead per row over the raw floats
// (16 bytes a bucket of the index at load 0.85):
// - Rows live in slabs: blocks of 65536 rows of row_floats() floats each, one memory mapping per
//   block (page aligned, grown in place or moved by the kernel with mremap, never copied), so slot
//   s is row s & 0xFFFF of block s >> 16. Slots are handed out in order and never move; the last
//   block grows (by doubling, then by quarter blocks) or is sized from expected_rows, so a small
//   shard stays small.
// - An open-addressing index with linear probing maps an id to its slot in one array of 16-byte
//   buckets (the uint64 id, its uint32 slot and the row's uint32 generation: a probe is one cache
//   line, four buckets to a line; slot 0xFFFFFFFF marks an empty bucket, so every id is valid, 0
//   and 2^64 - 1 included). Its capacity need not be a power of two: a bucket is addressed by
//   multiply-shift ("fastrange") on the low 32 bits of ps::KeyHash (the shard was chosen from the
//   high bits, which are therefore all but constant within a shard). Load stays at most 0.85; the index grows by 1.5x, or never when expected_rows
//   was right.
// - Each row's generation (the generation the shard was in when the row last changed), for
//   incremental checkpoints, sits next to its slot in the index: the lookup that finds the row
//   has its line in cache already, so stamping a change costs no extra cache miss (a separate
//   array by slot cost pushes a miss a row, 15-20% of their rate on large shards). A row is
//   created or changed by Pull (created only), Push, Assign and AssignRows.
// - Compact rows (TableSpec::value_type FP16 or BF16, server/README.md#compact-rows): a stored
//   row is its dim weights as 16-bit patterns, padded to a multiple of 4 bytes, then the
//   optimizer's state in fp32 (row_words() 4-byte words in all). Every interface still hands
//   out and takes fp32 rows of row_floats() floats: reads decode (exactly), writes encode
//   (round to nearest even; FP16 saturates at +-65504), and a push decodes the weights, applies
//   the optimizer in fp32 and encodes them back. An FP32 table's row is its fp32 floats as they
//   are, and its paths copy nothing more than they did before compact rows.
// - A cut (StartCut .. EndCut) reads every row as of one instant while the shard keeps changing:
//   the reader walks the slots in order, and the first change to a row it has not read yet puts
//   the row's old value aside (copy-on-write). Changes then cost one compare more, and a row
//   copied aside when it changes during a cut.
// - Rows can be removed (Erase, eviction): the index entry is deleted by backward shifting (no
//   tombstones), and the slot goes on a free list that new rows take first, so a shard whose rows
//   come and go keeps its slabs and index at the size of the most rows it held at once. Free
//   slots are holes that ForEach and cuts skip.
// - Bounds (server/README.md#memory-budget): a shard may be given a row cap (SetMaxRows); at the
//   cap, and for ids its table's admission sketch has not admitted, a pull answers the initial
//   row without creating one and a push's gradient is dropped (both counted). The index and
//   slabs never grow past what the cap needs.
// - Use tracking for eviction: the index entry's other 16 bits hold the row's last use, a 12-bit
//   tick of the caller's clock (SetTick), and for LFU a 4-bit logarithmic use count, written by
//   the lookup that finds the row (its line already in cache). Sweep evicts rows older than a TTL
//   a slice of the index at a time; EvictToRows evicts the worst rows of sampled slices.
#ifndef PS_SERVER_STORAGE_EMBEDDING_TABLE_H_
#define PS_SERVER_STORAGE_EMBEDDING_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/admission_sketch.h"
#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "server/storage/initializer.h"

namespace ps {
namespace server {

// The parameters of one table, constant after construction and shared by all shards.
struct TableSpec {
  // Builds the spec of `table` in a job seeded with `job_seed`. INVALID_ARGUMENT if the name is
  // empty, dim is not in [1, 4096] (FP32) or [1, 1024] (FP16, BF16), or the optimizer or
  // initializer is invalid.
  static absl::StatusOr<std::unique_ptr<TableSpec>> Create(const config::Table& table,
                                                           uint64_t job_seed);

  // Floats of a whole row as every interface gives and takes it: dim weights, then the
  // optimizer's state, all fp32 whatever value_type is.
  uint32_t row_floats() const { return dim + optimizer->StateFloats(dim); }

  // Whether the weights are stored in 16 bits (FP16 or BF16).
  bool compact() const { return value_type != config::Table::FP32; }
  // 4-byte words of the stored weights: dim for FP32, dim 16-bit values rounded up to whole
  // words (so that the fp32 state after them is aligned) for FP16 and BF16.
  uint32_t weight_words() const { return compact() ? (dim + 1) / 2 : dim; }
  // 4-byte words of a stored row: the weights, then the optimizer's state.
  uint32_t row_words() const { return weight_words() + optimizer->StateFloats(dim); }
  // Bytes of a stored row (row_words() words): what the disk tier keeps, bit for bit.
  size_t stored_row_bytes() const { return size_t{row_words()} * 4; }

  std::string name;
  uint32_t dim = 0;
  // ps::NameHash(name).
  uint64_t name_hash = 0;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Initializer> initializer;
  // How the weights are stored (config::Table.value_type; FP16 and BF16 need dim <= 1024).
  config::Table::ValueType value_type = config::Table::FP32;
  // The table's admission (config::Table.admission), when it has one; each shard sizes its own
  // sketch (TableShard's `sketch_width`).
  bool admission = false;
  AdmissionOptions admission_options;
  // The table's eviction (config::Table.eviction), when it has one.
  bool eviction = false;
  bool lfu = false;
  uint64_t ttl_steps = 0;
  uint64_t ttl_seconds = 0;
};

// A TableShard holds the rows of one table within one shard. Thread-compatible: the caller (one
// lock per shard) serialises mutations. Pull and Push keep per-thread scratch buffers as large as
// the largest call seen by the thread, shared by every shard the thread serves.
class TableShard {
 public:
  // `spec` must outlive the shard. `expected_rows` presizes the index (it does not grow until the
  // shard holds more rows; its 19 bytes a row are allocated at once, so the caller bounds the
  // hint) and sizes the slabs as they fill; 0 starts small and grows as needed. With admission
  // (spec->admission), the sketch has `sketch_width` counters a row (AdmissionOptions::width).
  TableShard(const TableSpec* spec, size_t expected_rows, size_t sketch_width = 1 << 16);

  TableShard(const TableShard&) = delete;
  TableShard& operator=(const TableShard&) = delete;

  const TableSpec& spec() const { return *spec_; }

  // Writes the rows' embeddings (dim floats each, in ids order) to `out`, creating missing rows
  // with the initializer and the optimizer's initial state. With admission, or at the row cap,
  // a missing row is not created: its initial embedding is written instead (as Peek). In a
  // compact table the initial embedding is the initializer's, rounded to the value type, as a
  // created row stores it.
  void Pull(absl::Span<const uint64_t> ids, float* out);

  // Like Pull, but a missing row is not created: its initial embedding (what Pull would create)
  // is written instead. For replicas, which hold only what their primary sends.
  void Peek(absl::Span<const uint64_t> ids, float* out) const;

  // Applies gradients (dim floats per id, in ids order) with the optimizer. Duplicate ids are
  // summed first (in ids order) and the optimizer applied once per unique id. Missing rows are
  // created first. The caller has checked the gradients are finite.
  //
  // `rows_after` (if not null) receives the whole row of every id after the update (row_floats()
  // floats each, in ids order), as Find would give them: what a replica needs, without looking
  // the ids up again. Compact weights are given as stored (decoded after rounding), so that a
  // replica assigning them stores the same bits.
  //
  // A missing row is created only if the table's admission sketch admits its id (a sighting is
  // counted) and the shard is below its row cap; otherwise the id's gradients are dropped and
  // counted (admission_refused, full_refused). Returns how many ids were dropped; when some
  // were, `kept` (if not null) receives the ids that were applied, in ids order, and rows_after
  // holds only theirs.
  size_t Push(absl::Span<const uint64_t> ids, const float* grads, float* rows_after = nullptr,
              std::vector<uint64_t>* kept = nullptr);

  // Assign for many rows (row_floats() floats each, in ids order), looking the ids up together
  // as Pull and Push do. `rows` need not be aligned (rows read in place from a network buffer).
  // Compact weights are encoded (round to nearest even): a row read from a table of the same
  // value type is stored bit for bit as it was.
  void AssignRows(absl::Span<const uint64_t> ids, const void* rows);

  // Overwrites the whole row of `id` (row_floats() floats: embedding then optimizer state, as
  // Read and ForEach give them), creating it if missing. For replicas and checkpoint restores.
  // Compact weights are encoded as by AssignRows.
  void Assign(uint64_t id, const float* row);

  // Copies the whole row of `id` (embedding then optimizer state, row_floats() fp32 floats, the
  // weights decoded) to `row` and returns true; returns false and leaves `row` alone if the
  // shard has no such row. Never creates.
  bool Read(uint64_t id, float* row) const;

  // Removes the row of `id`, if any (a replica applying its primary's eviction, a restore);
  // returns whether there was one. Not counted as an eviction.
  bool Erase(uint64_t id);

  // Rows held.
  size_t size() const { return size_; }

  // Buckets of the index (what Sweep walks).
  size_t bucket_count() const { return capacity_; }

  // --- Bounds and eviction ---

  // The most rows the shard may hold; 0: no cap. Lowering it below size() evicts nothing by
  // itself (EvictToRows does), but no row is created until the shard is below the cap again.
  void SetMaxRows(size_t max_rows);
  size_t max_rows() const { return max_rows_; }

  // A soft cap (a shard with a disk tier, which demotes rows to make room before it creates
  // them): rows are created past the cap rather than refused, so that no push is dropped when
  // the room made was not enough. The cap still sizes the index and slabs and drives eviction.
  void SetSoftCap(bool soft) { soft_cap_ = soft; }

  // Rows leaving memory for the tier, as EvictToRows and TakeRows hand them over: in ids order,
  // each with its last use (a tick of the clock SetTick sets, 12 bits of age kept), its
  // generation and its stored row (stored_row_bytes() bytes).
  struct Departed {
    std::vector<uint64_t> ids;
    std::vector<uint32_t> last_use;
    std::vector<uint16_t> generations;
    std::vector<uint8_t> use_counts;  // LFU's logarithmic counts (0 without LFU)
    std::string stored;
    void clear() {
      ids.clear();
      last_use.clear();
      generations.clear();
      use_counts.clear();
      stored.clear();
    }
  };

  // The clock that rows' last use is stamped with, in ticks (12 bits are kept: see Sweep).
  void SetTick(uint32_t tick) { tick_ = tick; }
  uint32_t tick() const { return tick_; }

  // Visits up to `max_buckets` buckets of the index from where the last sweep stopped (wrapping
  // around): evicts the rows not used for more than `ttl_ticks` ticks (0: none by age; at most
  // kMaxTtlTicks), and stamps rows unused for more than 2 * kMaxTtlTicks as that old, so that
  // the 12-bit stamps never wrap around (every row must be swept once per 2 * kMaxTtlTicks
  // ticks). Appends the evicted ids to `evicted` (if not null). Returns the rows evicted.
  size_t Sweep(size_t max_buckets, uint32_t ttl_ticks, std::vector<uint64_t>* evicted);

  // Evicts rows until at most `target_rows` remain or `max_rows_examined` rows were examined:
  // slices of 64 rows are taken from the sweep's position, and the worst of each (least recently
  // used; for LFU, least often used, then least recently) evicted, as many as the excess over
  // target_rows asks for. Appends the evicted ids to `evicted` (if not null). Returns the rows
  // evicted.
  // `departed` (if not null) also receives the evicted rows as they were (for the disk tier).
  size_t EvictToRows(size_t target_rows, size_t max_rows_examined, std::vector<uint64_t>* evicted,
                     Departed* departed = nullptr);

  static constexpr uint32_t kMaxTtlTicks = 1024;

  // --- The disk tier (server/storage/row_tier.h) ---

  // TableSpec::stored_row_bytes().
  size_t stored_row_bytes() const { return size_t{row_words_} * 4; }

  // Removes the rows of those `ids` that are here, appending them to `out` (a copy moving rows
  // to its tier as its primary did). Not counted as evictions. Returns how many.
  size_t TakeRows(absl::Span<const uint64_t> ids, Departed* out);

  // Puts back a row that left (TakeRows, EvictToRows): its stored bytes as they were (`stored`
  // need not be aligned) and its generation. Creates it even at the row cap (the caller evicts
  // down to the cap later). A promotion (a pull or push of the row) stamps it as used now and is
  // counted as promoted; otherwise (a row that could not leave) its use stays `last_use`.
  // Returns false, changing nothing, if `id` has a row.
  // `use_count` is the LFU count it left with (Departed::use_counts), so that LFU keeps it.
  bool InsertStored(uint64_t id, const void* stored, uint32_t last_use, uint16_t generation,
                    bool promotion = true, uint8_t use_count = 0);

  // Appends to `missing` the ids of `ids` that have no row, once each, in ids order.
  void FindMissing(absl::Span<const uint64_t> ids, std::vector<uint64_t>* missing) const;

  // A stored row (stored_row_bytes(), need not be aligned) as row_floats() fp32 floats, and
  // back (compact weights rounded as AssignRows does).
  void DecodeStored(const void* stored, float* row) const;
  void EncodeStored(const float* row, void* stored) const;

  // Moves `n` of the rows EvictToRows counted as evicted by the budget to the demoted count
  // (the caller put them in the tier).
  void NoteDemoted(size_t n) {
    counters_.evicted_budget -= n;
    counters_.demoted += n;
  }
  // Counts `n` rows taken (TakeRows) into the tier.
  void NoteTaken(size_t n) { counters_.demoted += n; }

  // Counters since construction.
  struct Counters {
    uint64_t evicted_ttl = 0;     // rows evicted by Sweep for their age
    uint64_t evicted_budget = 0;  // rows evicted by EvictToRows
    uint64_t admission_refused = 0;  // pushed ids dropped for want of admission
    uint64_t full_refused = 0;       // rows not created at the row cap (pulls and pushes)
    uint64_t demoted = 0;            // rows moved to the disk tier (NoteDemoted, NoteTaken)
    uint64_t promoted = 0;           // rows put back from it (InsertStored)

    Counters& operator+=(const Counters& other) {
      evicted_ttl += other.evicted_ttl;
      evicted_budget += other.evicted_budget;
      admission_refused += other.admission_refused;
      full_refused += other.full_refused;
      demoted += other.demoted;
      promoted += other.promoted;
      return *this;
    }
  };
  const Counters& counters() const { return counters_; }

  // The admission sketch, or null without admission.
  const AdmissionSketch* sketch() const { return sketch_.get(); }

  // Bytes a row costs when the index is at its largest load (the stored row, row_words() words,
  // and its share of the index): what a row cap is computed with.
  static size_t BytesPerRow(const TableSpec& spec);
  // The bytes the index and slabs of a shard of at most `max_rows` rows can reach.
  static size_t BytesForRows(const TableSpec& spec, size_t max_rows);

  // --- Generations: which rows changed since a point (incremental checkpoints) ---

  // The generation stamped on the rows that change from now on; 0 until set. The caller (the
  // shard) advances it at each checkpoint cut, never back except after ResetGenerations; at
  // most kMaxGeneration (generations are 16 bits, beside the rows' use in the index).
  uint32_t generation() const { return generation_; }
  void set_generation(uint32_t generation) { generation_ = static_cast<uint16_t>(generation); }
  static constexpr uint32_t kMaxGeneration = 0xFFFF;

  // The generation of `id`'s last change, or -1 if the shard has no such row.
  int64_t RowGeneration(uint64_t id) const;

  // Sets every row's generation to 0 (for a caller whose generations would wrap around).
  void ResetGenerations();

  // Calls f(uint64_t id, const float* row) for every row whose generation is above `since`, as
  // ForEach does (one pass over the index; `row` as ForEach gives it). Returns the number of
  // such rows.
  template <typename F>
  size_t ForEachChangedSince(uint32_t since, F&& f) const;

  // Bytes allocated by the index (with the rows' generations), the slabs and a cut under way.
  size_t MemoryBytes() const;

  // --- Cuts: every row as of one instant, read in pieces while the shard keeps changing ---

  // Starts a cut of the rows held now, replacing any cut under way. Until EndCut, a row the cut
  // has not read yet keeps its value of now for the cut (its first change copies the old value
  // aside), and rows created later are not in it. O(1).
  void StartCut();

  // Copies the cut's next rows, up to `max_rows`, in slot order: their ids to `ids` and their
  // whole rows (row_floats() floats each, as of StartCut) to `rows`, which must have room for
  // max_rows of each. Returns how many were copied: 0 when every row was read or no cut is under
  // way. The first call (or the first removal or reuse of a slot the cut holds) also finds every
  // slot's id (one pass over the index).
  size_t ReadCut(size_t max_rows, uint64_t* ids, float* rows);

  // Ends the cut under way (if any), dropping the rows copied aside.
  void EndCut();

  // Whether a cut is under way (between StartCut and EndCut).
  bool cutting() const { return cutting_; }

  // Calls f(uint64_t id, const float* row) for every row (row_floats() fp32 floats, as Read gives
  // it), in slot order (the order the rows were created, but for rows in reused slots). `row` is
  // valid during the call only (a compact row is decoded into a buffer reused for the next).
  // `f` must not mutate the shard.
  template <typename F>
  void ForEach(F&& f) const;

 private:
  // Slab blocks hold up to kBlockRows rows.
  static constexpr int kBlockShift = 16;
  static constexpr uint32_t kBlockRows = uint32_t{1} << kBlockShift;
  static constexpr uint32_t kEmpty = 0xFFFFFFFF;

  // A slab block: an anonymous memory mapping, so that growing it (mremap) neither copies rows
  // nor leaves a freed hole in the heap, and pages of rows not yet written are not resident.
  struct Block {
    Block() = default;
    Block(Block&& other) noexcept
        : floats(std::exchange(other.floats, nullptr)),
          bytes(std::exchange(other.bytes, 0)),
          capacity_rows(std::exchange(other.capacity_rows, 0)) {}
    Block& operator=(Block&&) = delete;
    ~Block();
    float* get() const { return floats; }

    float* floats = nullptr;
    size_t bytes = 0;  // of the mapping, a multiple of the page size
    uint32_t capacity_rows = 0;
  };

  // The low 32 bits of ps::KeyHash.
  uint32_t IndexHash(uint64_t id) const;
  // The home bucket of a hash: fastrange over the current capacity.
  size_t HomeBucket(uint32_t hash) const {
    return static_cast<size_t>((uint64_t{hash} * capacity_) >> 32);
  }
  // The stored row in `slot` (row_words_ words): for FP32 the fp32 row itself; for FP16 and
  // BF16, the 16-bit weights (then padding), then the fp32 state at word weight_words_.
  const float* Row(uint32_t slot) const {
    return blocks_[slot >> kBlockShift].get() + size_t{slot & (kBlockRows - 1)} * row_words_;
  }
  float* Row(uint32_t slot) {
    return blocks_[slot >> kBlockShift].get() + size_t{slot & (kBlockRows - 1)} * row_words_;
  }
  // Compact rows: encodes dim fp32 weights into the stored row's weight words (padding zeroed),
  // and decodes them back (exactly).
  void EncodeWeights(const float* weights, float* stored) const;
  void DecodeWeights(const float* stored, float* weights) const;
  // The whole stored row `stored` as row_floats_ fp32 floats into `row`, and back.
  void DecodeRow(const float* stored, float* row) const;
  void EncodeRow(const float* row, float* stored) const;
  // The initial embedding of `id` (dim floats), as a created row holds it: the initializer's,
  // rounded to the value type in a compact table.
  void InitialWeights(uint64_t id, float* out) const;
  // The slot of `id`, or kEmpty; never creates, stamps nothing.
  uint32_t FindSlot(uint64_t id) const;
  // Asks for the cache lines of a row about to be written (`bytes`: row_words_ words; an
  // Adagrad row of dim 16 is two lines, and the optimizer reads its state in the second).
  void PrefetchRowForWrite(uint32_t slot, size_t bytes) {
    const char* row = reinterpret_cast<const char*>(Row(slot));
    for (size_t at = 0; at < bytes; at += 64) __builtin_prefetch(row + at, 1);
  }

  // A bucket: its id, slot (kEmpty: none) and the row's generation, together, so that a lookup
  // misses the cache once per bucket probed instead of once in an id array and once in an entry
  // array.
  struct Entry {
    uint64_t id;
    uint32_t slot;
    uint16_t generation;
    // The row's last use: bits 0-11 the tick, bits 12-15 (LFU) the logarithmic use count.
    uint16_t use;
  };

  // Who may create a missing row in FindOrCreate.
  enum class Create {
    kAlways,    // replicas and restores: the row's values come from elsewhere
    kIfRoom,    // pulls: below the row cap and without admission
    kIfAdmitted,  // pushes: below the row cap and admitted by the sketch
  };

  // The slot of `id` (whose IndexHash is `hash`), creating the row if it is missing and `create`
  // allows (with its initial values unless `initialize` is false: the caller overwrites it), or
  // kEmpty if it is missing and was not created. A created row, and with `touch` an existing
  // one (the caller changes it), is stamped with the current generation; every row found or
  // created is stamped as used now.
  uint32_t FindOrCreate(uint64_t id, uint32_t hash, bool initialize, bool touch, Create create);
  // Slots of `ids` into `slots`, as FindOrCreate; `hashes` is scratch of ids.size(). Returns
  // how many are kEmpty.
  size_t ResolveSlots(absl::Span<const uint64_t> ids, uint32_t* hashes, uint32_t* slots,
                      bool initialize, bool touch, Create create);
  // Takes a slot for `id` (a free one first) and, if `initialize`, writes its initial row.
  uint32_t NewRow(uint64_t id, bool initialize = true);
  // The use stamp of a row used now, from its previous one.
  uint16_t Used(uint16_t use);
  // How bad a victim the row of `use` is (larger: evicted first).
  uint32_t VictimScore(uint16_t use) const;
  // Removes the entry in bucket `b` (backward shift) and frees its slot.
  void EraseBucket(size_t b);
  // The index's largest capacity under the row cap.
  size_t MaxCapacity() const;
  // Makes room in the slabs for `slot`.
  void ReserveSlot(uint32_t slot);
  // Replaces the index with one of `capacity` buckets holding the same entries.
  void Rehash(size_t capacity);
  // Before a change to the row in `slot`: a cut under way that has not read it yet keeps its
  // value (one compare when no cut is under way: the window [cut_next_, cut_end_) is empty).
  void BeforeChange(uint32_t slot) {
    if (__builtin_expect(slot - cut_next_ < cut_end_ - cut_next_, 0)) KeepForCut(slot);
  }
  // Copies the row in `slot` aside for the cut, unless it was copied before.
  void KeepForCut(uint32_t slot);
  // Finds the id of every slot below cut_end_, and which are holes (once per cut: before the
  // first read, and before a slot below cut_end_ is freed or reused).
  void BuildCutIds();

  // Constant after construction.
  const TableSpec* const spec_;
  const uint32_t dim_;
  const uint32_t row_floats_;
  // Whether the weights are stored in 16 bits, and the stored row's layout (TableSpec).
  const bool compact_;
  const uint32_t weight_words_;
  const uint32_t row_words_;
  const size_t expected_rows_;

  // The index: capacity_ buckets; bucket b is empty iff entries_[b].slot == kEmpty, else it maps
  // entries_[b].id.
  size_t capacity_ = 0;
  // The index grows before size_ would exceed this (0.85 * capacity_).
  size_t max_size_ = 0;
  std::unique_ptr<Entry[]> entries_;
  // Rows held.
  size_t size_ = 0;
  // Slots ever used (0 .. slots_used_ - 1); those not in the index are in free_slots_.
  size_t slots_used_ = 0;
  std::vector<uint32_t> free_slots_;
  std::vector<Block> blocks_;
  uint16_t generation_ = 0;

  // Bounds and eviction.
  size_t max_rows_ = 0;
  bool soft_cap_ = false;
  uint32_t tick_ = 0;
  // Whether lookups stamp rows' use (eviction configured, or a row cap).
  bool track_use_ = false;
  size_t sweep_at_ = 0;
  uint64_t lfu_random_ = 0x2545F4914F6CDD1Dull;
  std::unique_ptr<AdmissionSketch> sketch_;
  Counters counters_;

  // The cut under way: the rows in slots [cut_next_, cut_end_) are still to be read; slots below
  // cut_end_ existed at StartCut. Both 0 when no cut is under way.
  bool cutting_ = false;
  uint32_t cut_next_ = 0;
  uint32_t cut_end_ = 0;
  // The id of each slot below cut_end_ and whether it held a row at StartCut (BuildCutIds).
  std::vector<uint64_t> cut_ids_;
  std::vector<bool> cut_live_;
  // Rows changed since StartCut before the cut read them, as stored (row_words_ words; decoded
  // when read): for each slot below cut_end_, where its old row is among the kept rows, or kEmpty (allocated by the first KeepForCut). Kept row
  // k is row k % kKeptRows of block k / kKeptRows: blocks, so that keeping a row never moves the
  // others (no copy of them all under the shard's lock, as a growing vector would).
  static constexpr uint32_t kKeptRows = 1024;
  std::vector<uint32_t> cut_kept_at_;
  std::vector<std::unique_ptr<float[]>> cut_kept_blocks_;
  uint32_t cut_kept_ = 0;
};

template <typename F>
void TableShard::ForEach(F&& f) const {
  // In slot order (slots are 0 .. size_ - 1, given in order of creation), so that the rows are
  // read as they lie in the slabs: a checkpoint's cut or a snapshot, which hold the shard's lock,
  // stream them instead of taking a cache miss a row in the index's order. Where each slot's id
  // is, first.
  // Free slots keep kEmpty.
  std::vector<uint32_t> bucket_of(slots_used_, kEmpty);
  for (size_t b = 0; b < capacity_; ++b) {
    const uint32_t slot = entries_[b].slot;
    if (slot != kEmpty) bucket_of[slot] = static_cast<uint32_t>(b);
  }
  std::vector<float> decoded(compact_ ? row_floats_ : 0);
  for (size_t slot = 0; slot < slots_used_; ++slot) {
    if (bucket_of[slot] == kEmpty) continue;
    const float* row = Row(static_cast<uint32_t>(slot));
    if (compact_) {
      DecodeRow(row, decoded.data());
      row = decoded.data();
    }
    f(entries_[bucket_of[slot]].id, row);
  }
}

template <typename F>
size_t TableShard::ForEachChangedSince(uint32_t since, F&& f) const {
  size_t n = 0;
  std::vector<float> decoded(compact_ ? row_floats_ : 0);
  for (size_t b = 0; b < capacity_; ++b) {
    const Entry entry = entries_[b];
    if (entry.slot != kEmpty && entry.generation > since) {
      const float* row = Row(entry.slot);
      if (compact_) {
        DecodeRow(row, decoded.data());
        row = decoded.data();
      }
      f(entry.id, row);
      ++n;
    }
  }
  return n;
}

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_STORAGE_EMBEDDING_TABLE_H_

#include "server/storage/embedding_table.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/half.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace ps {
namespace server {
namespace {

constexpr uint32_t kMaxDim = 4096;
// The largest dim of a compact table (common/job_config.cc says why).
constexpr uint32_t kMaxCompactDim = 1024;

// Maximum load of the index, kLoadNum / kLoadDen = 0.85.
constexpr uint64_t kLoadNum = 17;
constexpr uint64_t kLoadDen = 20;
constexpr size_t kMinCapacity = 16;
// Bucket addresses are 32-bit fractions times the capacity.
constexpr size_t kMaxCapacity = size_t{1} << 32;
// The first allocation of a slab block, in rows.
constexpr uint32_t kMinBlockRows = 16;
// Ids looked up ahead of the one being resolved, whose buckets are prefetched meanwhile.
constexpr size_t kPrefetchDistance = 16;

size_t MaxSizeFor(size_t capacity) { return capacity * kLoadNum / kLoadDen; }

// The smallest capacity whose maximum size is at least `rows`.
size_t CapacityFor(size_t rows) {
  const size_t capacity = (rows * kLoadDen + kLoadNum - 1) / kLoadNum;
  return std::min(std::max(capacity, kMinCapacity), kMaxCapacity);
}

[[noreturn]] void Die(const char* message) {
  std::fprintf(stderr, "TableShard: %s\n", message);
  std::abort();
}

// Per-thread buffers of Pull and Push, reused across calls and shards (a thread works on one
// shard at a time and nothing here calls back into a shard).
struct Scratch {
  std::vector<uint32_t> hashes;
  std::vector<uint32_t> slots;
  // Push's duplicate folding: an open-addressing set of slots (power-of-two size) mapping each
  // slot to its index among the unique slots.
  std::vector<uint32_t> set_keys;
  std::vector<uint32_t> set_values;
  std::vector<uint32_t> unique_slots;
  std::vector<uint32_t> unique_of;  // per id: index of its slot among unique_slots
  std::vector<float> sums;
  // Push's gradients of the ids with a row, when some had none.
  std::vector<float> kept_grads;
  // A compact row's weights decoded (Push), or a new row's initial weights (NewRow).
  std::vector<float> weights;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Fills s->unique_slots with the distinct values of slots[0, n) in order of first occurrence and
// s->unique_of[i] with the index of slots[i] among them. Returns the number of distinct slots.
size_t FoldDuplicates(const uint32_t* slots, size_t n, Scratch* s) {
  constexpr uint32_t kFree = 0xFFFFFFFF;  // never a slot
  int bits = 4;
  while ((size_t{1} << bits) < 2 * n) ++bits;
  const size_t mask = (size_t{1} << bits) - 1;
  s->set_keys.assign(mask + 1, kFree);
  s->set_values.resize(mask + 1);
  s->unique_slots.resize(n);
  s->unique_of.resize(n);
  size_t unique = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = slots[i];
    // Fibonacci hashing: the top bits of the product are well mixed even for sequential slots.
    size_t b = static_cast<uint32_t>(slot * 0x9e3779b9u) >> (32 - bits);
    while (s->set_keys[b] != kFree && s->set_keys[b] != slot) b = (b + 1) & mask;
    if (s->set_keys[b] == kFree) {
      s->set_keys[b] = slot;
      s->set_values[b] = static_cast<uint32_t>(unique);
      s->unique_slots[unique++] = slot;
    }
    s->unique_of[i] = s->set_values[b];
  }
  return unique;
}

// A new anonymous read-write mapping of `bytes`, or MAP_FAILED.
void* MapAnonymous(size_t bytes) {
  return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

// Grows the anonymous mapping [old, old + old_bytes) to `bytes`, moving it if it must; returns
// the new start, or MAP_FAILED. mremap moves the pages without copying them. ThreadSanitizer does
// not intercept mremap, and keeps whatever it knew of the new addresses from before (a finished
// thread's stack, say), then reports the slab's first writes as races with it; under TSan a slab
// therefore grows through a fresh mapping and a copy, which it sees.
void* GrowMapping(void* old, size_t old_bytes, size_t bytes) {
#if defined(__SANITIZE_THREAD__)
  void* grown = MapAnonymous(bytes);
  if (grown == MAP_FAILED) return grown;
  std::memcpy(grown, old, old_bytes);
  munmap(old, old_bytes);
  return grown;
#else
  return mremap(old, old_bytes, bytes, MREMAP_MAYMOVE);
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<TableSpec>> TableSpec::Create(const config::Table& table,
                                                             uint64_t job_seed) {
  if (table.name().empty()) return absl::InvalidArgumentError("table: missing name");
  if (table.dim() < 1 || table.dim() > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table \"%s\": dim must be between 1 and %d, got %d", table.name(), kMaxDim, table.dim()));
  }
  if (!config::Table::ValueType_IsValid(table.value_type())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table \"%s\": unknown value_type %d", table.name(), table.value_type()));
  }
  if (table.value_type() != config::Table::FP32 && table.dim() > kMaxCompactDim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table \"%s\": value_type %s needs dim <= %d, got %d", table.name(),
        config::Table::ValueType_Name(table.value_type()), kMaxCompactDim, table.dim()));
  }
  auto spec = std::make_unique<TableSpec>();
  spec->name = table.name();
  spec->dim = table.dim();
  spec->value_type = table.value_type();
  spec->name_hash = NameHash(table.name());
  PS_ASSIGN_OR_RETURN(spec->optimizer, Optimizer::Create(table.optimizer()));
  PS_ASSIGN_OR_RETURN(spec->initializer,
                      Initializer::Create(table.initializer(), job_seed, table.name()));
  if (table.has_admission()) {
    const config::Admission& admission = table.admission();
    if (admission.min_count() < 1 || admission.min_count() > AdmissionSketch::kMaxCount ||
        !(admission.probability() > 0.0f && admission.probability() <= 1.0f)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "table \"%s\": admission needs min_count in [1, 15] and probability in (0, 1]",
          table.name()));
    }
    spec->admission = true;
    spec->admission_options.min_count = admission.min_count();
    spec->admission_options.probability = admission.probability();
    spec->admission_options.seed = spec->name_hash ^ job_seed;
  }
  if (table.has_eviction()) {
    const config::Eviction& eviction = table.eviction();
    if (eviction.ttl_steps() > 0 && eviction.ttl_seconds() > 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "table \"%s\": eviction sets both ttl_steps and ttl_seconds", table.name()));
    }
    spec->eviction = true;
    spec->lfu = eviction.policy() == config::Eviction::LFU;
    spec->ttl_steps = eviction.ttl_steps();
    spec->ttl_seconds = eviction.ttl_seconds();
  }
  return spec;
}

TableShard::TableShard(const TableSpec* spec, size_t expected_rows, size_t sketch_width)
    : spec_(spec),
      dim_(spec->dim),
      row_floats_(spec->row_floats()),
      compact_(spec->compact()),
      weight_words_(spec->weight_words()),
      row_words_(spec->row_words()),
      expected_rows_(expected_rows) {
  Rehash(CapacityFor(expected_rows));
  track_use_ = spec->eviction;
  if (spec->admission) {
    AdmissionOptions options = spec->admission_options;
    options.width = sketch_width;
    sketch_ = std::make_unique<AdmissionSketch>(options);
  }
}

size_t TableShard::BytesPerRow(const TableSpec& spec) {
  // The index at its largest load (kLoadNum / kLoadDen) plus the stored row.
  return (sizeof(Entry) * kLoadDen + kLoadNum - 1) / kLoadNum + size_t{spec.row_words()} * 4;
}

size_t TableShard::BytesForRows(const TableSpec& spec, size_t max_rows) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t row_bytes = size_t{spec.row_words()} * 4;
  // Whole blocks and the last one's pages.
  const size_t full_blocks = max_rows / kBlockRows;
  const size_t last_rows = max_rows % kBlockRows;
  const size_t slabs = full_blocks * ((kBlockRows * row_bytes + page - 1) / page * page) +
                       (last_rows * row_bytes + page - 1) / page * page;
  return CapacityFor(max_rows) * sizeof(Entry) + slabs;
}

void TableShard::SetMaxRows(size_t max_rows) {
  max_rows_ = max_rows;
  track_use_ = spec_->eviction || max_rows_ > 0;
}

size_t TableShard::MaxCapacity() const {
  return max_rows_ == 0 ? kMaxCapacity : std::max(CapacityFor(max_rows_), capacity_);
}

uint16_t TableShard::Used(uint16_t use) {
  uint32_t count = use >> 12;
  if (spec_->lfu && count < 15) {
    // A logarithmic count (Morris): incremented with probability 2^-count, so 4 bits count to
    // about 2^15 uses.
    lfu_random_ ^= lfu_random_ << 13;
    lfu_random_ ^= lfu_random_ >> 7;
    lfu_random_ ^= lfu_random_ << 17;
    if ((lfu_random_ & ((uint64_t{1} << count) - 1)) == 0) ++count;
  }
  return static_cast<uint16_t>((count << 12) | (tick_ & 0xFFF));
}

uint32_t TableShard::VictimScore(uint16_t use) const {
  const uint32_t age = (tick_ - use) & 0xFFF;
  if (!spec_->lfu) return age;
  return ((15 - (use >> 12)) << 12) | age;
}

uint32_t TableShard::IndexHash(uint64_t id) const {
  return static_cast<uint32_t>(KeyHash(spec_->name_hash, id));
}

uint32_t TableShard::FindSlot(uint64_t id) const {
  size_t b = HomeBucket(IndexHash(id));
  while (true) {
    const Entry& entry = entries_[b];
    if (entry.slot == kEmpty || entry.id == id) return entry.slot;
    if (++b == capacity_) b = 0;
  }
}

bool TableShard::Read(uint64_t id, float* row) const {
  const uint32_t slot = FindSlot(id);
  if (slot == kEmpty) return false;
  DecodeRow(Row(slot), row);
  return true;
}

void TableShard::EncodeWeights(const float* weights, float* stored) const {
  uint16_t* half = reinterpret_cast<uint16_t*>(stored);
  if (spec_->value_type == config::Table::FP16) {
    EncodeFp16(weights, dim_, half, Fp16Overflow::kSaturate);
  } else {
    EncodeBf16(weights, dim_, half);
  }
  if (dim_ % 2 != 0) half[dim_] = 0;  // the padding, so that equal rows are equal bytes
}

void TableShard::DecodeWeights(const float* stored, float* weights) const {
  const uint16_t* half = reinterpret_cast<const uint16_t*>(stored);
  if (spec_->value_type == config::Table::FP16) {
    DecodeFp16(half, dim_, weights);
  } else {
    DecodeBf16(half, dim_, weights);
  }
}

void TableShard::DecodeRow(const float* stored, float* row) const {
  if (!compact_) {
    std::memcpy(row, stored, size_t{row_floats_} * sizeof(float));
    return;
  }
  DecodeWeights(stored, row);
  std::memcpy(row + dim_, stored + weight_words_, size_t{row_floats_ - dim_} * sizeof(float));
}

void TableShard::EncodeRow(const float* row, float* stored) const {
  if (!compact_) {
    std::memcpy(stored, row, size_t{row_floats_} * sizeof(float));
    return;
  }
  EncodeWeights(row, stored);
  std::memcpy(stored + weight_words_, row + dim_, size_t{row_floats_ - dim_} * sizeof(float));
}

void TableShard::InitialWeights(uint64_t id, float* out) const {
  spec_->initializer->Fill(id, dim_, out);
  if (!compact_) return;
  for (uint32_t k = 0; k < dim_; ++k) {
    out[k] = spec_->value_type == config::Table::FP16
                 ? Fp16ToFloat(FloatToFp16(out[k], Fp16Overflow::kSaturate))
                 : Bf16ToFloat(FloatToBf16(out[k]));
  }
}

uint32_t TableShard::FindOrCreate(uint64_t id, uint32_t hash, bool initialize, bool touch,
                                  Create create) {
  size_t b = HomeBucket(hash);
  while (true) {
    Entry& entry = entries_[b];
    if (entry.slot == kEmpty) break;
    if (entry.id == id) {
      if (touch) entry.generation = generation_;
      if (track_use_) entry.use = Used(entry.use);
      return entry.slot;
    }
    if (++b == capacity_) b = 0;
  }
  if (create != Create::kAlways) {
    if (sketch_ != nullptr) {
      if (create == Create::kIfRoom) return kEmpty;  // pulls do not count sightings
      if (!sketch_->Admit(id)) {
        ++counters_.admission_refused;
        return kEmpty;
      }
    }
    if (max_rows_ != 0 && size_ >= max_rows_ && !soft_cap_) {
      ++counters_.full_refused;
      return kEmpty;
    }
  }
  if (size_ >= max_size_) {
    const size_t most = MaxCapacity();
    if (capacity_ >= most) {
      if (create != Create::kAlways && !soft_cap_) {
        ++counters_.full_refused;
        return kEmpty;
      }
      if (capacity_ == kMaxCapacity) Die("too many rows for one shard");
    }
    Rehash(std::min(capacity_ + capacity_ / 2, capacity_ >= most ? kMaxCapacity : most));
    b = HomeBucket(hash);
    while (entries_[b].slot != kEmpty) {
      if (++b == capacity_) b = 0;
    }
  }
  const uint32_t slot = NewRow(id, initialize);
  entries_[b] = {id, slot, generation_, track_use_ ? Used(0) : uint16_t{0}};
  return slot;
}

uint32_t TableShard::NewRow(uint64_t id, bool initialize) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    // A cut under way keeps its view of the slot: a hole at StartCut stays one, a row it has not
    // read yet was copied aside when it was freed.
    if (cutting_ && slot < cut_end_ && cut_ids_.empty()) BuildCutIds();
  } else {
    // max_size_ < 0.85 * 2^32 keeps slots below kEmpty.
    slot = static_cast<uint32_t>(slots_used_);
    ReserveSlot(slot);
    ++slots_used_;
  }
  if (initialize) {
    float* row = Row(slot);
    if (compact_) {
      std::vector<float>& weights = ThreadScratch().weights;
      weights.resize(dim_);
      spec_->initializer->Fill(id, dim_, weights.data());
      EncodeWeights(weights.data(), row);
    } else {
      spec_->initializer->Fill(id, dim_, row);
    }
    spec_->optimizer->InitState(dim_, row + weight_words_);
  }
  ++size_;
  return slot;
}

void TableShard::EraseBucket(size_t b) {
  const uint32_t slot = entries_[b].slot;
  if (cutting_ && slot < cut_end_) {
    if (cut_ids_.empty()) BuildCutIds();
    BeforeChange(slot);
  }
  // Backward shift: move later entries of the probe run into the hole when their home bucket
  // does not lie cyclically in (hole, their bucket].
  size_t hole = b;
  size_t j = b;
  while (true) {
    if (++j == capacity_) j = 0;
    if (entries_[j].slot == kEmpty) break;
    const size_t home = HomeBucket(IndexHash(entries_[j].id));
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    entries_[hole] = entries_[j];
    hole = j;
  }
  entries_[hole] = Entry{0, kEmpty, 0, 0};
  free_slots_.push_back(slot);
  --size_;
}

bool TableShard::Erase(uint64_t id) {
  size_t b = HomeBucket(IndexHash(id));
  while (true) {
    const Entry& entry = entries_[b];
    if (entry.slot == kEmpty) return false;
    if (entry.id == id) break;
    if (++b == capacity_) b = 0;
  }
  EraseBucket(b);
  return true;
}

size_t TableShard::Sweep(size_t max_buckets, uint32_t ttl_ticks, std::vector<uint64_t>* evicted) {
  if (capacity_ == 0 || size_ == 0) return 0;
  ttl_ticks = std::min(ttl_ticks, kMaxTtlTicks);
  constexpr uint32_t kOldest = 2 * kMaxTtlTicks;
  size_t done = 0;
  size_t b = sweep_at_ % capacity_;
  for (size_t visited = 0; visited < max_buckets && size_ > 0; ++visited) {
    Entry& entry = entries_[b];
    if (entry.slot != kEmpty) {
      const uint32_t age = (tick_ - entry.use) & 0xFFF;
      if (ttl_ticks != 0 && age > ttl_ticks) {
        if (evicted != nullptr) evicted->push_back(entry.id);
        EraseBucket(b);
        ++counters_.evicted_ttl;
        ++done;
        continue;  // another entry may have shifted into b
      }
      if (age > kOldest) {
        entry.use = static_cast<uint16_t>((entry.use & 0xF000) | ((tick_ - kOldest) & 0xFFF));
      }
    }
    if (++b == capacity_) b = 0;
  }
  sweep_at_ = b;
  return done;
}

size_t TableShard::EvictToRows(size_t target_rows, size_t max_rows_examined,
                               std::vector<uint64_t>* evicted, Departed* departed) {
  constexpr size_t kSlice = 64;
  size_t done = 0;
  size_t examined = 0;
  std::vector<std::pair<uint32_t, uint64_t>> slice;  // (score, id)
  slice.reserve(kSlice);
  size_t b = capacity_ == 0 ? 0 : sweep_at_ % capacity_;
  while (size_ > target_rows && examined < max_rows_examined) {
    slice.clear();
    for (size_t visited = 0; visited < capacity_ && slice.size() < kSlice; ++visited) {
      const Entry& entry = entries_[b];
      if (entry.slot != kEmpty) slice.emplace_back(VictimScore(entry.use), entry.id);
      if (++b == capacity_) b = 0;
    }
    examined += slice.size();
    // As many of the slice as the excess is of the rows, at least one.
    const size_t excess = size_ - target_rows;
    const size_t take = std::min(
        slice.size(), std::min(excess, std::max<size_t>(1, (slice.size() * excess + size_ - 1) /
                                                             std::max<size_t>(size_, 1))));
    std::partial_sort(slice.begin(), slice.begin() + take, slice.end(),
                      [](const auto& x, const auto& y) { return x.first > y.first; });
    for (size_t i = 0; i < take; ++i) {
      if (departed != nullptr) {
        if (TakeRows(absl::MakeConstSpan(&slice[i].second, 1), departed) == 0) continue;
      } else if (!Erase(slice[i].second)) {
        continue;
      }
      if (evicted != nullptr) evicted->push_back(slice[i].second);
      ++counters_.evicted_budget;
      ++done;
    }
  }
  sweep_at_ = b;
  return done;
}

size_t TableShard::TakeRows(absl::Span<const uint64_t> ids, Departed* out) {
  size_t taken = 0;
  const size_t row_bytes = stored_row_bytes();
  for (const uint64_t id : ids) {
    if (capacity_ == 0) break;
    size_t b = HomeBucket(IndexHash(id));
    while (entries_[b].slot != kEmpty && entries_[b].id != id) {
      if (++b == capacity_) b = 0;
    }
    const Entry entry = entries_[b];
    if (entry.slot == kEmpty) continue;
    out->ids.push_back(id);
    // The full tick, from the 12-bit stamp: rows are never older than 2 * kMaxTtlTicks (Sweep).
    out->last_use.push_back(tick_ - ((tick_ - entry.use) & 0xFFF));
    out->generations.push_back(entry.generation);
    out->use_counts.push_back(static_cast<uint8_t>(entry.use >> 12));
    out->stored.append(reinterpret_cast<const char*>(Row(entry.slot)), row_bytes);
    EraseBucket(b);
    ++taken;
  }
  return taken;
}

bool TableShard::InsertStored(uint64_t id, const void* stored, uint32_t last_use,
                              uint16_t generation, bool promotion, uint8_t use_count) {
  if (capacity_ != 0 && FindSlot(id) != kEmpty) return false;
  const uint32_t slot =
      FindOrCreate(id, IndexHash(id), /*initialize=*/false, /*touch=*/false, Create::kAlways);
  std::memcpy(Row(slot), stored, stored_row_bytes());
  size_t b = HomeBucket(IndexHash(id));
  while (entries_[b].id != id || entries_[b].slot != slot) {
    if (++b == capacity_) b = 0;
  }
  entries_[b].generation = generation;
  if (track_use_ && !promotion) {
    // Older than 2 * kMaxTtlTicks reads as that old (as Sweep stamps it); the LFU count starts
    // again. (A promoted row is being used: FindOrCreate stamped it as used now.)
    const uint32_t age = std::min<uint32_t>(tick_ - last_use, 2 * kMaxTtlTicks);
    entries_[b].use = static_cast<uint16_t>((tick_ - age) & 0xFFF);
  }
  if (track_use_) {
    entries_[b].use = static_cast<uint16_t>((static_cast<uint32_t>(use_count & 0xF) << 12) |
                                            (entries_[b].use & 0xFFF));
  }
  if (promotion) ++counters_.promoted;
  return true;
}

void TableShard::FindMissing(absl::Span<const uint64_t> ids, std::vector<uint64_t>* missing) const {
  const size_t first = missing->size();
  for (const uint64_t id : ids) {
    if (capacity_ != 0 && FindSlot(id) != kEmpty) continue;
    missing->push_back(id);
  }
  // Once each: few ids are missing, and fewer repeated.
  if (missing->size() - first > 1) {
    std::sort(missing->begin() + first, missing->end());
    missing->erase(std::unique(missing->begin() + first, missing->end()), missing->end());
  }
}

void TableShard::DecodeStored(const void* stored, float* row) const {
  std::vector<float>& aligned = ThreadScratch().weights;
  aligned.resize(row_words_);
  std::memcpy(aligned.data(), stored, stored_row_bytes());
  DecodeRow(aligned.data(), row);
}

void TableShard::EncodeStored(const float* row, void* stored) const {
  std::vector<float>& aligned = ThreadScratch().weights;
  aligned.resize(row_words_);
  EncodeRow(row, aligned.data());
  std::memcpy(stored, aligned.data(), stored_row_bytes());
}

TableShard::Block::~Block() {
  if (floats != nullptr) munmap(floats, bytes);
}

void TableShard::ReserveSlot(uint32_t slot) {
  const size_t b = slot >> kBlockShift;
  const uint32_t offset = slot & (kBlockRows - 1);
  if (b == blocks_.size()) blocks_.emplace_back();
  Block& block = blocks_[b];
  if (offset < block.capacity_rows) return;

  // Grow the last block: to what expected_rows says it will hold, else by doubling while small
  // and by quarter blocks beyond, so that at most a quarter block is spare.
  const size_t first_row = b << kBlockShift;
  const size_t expected = expected_rows_ > first_row ? expected_rows_ - first_row : 0;
  const size_t capacity = block.capacity_rows;
  const size_t grown = capacity < kBlockRows / 4 ? 2 * capacity : capacity + kBlockRows / 4;
  size_t rows = std::min<size_t>(
      kBlockRows, std::max<size_t>({size_t{kMinBlockRows}, grown, size_t{offset} + 1, expected}));
  // Not past the row cap: slots beyond it are never used (but under a soft cap, where they are
  // for a while, by a 64th of the cap at a time rather than a row).
  if (max_rows_ > first_row) {
    const size_t past = soft_cap_ ? offset + 1 + max_rows_ / 64 : offset + 1;
    rows =
        std::min(rows, std::max<size_t>(max_rows_ - first_row, std::min<size_t>(past, kBlockRows)));
  }
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (rows * row_words_ * size_t{4} + page - 1) / page * page;
  void* floats =
      block.floats == nullptr ? MapAnonymous(bytes) : GrowMapping(block.floats, block.bytes, bytes);
  if (floats == MAP_FAILED) Die("out of memory growing a slab");
  // Large slabs in huge pages where the kernel offers them on request: filling a table (a
  // restore, the first pulls) takes a page fault per 2 MiB instead of per 4 KiB, and lookups
  // miss the TLB less. Only advice: nothing changes where it is refused.
  madvise(floats, bytes, MADV_HUGEPAGE);
  block.floats = static_cast<float*>(floats);
  block.bytes = bytes;
  block.capacity_rows = static_cast<uint32_t>(rows);
}

void TableShard::Rehash(size_t capacity) {
  auto entries = std::unique_ptr<Entry[]>(new Entry[capacity]);
  std::fill(entries.get(), entries.get() + capacity, Entry{0, kEmpty, 0, 0});
  for (size_t old = 0; old < capacity_; ++old) {
    if (entries_[old].slot == kEmpty) continue;
    const uint64_t id = entries_[old].id;
    size_t b = static_cast<size_t>((uint64_t{IndexHash(id)} * capacity) >> 32);
    while (entries[b].slot != kEmpty) {
      if (++b == capacity) b = 0;
    }
    entries[b] = entries_[old];
  }
  entries_ = std::move(entries);
  capacity_ = capacity;
  max_size_ = MaxSizeFor(capacity);
}

size_t TableShard::ResolveSlots(absl::Span<const uint64_t> ids, uint32_t* hashes, uint32_t* slots,
                                bool initialize, bool touch, Create create) {
  const size_t n = ids.size();
  for (size_t i = 0; i < n; ++i) hashes[i] = IndexHash(ids[i]);
  // Lookups are cache misses at random places; with the buckets of the next ids already on their
  // way, several misses overlap. (After a rehash the first prefetches miss their target: harmless.)
  for (size_t i = 0; i < std::min(n, kPrefetchDistance); ++i) {
    const size_t b = HomeBucket(hashes[i]);
    __builtin_prefetch(&entries_[b]);
  }
  size_t missing = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      const size_t b = HomeBucket(hashes[i + kPrefetchDistance]);
      __builtin_prefetch(&entries_[b]);
    }
    slots[i] = FindOrCreate(ids[i], hashes[i], initialize, touch, create);
    missing += slots[i] == kEmpty;
  }
  return missing;
}

void TableShard::Pull(absl::Span<const uint64_t> ids, float* out) {
  const size_t n = ids.size();
  Scratch& s = ThreadScratch();
  s.hashes.resize(n);
  s.slots.resize(n);
  const size_t missing = ResolveSlots(ids, s.hashes.data(), s.slots.data(), /*initialize=*/true,
                                      /*touch=*/false, Create::kIfRoom);
  const size_t bytes = size_t{dim_} * sizeof(float);
  if (missing != 0) {
    for (size_t i = 0; i < n; ++i) {
      if (s.slots[i] == kEmpty) {
        InitialWeights(ids[i], out + i * dim_);
      } else if (compact_) {
        DecodeWeights(Row(s.slots[i]), out + i * dim_);
      } else {
        std::memcpy(out + i * dim_, Row(s.slots[i]), bytes);
      }
    }
    return;
  }
  // The stored weights' bytes, which the prefetches cover.
  const size_t stored_bytes = size_t{weight_words_} * 4;
  if (compact_) {
    for (size_t i = 0; i < n; ++i) {
      if (i + kPrefetchDistance < n) {
        const char* next = reinterpret_cast<const char*>(Row(s.slots[i + kPrefetchDistance]));
        __builtin_prefetch(next);
        if (stored_bytes > 64) __builtin_prefetch(next + 64);
      }
      DecodeWeights(Row(s.slots[i]), out + i * dim_);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      const char* next = reinterpret_cast<const char*>(Row(s.slots[i + kPrefetchDistance]));
      __builtin_prefetch(next);
      if (bytes > 64) __builtin_prefetch(next + 64);
    }
    std::memcpy(out + i * dim_, Row(s.slots[i]), bytes);
  }
}

void TableShard::Peek(absl::Span<const uint64_t> ids, float* out) const {
  const size_t bytes = size_t{dim_} * sizeof(float);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t slot = FindSlot(ids[i]);
    if (slot == kEmpty) {
      InitialWeights(ids[i], out + i * dim_);
    } else if (compact_) {
      DecodeWeights(Row(slot), out + i * dim_);
    } else {
      std::memcpy(out + i * dim_, Row(slot), bytes);
    }
  }
}

size_t TableShard::Push(absl::Span<const uint64_t> ids, const float* grads, float* rows_after,
                        std::vector<uint64_t>* kept) {
  size_t n = ids.size();
  Scratch& s = ThreadScratch();
  s.hashes.resize(n);
  s.slots.resize(n);
  // The lookups stamp the rows as changed, their index entries in cache at that moment.
  const size_t dropped = ResolveSlots(ids, s.hashes.data(), s.slots.data(), /*initialize=*/true,
                                      /*touch=*/true, Create::kIfAdmitted);
  if (dropped != 0) {
    // Only the ids with a row go on: their slots and gradients, moved to the front.
    if (kept != nullptr) kept->clear();
    s.kept_grads.resize((n - dropped) * dim_);
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
      if (s.slots[i] == kEmpty) continue;
      s.slots[k] = s.slots[i];
      std::memcpy(s.kept_grads.data() + k * dim_, grads + i * dim_, size_t{dim_} * sizeof(float));
      if (kept != nullptr) kept->push_back(ids[i]);
      ++k;
    }
    n = k;
    grads = s.kept_grads.data();
  }
  const Optimizer& optimizer = *spec_->optimizer;
  const size_t unique = FoldDuplicates(s.slots.data(), n, &s);
  const float* g = grads;
  if (unique < n) {
    // Sum the gradients of each slot in ids order.
    s.sums.assign(unique * dim_, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      float* sum = s.sums.data() + size_t{s.unique_of[i]} * dim_;
      const float* grad = grads + i * dim_;
      for (uint32_t k = 0; k < dim_; ++k) sum[k] += grad[k];
    }
    g = s.sums.data();
  }
  const size_t row_bytes = size_t{row_floats_} * sizeof(float);
  // Without duplicates the unique rows are in ids order: each is copied out while in cache.
  const bool copy_at_once = rows_after != nullptr && unique == n;
  if (compact_) {
    // Decode, apply in fp32 with the stored fp32 state, encode back (round to nearest even).
    s.weights.resize(dim_);
    float* weights = s.weights.data();
    const size_t stored_bytes = size_t{row_words_} * 4;
    for (size_t u = 0; u < unique; ++u) {
      if (u + kPrefetchDistance < unique) {
        PrefetchRowForWrite(s.unique_slots[u + kPrefetchDistance], stored_bytes);
      }
      BeforeChange(s.unique_slots[u]);
      float* row = Row(s.unique_slots[u]);
      DecodeWeights(row, weights);
      optimizer.Apply(dim_, g + u * dim_, weights, row + weight_words_);
      EncodeWeights(weights, row);
      if (copy_at_once) DecodeRow(row, rows_after + u * row_floats_);
    }
    if (rows_after != nullptr && !copy_at_once) {
      for (size_t i = 0; i < n; ++i) DecodeRow(Row(s.slots[i]), rows_after + i * row_floats_);
    }
    return dropped;
  }
  for (size_t u = 0; u < unique; ++u) {
    if (u + kPrefetchDistance < unique) {
      PrefetchRowForWrite(s.unique_slots[u + kPrefetchDistance], row_bytes);
    }
    BeforeChange(s.unique_slots[u]);
    float* row = Row(s.unique_slots[u]);
    optimizer.Apply(dim_, g + u * dim_, row, row + dim_);
    if (copy_at_once) std::memcpy(rows_after + u * row_floats_, row, row_bytes);
  }
  if (rows_after != nullptr && !copy_at_once) {
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(rows_after + i * row_floats_, Row(s.slots[i]), row_bytes);
    }
  }
  return dropped;
}

void TableShard::Assign(uint64_t id, const float* row) {
  const uint32_t slot = FindOrCreate(id, IndexHash(id), /*initialize=*/false, /*touch=*/true,
                                     Create::kAlways);
  BeforeChange(slot);
  EncodeRow(row, Row(slot));
}

void TableShard::AssignRows(absl::Span<const uint64_t> ids, const void* rows) {
  const size_t n = ids.size();
  Scratch& s = ThreadScratch();
  s.hashes.resize(n);
  s.slots.resize(n);
  // New rows are overwritten at once: no initializer.
  ResolveSlots(ids, s.hashes.data(), s.slots.data(), /*initialize=*/false, /*touch=*/true,
               Create::kAlways);
  const size_t bytes = size_t{row_floats_} * sizeof(float);
  if (compact_) {
    // `rows` may be unaligned: each row is copied to aligned scratch, then encoded.
    s.weights.resize(row_floats_);
    for (size_t i = 0; i < n; ++i) {
      if (i + kPrefetchDistance < n) {
        PrefetchRowForWrite(s.slots[i + kPrefetchDistance], size_t{row_words_} * 4);
      }
      BeforeChange(s.slots[i]);
      std::memcpy(s.weights.data(), static_cast<const char*>(rows) + i * bytes, bytes);
      EncodeRow(s.weights.data(), Row(s.slots[i]));
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) PrefetchRowForWrite(s.slots[i + kPrefetchDistance], bytes);
    BeforeChange(s.slots[i]);
    std::memcpy(Row(s.slots[i]), static_cast<const char*>(rows) + i * bytes, bytes);
  }
}

int64_t TableShard::RowGeneration(uint64_t id) const {
  size_t b = HomeBucket(IndexHash(id));
  while (true) {
    const Entry& entry = entries_[b];
    if (entry.slot == kEmpty) return -1;
    if (entry.id == id) return entry.generation;
    if (++b == capacity_) b = 0;
  }
}

void TableShard::ResetGenerations() {
  for (size_t b = 0; b < capacity_; ++b) entries_[b].generation = 0;
}

void TableShard::StartCut() {
  EndCut();
  cutting_ = true;
  cut_next_ = 0;
  cut_end_ = static_cast<uint32_t>(slots_used_);
}

void TableShard::BuildCutIds() {
  // Until a slot below cut_end_ is freed or reused, the index holds the ids it held at StartCut
  // for every slot below cut_end_, and the slots not in it are the holes of then.
  cut_ids_.assign(cut_end_, 0);
  cut_live_.assign(cut_end_, false);
  for (size_t b = 0; b < capacity_; ++b) {
    const uint32_t slot = entries_[b].slot;
    if (slot < cut_end_) {
      cut_ids_[slot] = entries_[b].id;
      cut_live_[slot] = true;
    }
  }
}

void TableShard::KeepForCut(uint32_t slot) {
  if (cut_kept_at_.empty()) cut_kept_at_.assign(cut_end_, kEmpty);
  uint32_t& at = cut_kept_at_[slot];
  if (at != kEmpty) return;
  if (cut_kept_ % kKeptRows == 0) {
    cut_kept_blocks_.emplace_back(new float[size_t{kKeptRows} * row_words_]);
  }
  at = cut_kept_++;
  std::memcpy(cut_kept_blocks_.back().get() + size_t{at % kKeptRows} * row_words_, Row(slot),
              size_t{row_words_} * 4);
}

size_t TableShard::ReadCut(size_t max_rows, uint64_t* ids, float* rows) {
  if (!cutting_ || cut_next_ == cut_end_) return 0;
  if (cut_ids_.empty()) BuildCutIds();
  size_t n = 0;
  while (n < max_rows && cut_next_ < cut_end_) {
    const uint32_t slot = cut_next_++;
    if (!cut_live_[slot]) continue;  // a hole at StartCut
    const uint32_t kept = cut_kept_at_.empty() ? kEmpty : cut_kept_at_[slot];
    const float* row = kept == kEmpty ? Row(slot)
                                      : cut_kept_blocks_[kept / kKeptRows].get() +
                                            size_t{kept % kKeptRows} * row_words_;
    ids[n] = cut_ids_[slot];
    DecodeRow(row, rows + n * row_floats_);
    ++n;
  }
  return n;
}

void TableShard::EndCut() {
  cutting_ = false;
  cut_next_ = 0;
  cut_end_ = 0;
  std::vector<uint64_t>().swap(cut_ids_);
  std::vector<bool>().swap(cut_live_);
  std::vector<uint32_t>().swap(cut_kept_at_);
  std::vector<std::unique_ptr<float[]>>().swap(cut_kept_blocks_);
  cut_kept_ = 0;
}

size_t TableShard::MemoryBytes() const {
  size_t bytes = capacity_ * sizeof(Entry);
  bytes += blocks_.capacity() * sizeof(Block);
  for (const Block& block : blocks_) {
    bytes += block.bytes;
  }
  bytes += cut_ids_.capacity() * sizeof(uint64_t) + cut_live_.capacity() / 8 +
           cut_kept_at_.capacity() * sizeof(uint32_t) +
           cut_kept_blocks_.size() * size_t{kKeptRows} * row_words_ * 4;
  bytes += free_slots_.capacity() * sizeof(uint32_t);
  if (sketch_ != nullptr) bytes += sketch_->MemoryBytes();
  return bytes;
}

}  // namespace server
}  // namespace ps

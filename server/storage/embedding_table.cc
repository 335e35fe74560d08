#include "server/storage/embedding_table.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace ps {
namespace server {
namespace {

constexpr uint32_t kMaxDim = 4096;

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
  auto spec = std::make_unique<TableSpec>();
  spec->name = table.name();
  spec->dim = table.dim();
  spec->name_hash = NameHash(table.name());
  PS_ASSIGN_OR_RETURN(spec->optimizer, Optimizer::Create(table.optimizer()));
  PS_ASSIGN_OR_RETURN(spec->initializer,
                      Initializer::Create(table.initializer(), job_seed, table.name()));
  return spec;
}

TableShard::TableShard(const TableSpec* spec, size_t expected_rows)
    : spec_(spec), dim_(spec->dim), row_floats_(spec->row_floats()), expected_rows_(expected_rows) {
  Rehash(CapacityFor(expected_rows));
}

uint32_t TableShard::IndexHash(uint64_t id) const {
  return static_cast<uint32_t>(KeyHash(spec_->name_hash, id));
}

const float* TableShard::Find(uint64_t id) const {
  size_t b = HomeBucket(IndexHash(id));
  while (true) {
    const Entry& entry = entries_[b];
    if (entry.slot == kEmpty) return nullptr;
    if (entry.id == id) return Row(entry.slot);
    if (++b == capacity_) b = 0;
  }
}

uint32_t TableShard::FindOrCreate(uint64_t id, uint32_t hash, bool initialize, bool touch) {
  size_t b = HomeBucket(hash);
  while (true) {
    Entry& entry = entries_[b];
    if (entry.slot == kEmpty) break;
    if (entry.id == id) {
      if (touch) entry.generation = generation_;
      return entry.slot;
    }
    if (++b == capacity_) b = 0;
  }
  if (size_ >= max_size_) {
    if (capacity_ == kMaxCapacity) Die("too many rows for one shard");
    Rehash(std::min(capacity_ + capacity_ / 2, kMaxCapacity));
    b = HomeBucket(hash);
    while (entries_[b].slot != kEmpty) {
      if (++b == capacity_) b = 0;
    }
  }
  const uint32_t slot = NewRow(id, initialize);
  entries_[b] = {id, slot, generation_};
  return slot;
}

uint32_t TableShard::NewRow(uint64_t id, bool initialize) {
  // max_size_ < 0.85 * 2^32 keeps slots below kEmpty.
  const uint32_t slot = static_cast<uint32_t>(size_);
  ReserveSlot(slot);
  if (initialize) {
    float* row = Row(slot);
    spec_->initializer->Fill(id, dim_, row);
    spec_->optimizer->InitState(dim_, row + dim_);
  }
  ++size_;
  return slot;
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
  const size_t rows = std::min<size_t>(
      kBlockRows, std::max<size_t>({size_t{kMinBlockRows}, grown, size_t{offset} + 1, expected}));
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (rows * row_floats_ * sizeof(float) + page - 1) / page * page;
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
  std::fill(entries.get(), entries.get() + capacity, Entry{0, kEmpty, 0});
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

void TableShard::ResolveSlots(absl::Span<const uint64_t> ids, uint32_t* hashes, uint32_t* slots,
                              bool initialize, bool touch) {
  const size_t n = ids.size();
  for (size_t i = 0; i < n; ++i) hashes[i] = IndexHash(ids[i]);
  // Lookups are cache misses at random places; with the buckets of the next ids already on their
  // way, several misses overlap. (After a rehash the first prefetches miss their target: harmless.)
  for (size_t i = 0; i < std::min(n, kPrefetchDistance); ++i) {
    const size_t b = HomeBucket(hashes[i]);
    __builtin_prefetch(&entries_[b]);
  }
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      const size_t b = HomeBucket(hashes[i + kPrefetchDistance]);
      __builtin_prefetch(&entries_[b]);
    }
    slots[i] = FindOrCreate(ids[i], hashes[i], initialize, touch);
  }
}

void TableShard::Pull(absl::Span<const uint64_t> ids, float* out) {
  const size_t n = ids.size();
  Scratch& s = ThreadScratch();
  s.hashes.resize(n);
  s.slots.resize(n);
  ResolveSlots(ids, s.hashes.data(), s.slots.data(), /*initialize=*/true, /*touch=*/false);
  const size_t bytes = size_t{dim_} * sizeof(float);
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
    const float* row = Find(ids[i]);
    if (row != nullptr) {
      std::memcpy(out + i * dim_, row, bytes);
    } else {
      spec_->initializer->Fill(ids[i], dim_, out + i * dim_);
    }
  }
}

void TableShard::Push(absl::Span<const uint64_t> ids, const float* grads, float* rows_after) {
  const size_t n = ids.size();
  Scratch& s = ThreadScratch();
  s.hashes.resize(n);
  s.slots.resize(n);
  // The lookups stamp the rows as changed, their index entries in cache at that moment.
  ResolveSlots(ids, s.hashes.data(), s.slots.data(), /*initialize=*/true, /*touch=*/true);
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
}

void TableShard::Assign(uint64_t id, const float* row) {
  const uint32_t slot = FindOrCreate(id, IndexHash(id), /*initialize=*/false, /*touch=*/true);
  BeforeChange(slot);
  std::memcpy(Row(slot), row, size_t{row_floats_} * sizeof(float));
}

void TableShard::AssignRows(absl::Span<const uint64_t> ids, const void* rows) {
  const size_t n = ids.size();
  Scratch& s = ThreadScratch();
  s.hashes.resize(n);
  s.slots.resize(n);
  // New rows are overwritten at once: no initializer.
  ResolveSlots(ids, s.hashes.data(), s.slots.data(), /*initialize=*/false, /*touch=*/true);
  const size_t bytes = size_t{row_floats_} * sizeof(float);
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
  cut_end_ = static_cast<uint32_t>(size_);
}

void TableShard::KeepForCut(uint32_t slot) {
  if (cut_kept_at_.empty()) cut_kept_at_.assign(cut_end_, kEmpty);
  uint32_t& at = cut_kept_at_[slot];
  if (at != kEmpty) return;
  if (cut_kept_ % kKeptRows == 0) {
    cut_kept_blocks_.emplace_back(new float[size_t{kKeptRows} * row_floats_]);
  }
  at = cut_kept_++;
  std::memcpy(cut_kept_blocks_.back().get() + size_t{at % kKeptRows} * row_floats_, Row(slot),
              size_t{row_floats_} * sizeof(float));
}

size_t TableShard::ReadCut(size_t max_rows, uint64_t* ids, float* rows) {
  if (!cutting_ || cut_next_ == cut_end_) return 0;
  if (cut_ids_.empty()) {
    // Slots never move and keep their ids, so the slots below cut_end_ have the ids they had at
    // StartCut.
    cut_ids_.resize(cut_end_);
    for (size_t b = 0; b < capacity_; ++b) {
      const uint32_t slot = entries_[b].slot;
      if (slot < cut_end_) cut_ids_[slot] = entries_[b].id;
    }
  }
  const uint32_t n = static_cast<uint32_t>(std::min<size_t>(max_rows, cut_end_ - cut_next_));
  const size_t bytes = size_t{row_floats_} * sizeof(float);
  std::memcpy(ids, cut_ids_.data() + cut_next_, n * sizeof(uint64_t));
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t slot = cut_next_ + i;
    const uint32_t kept = cut_kept_at_.empty() ? kEmpty : cut_kept_at_[slot];
    const float* row = kept == kEmpty ? Row(slot)
                                      : cut_kept_blocks_[kept / kKeptRows].get() +
                                            size_t{kept % kKeptRows} * row_floats_;
    std::memcpy(rows + size_t{i} * row_floats_, row, bytes);
  }
  cut_next_ += n;
  return n;
}

void TableShard::EndCut() {
  cutting_ = false;
  cut_next_ = 0;
  cut_end_ = 0;
  std::vector<uint64_t>().swap(cut_ids_);
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
  bytes += cut_ids_.capacity() * sizeof(uint64_t) + cut_kept_at_.capacity() * sizeof(uint32_t) +
           cut_kept_blocks_.size() * size_t{kKeptRows} * row_floats_ * sizeof(float);
  return bytes;
}

}  // namespace server
}  // namespace ps

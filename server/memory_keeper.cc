#include "server/memory_keeper.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"

namespace ps {
namespace server {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// The sweeper's watermarks, as shares of a table's cap.
constexpr double kHigh = 0.98;
constexpr double kLow = 0.90;
// Counters a row of a default sketch holds for each row the cap allows (2 bytes an id).
constexpr size_t kSketchIdsPerRow = 4;
constexpr size_t kDefaultSketchIds = size_t{1} << 20;

// Counters per row of an admission sketch holding `ids` ids.
size_t WidthFor(uint64_t ids) { return std::max<uint64_t>(64, ids); }

}  // namespace

int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long long size = 0, resident = 0;
  const int read = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (read != 2) return 0;
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

MemoryKeeper::MemoryKeeper(const config::Job& job, std::vector<const TableSpec*> tables,
                           Options options)
    : tables_(std::move(tables)),
      options_(std::move(options)),
      budget_bytes_(options_.budget_bytes),
      start_(options_.now()) {
  num_shards_ = std::max<uint32_t>(1, job.cluster().num_shards());
  use_ticks_.reset(new std::atomic<uint32_t>[tables_.size()]);
  for (size_t t = 0; t < tables_.size(); ++t) use_ticks_[t].store(0);
  double total_weight = 0;
  for (const config::Table& t : job.tables()) total_weight += t.memory_weight();
  for (int t = 0; t < job.tables_size(); ++t) {
    shares_.push_back(job.tables(t).memory_weight() / total_weight);
    sketch_ids_.push_back(job.tables(t).admission().sketch_ids());
    const TableSpec& spec = *tables_[t];
    any_ttl_ = any_ttl_ || spec.ttl_steps > 0 || spec.ttl_seconds > 0;
  }
}

size_t MemoryKeeper::CostPerRow(size_t t) const {
  const TableSpec& spec = *tables_[t];
  size_t cost = TableShard::BytesPerRow(spec);
  if (spec.admission && sketch_ids_[t] == 0) cost += kSketchIdsPerRow * 2;
  return cost;
}

absl::StatusOr<std::unique_ptr<MemoryKeeper>> MemoryKeeper::Create(
    const config::Job& job, std::vector<const TableSpec*> tables, size_t expected_copies,
    Options options) {
  if (options.budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--memory_budget_mb must be >= 0, got %d bytes", options.budget_bytes));
  }
  if (!options.now) options.now = [] { return absl::Now(); };
  if (!options.resident_bytes) options.resident_bytes = ResidentBytes;
  if (!options.release_free_memory) options.release_free_memory = [] { malloc_trim(0); };
  const bool budget = options.budget_bytes > 0;
  for (int t = 0; t < job.tables_size(); ++t) {
    const config::Table& table = job.tables(t);
    if (!budget && table.has_memory_weight()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tables[%d] \"%s\": memory_weight shares a server's memory budget, and this server "
          "has none (ps_server --memory_budget_mb)",
          t, table.name()));
    }
    if (!budget && table.has_eviction() && table.eviction().ttl_steps() == 0 &&
        table.eviction().ttl_seconds() == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tables[%d] \"%s\": eviction without ttl_steps or ttl_seconds evicts only under a "
          "memory budget, and this server has none (ps_server --memory_budget_mb)",
          t, table.name()));
    }
  }
  std::unique_ptr<MemoryKeeper> keeper(
      new MemoryKeeper(job, std::move(tables), std::move(options)));
  const size_t copies = std::max<size_t>(1, expected_copies);
  if (budget) {
    keeper->baseline_bytes_ = keeper->options_.resident_bytes();
    const int64_t reserve = static_cast<int64_t>(keeper->budget_bytes_ * kReserve);
    const int64_t other = std::max<int64_t>(0, keeper->options_.other_bytes);
    keeper->allowance_bytes_ = keeper->budget_bytes_ - reserve - keeper->baseline_bytes_ - other;
    // The fixed part: every table's minimum rows in every copy.
    int64_t minimum = 0;
    for (size_t t = 0; t < keeper->tables_.size(); ++t) {
      const TableSpec& spec = *keeper->tables_[t];
      size_t per_copy = TableShard::BytesForRows(spec, kMinRowsPerCopy) +
                        kMinRowsPerCopy * (keeper->CostPerRow(t) - TableShard::BytesPerRow(spec));
      if (spec.admission && keeper->sketch_ids_[t] != 0) {
        per_copy += 2 * WidthFor(keeper->sketch_ids_[t] / keeper->num_shards_);
      }
      // The table's share must hold it.
      const double need = static_cast<double>(per_copy) * copies / keeper->shares_[t];
      minimum = std::max<int64_t>(minimum, static_cast<int64_t>(need));
    }
    if (keeper->allowance_bytes_ < minimum) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--memory_budget_mb=%.0f cannot hold the job's fixed part: %.1f MiB resident before any "
          "row, %.1f MiB for the disk tier's memtables and cache, a %.0f%% reserve of %.1f MiB, "
          "and at least %d rows of every table in each of the %d shard copies this server "
          "expects to hold (%.1f MiB by the tables' weights): a budget of at least %.0f MiB is "
          "needed",
          keeper->budget_bytes_ / kMiB, keeper->baseline_bytes_ / kMiB, other / kMiB,
          kReserve * 100, reserve / kMiB, kMinRowsPerCopy, copies, minimum / kMiB,
          (keeper->baseline_bytes_ + other + minimum) / (1 - kReserve) / kMiB + 1));
    }
  }
  // Sketch widths, from the caps at the expected copies.
  const std::vector<size_t> caps = keeper->MaxRows(copies);
  for (size_t t = 0; t < keeper->tables_.size(); ++t) {
    uint64_t ids = keeper->sketch_ids_[t] / keeper->num_shards_;
    if (keeper->sketch_ids_[t] == 0) {
      ids = budget ? kSketchIdsPerRow * caps[t] : kDefaultSketchIds / keeper->num_shards_;
    }
    keeper->sketch_widths_.push_back(WidthFor(ids));
  }
  keeper->SetCopies(copies);
  return keeper;
}

std::vector<size_t> MemoryKeeper::MaxRows(size_t copies) const {
  std::vector<size_t> caps(tables_.size(), 0);
  if (budget_bytes_ <= 0) return caps;
  copies = std::max<size_t>(1, copies);
  for (size_t t = 0; t < tables_.size(); ++t) {
    const TableSpec& spec = *tables_[t];
    double per_copy = static_cast<double>(allowance_bytes_) * shares_[t] / copies;
    if (spec.admission && sketch_ids_[t] != 0) {
      per_copy -= 2.0 * WidthFor(sketch_ids_[t] / num_shards_);
    }
    const size_t cost = CostPerRow(t);
    size_t rows = per_copy <= 0 ? 0 : static_cast<size_t>(per_copy / cost);
    // The index's and slabs' exact sizes at that many rows (capacity and page rounding).
    const size_t extra = cost - TableShard::BytesPerRow(spec);
    while (rows > kMinRowsPerCopy &&
           static_cast<double>(TableShard::BytesForRows(spec, rows) + rows * extra) > per_copy) {
      rows -= std::max<size_t>(1, rows / 100);
    }
    caps[t] = std::max(rows, kMinRowsPerCopy);
  }
  return caps;
}

void MemoryKeeper::SetCopies(size_t copies) {
  std::vector<size_t> caps = MaxRows(copies);
  absl::MutexLock lock(&mu_);
  max_rows_ = std::move(caps);
}

std::vector<size_t> MemoryKeeper::CurrentMaxRows() const {
  absl::MutexLock lock(&mu_);
  return max_rows_;
}

void MemoryKeeper::NoteStep(int64_t step) {
  int64_t seen = max_step_.load(std::memory_order_relaxed);
  while (step > seen && !max_step_.compare_exchange_weak(seen, step, std::memory_order_relaxed)) {
  }
  if (step <= seen) return;
  // The step tables' clocks at once, so that this push's rows are stamped with its step.
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (tables_[t]->ttl_steps > 0) SetTick(t, step, 0);
  }
}

// A TTL spans at most TableShard::kMaxTtlTicks ticks: finer ticks would need the sweeps to visit
// every row more often than the stamps' 12 bits allow (TableShard::Sweep). Below that, a tick is
// a step (ttl_steps) or 1/16 s (ttl_seconds). Without a TTL, 4 ms, for LRU's resolution: the
// stamps then saturate at 8 s, and the sweeps visit every row in 200 passes (4 s when idle).
uint32_t MemoryKeeper::TtlTicks(size_t t) const {
  const TableSpec& spec = *tables_[t];
  if (spec.ttl_steps > 0) {
    return static_cast<uint32_t>(std::min<uint64_t>(TableShard::kMaxTtlTicks, spec.ttl_steps));
  }
  if (spec.ttl_seconds > 0) {
    return static_cast<uint32_t>(
        std::min<uint64_t>(TableShard::kMaxTtlTicks, 16 * spec.ttl_seconds));
  }
  return 0;
}

void MemoryKeeper::SetTick(size_t t, int64_t step, int64_t elapsed_ms) {
  const TableSpec& spec = *tables_[t];
  const uint64_t per_ttl = TtlTicks(t);
  uint64_t tick;
  if (spec.ttl_steps > 0) {
    tick = static_cast<uint64_t>(std::max<int64_t>(0, step)) * per_ttl / spec.ttl_steps;
  } else if (spec.ttl_seconds > 0) {
    tick = static_cast<uint64_t>(elapsed_ms) * per_ttl / (spec.ttl_seconds * 1000);
  } else {
    tick = static_cast<uint64_t>(elapsed_ms) / 4;
  }
  use_ticks_[t].store(static_cast<uint32_t>(tick), std::memory_order_relaxed);
}

std::vector<TableSweep> MemoryKeeper::Sweeps(bool evict_only) {
  const std::vector<size_t> caps = CurrentMaxRows();
  const int64_t elapsed_ms =
      std::max<int64_t>(0, absl::ToInt64Milliseconds(options_.now() - start_));
  const int64_t step = max_step_.load(std::memory_order_relaxed);
  std::vector<TableSweep> sweeps(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    TableSweep& sweep = sweeps[t];
    SetTick(t, step, elapsed_ms);
    sweep.ttl_ticks = TtlTicks(t);
    sweep.evict_only = evict_only;
    if (caps[t] != 0) {
      sweep.high_rows = static_cast<size_t>(caps[t] * kHigh);
      sweep.low_rows = static_cast<size_t>(caps[t] * kLow);
    }
  }
  return sweeps;
}

SweepResult MemoryKeeper::SweepOnce(const ForEachPrimary& for_each_primary, bool evict_only) {
  const std::vector<TableSweep> sweeps = Sweeps(evict_only);
  SweepResult total;
  for_each_primary([&](Shard* shard) {
    const SweepResult result = shard->Sweep(sweeps, options_.sweep_buckets);
    total.evicted += result.evicted;
    total.within = total.within && result.within;
  });
  if (budget_bytes_ > 0 &&
      options_.resident_bytes() > budget_bytes_ - static_cast<int64_t>(budget_bytes_ * kReserve)) {
    const int64_t now = absl::ToUnixNanos(absl::Now());
    int64_t last = last_release_ns_.load(std::memory_order_relaxed);
    if (now - last >= absl::ToInt64Nanoseconds(options_.release_period) &&
        last_release_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
      options_.release_free_memory();
    }
  }
  SampleResident();
  return total;
}

int64_t MemoryKeeper::SampleResident() {
  const int64_t resident = options_.resident_bytes();
  int64_t peak = peak_resident_.load(std::memory_order_relaxed);
  while (resident > peak &&
         !peak_resident_.compare_exchange_weak(peak, resident, std::memory_order_relaxed)) {
  }
  return resident;
}

void MemoryKeeper::Start(ForEachPrimary for_each_primary) {
  if (!active() || sweeper_.joinable()) return;
  sweeper_ = std::thread([this, f = std::move(for_each_primary)] { Run(f); });
}

void MemoryKeeper::Run(ForEachPrimary for_each_primary) {
  bool evict_only = false;
  while (true) {
    const SweepResult result = SweepOnce(for_each_primary, evict_only);
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    // A pass at once after one that left a table above its watermark only evicts: the pass over
    // the index for age waits for the period.
    evict_only = !result.within;
    // Tables above their high watermark: the next pass at once. Otherwise a period away, or
    // now when Shutdown wakes it.
    if (result.within) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.period);
      if (stopping_) return;
    }
  }
}

void MemoryKeeper::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
}

}  // namespace server
}  // namespace ps

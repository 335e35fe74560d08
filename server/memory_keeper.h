// The memory budget of a server's tables (ps_server --memory_budget_mb) and the eviction that
// keeps them within it and within their TTLs (server/README.md#memory-budget).
//
// The budget is for the server's whole resident set. When the job's tables are created, the keeper
// measures what the process holds already (its resident set then) and keeps back a reserve (10%
// of the budget) for what comes and goes (requests in flight, replication queues, scratch); what
// is left is the tables' allowance. Each table gets the share memory_weight / sum of weights of
// it, split evenly over the shard copies the server holds, and each copy's table is capped at the
// rows that fit (index, rows with their optimizer state, its admission sketch): a shard's table at
// its cap creates no row (TableShard::SetMaxRows). A background thread sweeps the primaries'
// tables: rows past their TTL go, and a table above 98% of its cap is evicted by its policy down
// to 90%, a slice at a time, so that caps are rarely met.
//
// The caps follow the shard map: SetCopies recomputes them when the server holds more or fewer
// copies. Rows already allocated stay allocated: a server that takes on more copies (after a
// failover) evicts its tables down to the new caps, and its slabs keep their largest size.
#ifndef PS_SERVER_MEMORY_KEEPER_H_
#define PS_SERVER_MEMORY_KEEPER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "server/shard/shard.h"
#include "server/storage/embedding_table.h"

namespace ps {
namespace server {

// The resident set of this process in bytes (/proc/self/statm), or 0 if it cannot be read.
int64_t ResidentBytes();

class MemoryKeeper {
 public:
  struct Options {
    // The server's budget in bytes (--memory_budget_mb); 0: none (TTLs only). >= 0.
    int64_t budget_bytes = 0;
    // How often the sweeper runs through the shards. > 0.
    absl::Duration period = absl::Milliseconds(20);
    // Index buckets a sweep visits per table per shard while holding the shard's lock. > 0.
    size_t sweep_buckets = 4096;
    // The clock of ttl_seconds and of the use stamps of tables without a TTL. Default
    // absl::Now; tests inject a fake one.
    std::function<absl::Time()> now;
    // The resident set, measured (default ResidentBytes).
    std::function<int64_t()> resident_bytes;
    // Memory outside the tables that will come on top of the resident set measured at creation
    // and that the budget must hold: the disk tier's memtables and cache
    // (RowTier::MemoryBytes). Default 0; >= 0.
    int64_t other_bytes = 0;
    // Gives the allocator's free memory back to the kernel (default glibc's malloc_trim(0)):
    // called after a sweep that finds the resident set above the budget less the reserve (at
    // most every `release_period`), since freed memory otherwise stays resident (TuneProcess
    // keeps the heap's top) and transient buffers (demotions, promotions, snapshots) add up.
    std::function<void()> release_free_memory;
    absl::Duration release_period = absl::Milliseconds(250);
  };

  // The share of the budget kept back for memory outside the tables.
  static constexpr double kReserve = 0.10;
  // The fewest rows a table's copy may be capped at: a budget that cannot give every table that
  // many in every copy is refused.
  static constexpr size_t kMinRowsPerCopy = 1024;

  // Calls fn(shard) for every shard whose primary the server is, under whatever lock keeps the
  // shards alive meanwhile.
  using ForEachPrimary = std::function<void(absl::FunctionRef<void(Shard*)>)>;

  // The keeper of `job`'s tables (`tables`, by table index, outliving it) on a server expected to
  // hold `expected_copies` shard copies. INVALID_ARGUMENT, naming the numbers or the field, for
  // a budget below the fixed part (what the process holds already, the reserve, and
  // kMinRowsPerCopy rows of every table in every expected copy), or for a table whose
  // memory_weight is set, or whose eviction has no TTL, without a budget (settings that would
  // do nothing).
  static absl::StatusOr<std::unique_ptr<MemoryKeeper>> Create(
      const config::Job& job, std::vector<const TableSpec*> tables, size_t expected_copies,
      Options options);

  MemoryKeeper(const MemoryKeeper&) = delete;
  MemoryKeeper& operator=(const MemoryKeeper&) = delete;
  ~MemoryKeeper() { Shutdown(); }

  // Whether there is anything to keep: a budget or a TTL.
  bool active() const { return budget_bytes_ > 0 || any_ttl_; }

  // By table, the counters per row of each copy's admission sketch (ShardConfig::sketch_width).
  const std::vector<size_t>& sketch_widths() const { return sketch_widths_; }

  // By table, the row cap of each copy when the server holds `copies` copies (0: no cap).
  std::vector<size_t> MaxRows(size_t copies) const;

  // The caps for `copies` copies, remembered for CurrentMaxRows and the status.
  void SetCopies(size_t copies);
  std::vector<size_t> CurrentMaxRows() const;

  // A push carried step `step`: the clock of tables with ttl_steps. Thread-safe, lock-free.
  void NoteStep(int64_t step);

  // By table, what a sweep does now: the TTLs and watermarks (`evict_only`: TableSweep's).
  // Advances the use clocks first.
  std::vector<TableSweep> Sweeps(bool evict_only = false);

  // By table, the clocks rows' use is stamped with (ShardConfig::use_ticks): a tick is a step
  // of the pushes (ttl_steps, advanced by NoteStep), or a share of a second (ttl_seconds: 1/16 s
  // or a 1024th of the TTL; tables without a TTL: 4 ms), advanced by each sweep, every period.
  const std::atomic<uint32_t>* use_ticks() const { return use_ticks_.get(); }

  // Ticks of table t's use clock in its TTL (0: no TTL).
  uint32_t TtlTicks(size_t t) const;

  // Starts the sweeper over `for_each_primary` (if active()); Shutdown stops and joins it.
  void Start(ForEachPrimary for_each_primary);
  void Shutdown();

  // Runs one pass over the shards now (tests; the sweeper does this every period, and at once
  // again while a table is above its high watermark): what the shards' sweeps did together.
  SweepResult SweepOnce(const ForEachPrimary& for_each_primary, bool evict_only = false);

  // For the status and metrics.
  int64_t budget_bytes() const { return budget_bytes_; }
  // The tables' allowance (0 without a budget).
  int64_t allowance_bytes() const { return allowance_bytes_; }
  // The resident set when the keeper was created.
  int64_t baseline_bytes() const { return baseline_bytes_; }
  // The largest resident set sampled (by the sweeper's passes and SampleResident).
  int64_t peak_resident_bytes() const { return peak_resident_.load(std::memory_order_relaxed); }
  // The resident set now (Options::resident_bytes), counted into the peak. Thread-safe.
  int64_t SampleResident();

 private:
  MemoryKeeper(const config::Job& job, std::vector<const TableSpec*> tables, Options options);

  // Bytes a row of table t costs in a copy, its sketch's share included.
  size_t CostPerRow(size_t t) const;
  // Sets the use clock of table t from the steps seen and the clock (now - start_, in ms).
  void SetTick(size_t t, int64_t step, int64_t elapsed_ms);
  void Run(ForEachPrimary for_each_primary);

  // Constant after construction.
  const std::vector<const TableSpec*> tables_;
  const Options options_;
  const int64_t budget_bytes_;
  const absl::Time start_;
  std::vector<double> shares_;          // by table, summing to 1
  std::vector<size_t> sketch_widths_;   // by table
  std::vector<uint64_t> sketch_ids_;    // by table: the job's admission.sketch_ids (0: default)
  bool any_ttl_ = false;
  int64_t baseline_bytes_ = 0;
  int64_t allowance_bytes_ = 0;
  uint32_t num_shards_ = 1;

  std::atomic<int64_t> max_step_{0};
  std::unique_ptr<std::atomic<uint32_t>[]> use_ticks_;  // by table
  std::atomic<int64_t> peak_resident_{0};
  // When release_free_memory was last called (absl::ToUnixNanos).
  std::atomic<int64_t> last_release_ns_{0};

  mutable absl::Mutex mu_;
  std::vector<size_t> max_rows_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_MEMORY_KEEPER_H_

// A server's disk tier of embedding rows (ps_server --tier_dir, server/README.md#tier): the rows
// the memory budget pushed out of memory, kept in RocksDB until they are used again.
//
// - One RocksDB database per server, in the tier directory, opened empty: whatever a previous
//   process left there is deleted. The tier extends memory and, like memory, holds nothing across
//   a restart: what survives a crash are the replicas (each with its own tier) and the
//   checkpoints (which hold the tiered rows). So writes skip RocksDB's write-ahead log.
// - Rows are grouped by "incarnation": a number the tier hands out (NewIncarnation) to each
//   shard copy that puts rows here, and again whenever the copy's rows are replaced (a snapshot,
//   a restore). A row's key is the incarnation (uint32, big-endian), the table index (uint16,
//   big-endian) and the id (uint64, big-endian): 14 bytes. Drop deletes an incarnation's rows in
//   one range deletion, so a copy that goes away never has to list them.
// - A row's value is its last use (uint32, in ticks of its table's use clock), its checkpoint
//   generation (uint16), both in the host's byte order (the database never outlives the
//   process), two zero bytes of padding, then the row as its table stores it
//   (TableShard::stored_row_bytes(): compact weights stay compact), so that a row read back is
//   the row that was put, bit for bit.
// - TTL: a row whose table has a TTL and that was not used for more than ttl_ticks ticks of the
//   table's clock is expired. Get treats an expired row as absent (and deletes it), and a
//   compaction filter drops expired rows from the files, so that they do not take disk space
//   for long. Both are counted (Stats::expired). Scan skips expired rows (without deleting
//   them).
// - The disk cap (--tier_max_disk_gb): Put refuses a batch that could take the directory past
//   the cap (counting the rows' bytes with RocksDB's space amplification, the files on disk and
//   the memtables that will be flushed); the caller then drops the rows as it would without a
//   tier. The cap covers everything in the directory (logs and manifests included). The rule:
//   with data = max(the SST files' bytes, 1.3 * the logical bytes of the live rows and the
//   batch), where a row's logical bytes are 14 + 8 + stored_row_bytes, a batch is refused when
//   data + min(data, 128 MiB + 36 memtables) (what one compaction writes while its inputs are
//   still on disk) + the memtables + the batch + 2 MiB (logs, manifests) > the cap.
//
// Thread-safe: every method may be called from any thread (RocksDB is). The caller (the shard,
// under its lock) keeps each key's puts, deletes and drops in the order of its rows' changes.
#ifndef PS_SERVER_STORAGE_ROW_TIER_H_
#define PS_SERVER_STORAGE_ROW_TIER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {
namespace server {

class RowTier {
 public:
  struct Options {
    // The directory of the database (--tier_dir): created if missing; must be writable.
    // Required.
    std::string dir;
    // The most bytes the directory may hold (--tier_max_disk_gb). Required; at least
    // 2 * write_buffer_bytes + 2 MiB.
    int64_t max_disk_bytes = 0;
    // By table index: the bytes of a stored row (TableShard's stored row: row_words() * 4).
    // One entry per table of the job (65536 at most).
    std::vector<uint32_t> stored_row_bytes;
    // By table index: the TTL in ticks of the table's use clock (0: none). Empty or missing
    // entries: none.
    std::vector<uint32_t> ttl_ticks;
    // By table index: the use clocks rows' last use is counted in (ShardConfig::use_ticks).
    // Null: every clock reads 0 (and nothing expires).
    const std::atomic<uint32_t>* use_ticks = nullptr;
    // RocksDB's memory: the memtable size (two of them at most) and the block cache, which
    // also holds the files' index and filter blocks. What MemoryBytes reports. > 0 (4 MiB and
    // 8 MiB by default).
    size_t write_buffer_bytes = size_t{4} << 20;
    size_t block_cache_bytes = size_t{8} << 20;
  };

  // Opens the tier in options.dir, deleting what was there. INVALID_ARGUMENT naming the flag
  // (--tier_dir, --tier_max_disk_gb) for an empty dir, a cap <= 0 or a cap below what an empty
  // database takes; FAILED_PRECONDITION naming --tier_dir and the path when the directory
  // cannot be created or written (a probe file is written and removed first), or RocksDB cannot
  // open it. INVALID_ARGUMENT also for zero write_buffer_bytes or block_cache_bytes, or more
  // than 65536 tables.
  static absl::StatusOr<std::unique_ptr<RowTier>> Open(Options options);

  // Open's check of the directory alone (creates it if missing, writes and removes a probe
  // file): OK, or FAILED_PRECONDITION naming --tier_dir and the path. For a daemon's start.
  static absl::Status CheckDirectory(const std::string& dir);

  ~RowTier();
  RowTier(const RowTier&) = delete;
  RowTier& operator=(const RowTier&) = delete;

  // The memory the tier takes in a server (MemoryBytesFor its options): the server's memory
  // budget keeps it back from the tables' allowance.
  int64_t MemoryBytes() const;

  // The memory a tier with `options` takes: RocksDB's memtables (two) and block cache, and
  // kOverheadBytes for the rest.
  static int64_t MemoryBytesFor(const Options& options);
  // What a tier costs beyond its memtables and cache, measured on ps_server (2026-11-28, the
  // resident set of servers with and without a tier under the same budget, tests/tier_test):
  // RocksDB's code and its other pages, table readers, compaction and iterator buffers, and the
  // promotions' and demotions' batches.
  static constexpr int64_t kOverheadBytes = int64_t{16} << 20;

  // A number no other copy's rows use (starts at 1; never 0).
  uint32_t NewIncarnation();

  // A row to put: its id, last use (a tick of its table's clock), generation, and the stored row
  // (stored_row_bytes[table] bytes; need not be aligned).
  struct Row {
    uint64_t id = 0;
    uint32_t last_use = 0;
    uint16_t generation = 0;
    // The row's use count for LFU (TableShard's 4-bit logarithmic count; 0-15).
    uint8_t use_count = 0;
    const void* stored = nullptr;
  };

  // Writes `rows` of table `table` of `incarnation` in one write batch (no WAL). The caller
  // says the ids are not in the tier yet (a demotion; counted as new rows). OK;
  // RESOURCE_EXHAUSTED, nothing written, when the batch could take the directory past the disk
  // cap (counted in Stats::refused_rows); INVALID_ARGUMENT for a table out of range; INTERNAL
  // if RocksDB fails.
  absl::Status Put(uint32_t incarnation, uint32_t table, absl::Span<const Row> rows);

  // A row read back: as put.
  struct Found {
    uint32_t last_use = 0;
    uint16_t generation = 0;
    uint8_t use_count = 0;
    std::string stored;  // stored_row_bytes[table] bytes
  };

  // Looks `ids` up together (RocksDB's batched MultiGet): (*found)[i] is set for each id whose
  // row is in the tier and not expired, and reset for the others (resized to ids.size()).
  // Expired rows are deleted and counted. INVALID_ARGUMENT for a table out of range; INTERNAL
  // if RocksDB fails or a row has the wrong size (corruption); nothing found on either.
  absl::Status Get(uint32_t incarnation, uint32_t table, absl::Span<const uint64_t> ids,
                   std::vector<std::unique_ptr<Found>>* found);

  // Deletes the rows of `ids` (all of them present: rows just read by Get and now back in
  // memory), in one write batch. INVALID_ARGUMENT for a table out of range; INTERNAL if
  // RocksDB fails.
  absl::Status Delete(uint32_t incarnation, uint32_t table, absl::Span<const uint64_t> ids);

  // Deletes every row of `incarnation` (a copy that goes away or whose rows are replaced). The
  // incarnation's rows are gone from Rows and Stats at once; a RocksDB failure (none expected:
  // a range deletion only writes to the memtable) is written to stderr.
  void Drop(uint32_t incarnation);

  // Rows of one table of one incarnation, in id order, as of one instant (a RocksDB snapshot
  // taken by Scan), read in pieces while the tier keeps changing: for checkpoints and snapshots.
  // Rows expired when Next reads them are skipped. A Scanner holds a snapshot (old files stay
  // on disk, and count for the cap, until it goes) and must be destroyed before the tier.
  class Scanner {
   public:
    virtual ~Scanner() = default;
    // Copies the next rows, up to max_rows: ids to `ids`, found rows to `rows` (both resized to
    // the count). Returns the count (max_rows unless at the end): 0 at the end. INTERNAL if
    // RocksDB fails or a row has the wrong size; INVALID_ARGUMENT for a table out of range.
    virtual absl::StatusOr<size_t> Next(size_t max_rows, std::vector<uint64_t>* ids,
                                        std::vector<Found>* rows) = 0;
  };
  std::unique_ptr<Scanner> Scan(uint32_t incarnation, uint32_t table);

  // Rows of `incarnation`'s table `table` now: puts less deletes and expiries. The compaction
  // filter counts a dropped row only when it is the key's newest version; a rare race with Get
  // on the same expired row can count it twice (the counts never go below 0).
  uint64_t Rows(uint32_t incarnation, uint32_t table) const;

  struct Stats {
    // By table index: rows in the tier, and their bytes (keys and values as written).
    std::vector<uint64_t> rows;
    std::vector<uint64_t> bytes;
    // By table index: rows found expired (by Get or the compaction filter).
    std::vector<uint64_t> expired;
    // Rows Put refused at the disk cap.
    uint64_t refused_rows = 0;
    // Bytes in the directory now (every file in it, as `du` counts them: allocated blocks, or
    // the size when larger), and the cap.
    int64_t disk_bytes = 0;
    int64_t max_disk_bytes = 0;
  };
  Stats GetStats() const;

  // For tests: flushes the memtables and compacts the whole database (the compaction filter
  // sees every row). INTERNAL if RocksDB fails.
  absl::Status CompactForTesting();

 private:
  class Impl;
  explicit RowTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_STORAGE_ROW_TIER_H_

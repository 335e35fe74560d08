#include "server/storage/row_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/byte_order.h"
#include "rocksdb/cache.h"
#include "rocksdb/compaction_filter.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace ps {
namespace server {
namespace {

// Key: incarnation (u32 BE), table (u16 BE), id (u64 BE).
constexpr size_t kKeyBytes = 14;
// Value header: last use (u32), generation (u16), use count (u8), a zero byte; host byte order (the
// database never outlives the process that wrote it).
constexpr size_t kHeaderBytes = 8;
// What the directory holds besides the tables' files and the memtables' future files: the info
// log (WARN level, 1 MiB files, 2 kept), the MANIFEST (rolled over at 256 KiB), OPTIONS files,
// CURRENT, LOCK and the (empty: no WAL writes) log files.
constexpr int64_t kFixedBytes = int64_t{2} << 20;
// RocksDB's space amplification over the rows' logical bytes (leveled compaction, index and
// filter blocks, obsolete versions waiting for compaction).
constexpr double kSpaceAmplification = 1.3;
// Shapes of the LSM tree, chosen to bound what one compaction writes while its inputs are still
// on disk (kCompactionHeadroom).
constexpr uint64_t kLevelBaseBytes = uint64_t{64} << 20;
constexpr uint64_t kTargetFileBytes = uint64_t{8} << 20;
constexpr uint64_t kMaxCompactionBytes = uint64_t{64} << 20;

struct KeyBuf {
  char b[kKeyBytes];
  rocksdb::Slice slice() const { return rocksdb::Slice(b, kKeyBytes); }
};

void EncodePrefix(uint32_t incarnation, uint16_t table, char* out) {
  const uint32_t inc = BigEndian32(incarnation);
  std::memcpy(out, &inc, 4);
  out[4] = static_cast<char>(table >> 8);
  out[5] = static_cast<char>(table & 0xff);
}

KeyBuf EncodeKey(uint32_t incarnation, uint32_t table, uint64_t id) {
  KeyBuf k;
  EncodePrefix(incarnation, static_cast<uint16_t>(table), k.b);
  const uint64_t be = BigEndian64(id);
  std::memcpy(k.b + 6, &be, 8);
  return k;
}

struct DecodedKey {
  uint32_t incarnation;
  uint32_t table;
  uint64_t id;
};

DecodedKey DecodeKey(const rocksdb::Slice& key) {
  DecodedKey d;
  uint32_t inc;
  std::memcpy(&inc, key.data(), 4);
  d.incarnation = BigEndian32(inc);
  d.table = (static_cast<uint32_t>(static_cast<unsigned char>(key.data()[4])) << 8) |
            static_cast<unsigned char>(key.data()[5]);
  uint64_t id;
  std::memcpy(&id, key.data() + 6, 8);
  d.id = BigEndian64(id);
  return d;
}

struct Header {
  uint32_t last_use;
  uint16_t generation;
  uint8_t use_count;
};

Header DecodeHeader(const char* value) {
  Header h;
  std::memcpy(&h.last_use, value, 4);
  std::memcpy(&h.generation, value + 4, 2);
  h.use_count = static_cast<uint8_t>(value[6]);
  return h;
}

bool Expired(uint32_t now, uint32_t last_use, uint32_t ttl) {
  return ttl > 0 && static_cast<uint32_t>(now - last_use) > ttl;
}

absl::Status Internal(absl::string_view what, const rocksdb::Status& s) {
  return absl::InternalError(absl::StrCat("disk tier: ", what, ": ", s.ToString()));
}

// Bytes the files under `dir` take, as `du` counts them (allocated blocks, or the size when
// larger). Files that vanish while it walks (RocksDB deletes obsolete ones) are skipped.
int64_t DirectoryBytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    total += std::max<int64_t>(st.st_size, static_cast<int64_t>(st.st_blocks) * 512);
  }
  return total;
}

}  // namespace

class RowTier::Impl {
 public:
  explicit Impl(Options options)
      : options_(std::move(options)),
        num_tables_(options_.stored_row_bytes.size()),
        filter_(this),
        expired_(num_tables_, 0) {}

  ~Impl() {
    // Compactions still running (Close waits for them) stop counting through the filter.
    live_db_.store(nullptr, std::memory_order_release);
    if (db_ != nullptr) {
      rocksdb::Status s = db_->Close();
      if (!s.ok()) {
        std::fprintf(stderr, "disk tier %s: closing: %s\n", options_.dir.c_str(),
                     s.ToString().c_str());
      }
    }
    db_.reset();
  }

  absl::Status OpenDb();

  int64_t MemoryBytes() const { return RowTier::MemoryBytesFor(options_); }

  uint32_t NewIncarnation() {
    uint32_t inc = next_incarnation_.fetch_add(1, std::memory_order_relaxed);
    while (inc == 0) inc = next_incarnation_.fetch_add(1, std::memory_order_relaxed);
    return inc;
  }

  absl::Status Put(uint32_t incarnation, uint32_t table, absl::Span<const Row> rows);
  absl::Status Get(uint32_t incarnation, uint32_t table, absl::Span<const uint64_t> ids,
                   std::vector<std::unique_ptr<Found>>* found);
  absl::Status Delete(uint32_t incarnation, uint32_t table, absl::Span<const uint64_t> ids);
  void Drop(uint32_t incarnation);
  std::unique_ptr<Scanner> Scan(uint32_t incarnation, uint32_t table);
  uint64_t Rows(uint32_t incarnation, uint32_t table) const;
  Stats GetStats() const;
  absl::Status CompactForTesting();

 private:
  class ExpiryFilter;
  class ScannerImpl;

  using CountKey = std::pair<uint32_t, uint32_t>;  // (incarnation, table)

  // The bytes a row takes as written: key and value.
  uint64_t RowBytes(uint32_t table) const {
    return kKeyBytes + kHeaderBytes + options_.stored_row_bytes[table];
  }
  uint32_t Now(uint32_t table) const {
    return options_.use_ticks == nullptr
               ? 0
               : options_.use_ticks[table].load(std::memory_order_relaxed);
  }
  uint32_t Ttl(uint32_t table) const {
    return table < options_.ttl_ticks.size() ? options_.ttl_ticks[table] : 0;
  }
  absl::Status CheckTable(uint32_t table) const {
    if (table >= num_tables_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("disk tier: table %d, the tier has %d tables", table, num_tables_));
    }
    return absl::OkStatus();
  }
  uint64_t IntProperty(const char* name) const {
    uint64_t v = 0;
    if (!db_->GetIntProperty(name, &v)) return 0;
    return v;
  }

  // Counts `n` rows of (incarnation, table) found expired and deleted. Ignored for an
  // incarnation not in the counts (dropped).
  void CountExpired(uint32_t incarnation, uint32_t table, uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // The compaction filter drops the expired row (key, value): counts it when it is the row's
  // newest version (not a version that a later Delete or Put already replaced).
  void OnFilterDrop(const rocksdb::Slice& key, const rocksdb::Slice& value);

  // Constant after construction (db_ after OpenDb).
  const Options options_;
  const size_t num_tables_;
  std::shared_ptr<rocksdb::Cache> cache_;
  // Declared before db_: the filter must outlive the database.
  class ExpiryFilter final : public rocksdb::CompactionFilter {
   public:
    explicit ExpiryFilter(Impl* impl) : impl_(impl) {}
    bool Filter(int /*level*/, const rocksdb::Slice& key, const rocksdb::Slice& value,
                std::string* /*new_value*/, bool* /*value_changed*/) const override {
      if (key.size() != kKeyBytes || value.size() < kHeaderBytes) return false;
      const DecodedKey k = DecodeKey(key);
      if (k.table >= impl_->num_tables_) return false;
      const Header h = DecodeHeader(value.data());
      if (!Expired(impl_->Now(k.table), h.last_use, impl_->Ttl(k.table))) return false;
      impl_->OnFilterDrop(key, value);
      return true;
    }
    const char* Name() const override { return "ps.RowTier.ExpiryFilter"; }

   private:
    Impl* const impl_;
  };
  ExpiryFilter filter_;
  std::unique_ptr<rocksdb::DB> db_;
  // db_ for the compaction filter; null before the open and once closing.
  std::atomic<rocksdb::DB*> live_db_{nullptr};

  std::atomic<uint32_t> next_incarnation_{1};
  std::atomic<uint64_t> refused_rows_{0};

  // Serializes Put's check of the cap with its write, so that two batches cannot both pass it.
  absl::Mutex put_mu_;

  mutable absl::Mutex mu_;
  std::map<CountKey, uint64_t> counts_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> expired_ ABSL_GUARDED_BY(mu_);
};

absl::Status RowTier::Impl::OpenDb() {
  const std::string& dir = options_.dir;
  rocksdb::Options o;
  o.create_if_missing = true;
  o.write_buffer_size = options_.write_buffer_bytes;
  o.max_write_buffer_number = 2;
  o.compression = rocksdb::kNoCompression;  // float rows do not compress
  o.keep_log_file_num = 2;
  o.max_log_file_size = size_t{1} << 20;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  o.max_manifest_file_size = uint64_t{256} << 10;
  // Preallocated space counts for `du` (the cap) before it holds anything.
  o.allow_fallocate = false;
  // Nothing in the database outlives the process: no flush at close.
  o.avoid_flush_during_shutdown = true;
  o.max_bytes_for_level_base = kLevelBaseBytes;
  o.target_file_size_base = kTargetFileBytes;
  o.max_compaction_bytes = kMaxCompactionBytes;
  o.max_background_jobs = 2;  // one flush and one compaction at a time
  o.max_subcompactions = 1;
  o.compaction_filter = &filter_;
  cache_ = rocksdb::NewLRUCache(options_.block_cache_bytes);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache_;
  table.cache_index_and_filter_blocks = true;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // Most lookups of new rows find nothing: the newest files' filters stay in the cache, and the
  // memtables have one of their own.
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  o.memtable_whole_key_filtering = true;
  o.memtable_prefix_bloom_size_ratio = 0.05;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));

  rocksdb::Status s = rocksdb::DestroyDB(dir, o);
  if (!s.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--tier_dir \"%s\": cannot delete the previous database: %s", dir, s.ToString()));
  }
  rocksdb::DB* db = nullptr;
  s = rocksdb::DB::Open(o, dir, &db);
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("--tier_dir \"%s\": cannot open a database: %s", dir, s.ToString()));
  }
  db_.reset(db);
  live_db_.store(db, std::memory_order_release);
  return absl::OkStatus();
}

void RowTier::Impl::CountExpired(uint32_t incarnation, uint32_t table, uint64_t n) {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find({incarnation, table});
  if (it == counts_.end()) return;
  it->second -= std::min(it->second, n);
  expired_[table] += n;
}

void RowTier::Impl::OnFilterDrop(const rocksdb::Slice& key, const rocksdb::Slice& value) {
  // A version that a Delete (or Get's expiry, or a Drop) replaced was counted out already; one
  // that a later Put replaced is not the row the counts hold. Only the newest version counts.
  rocksdb::DB* db = live_db_.load(std::memory_order_acquire);
  if (db == nullptr) return;
  std::string newest;
  if (!db->Get(rocksdb::ReadOptions(), key, &newest).ok() || rocksdb::Slice(newest) != value) {
    return;
  }
  const DecodedKey k = DecodeKey(key);
  CountExpired(k.incarnation, k.table, 1);
}

absl::Status RowTier::Impl::Put(uint32_t incarnation, uint32_t table, absl::Span<const Row> rows) {
  if (absl::Status s = CheckTable(table); !s.ok()) return s;
  if (rows.empty()) return absl::OkStatus();
  const uint32_t stored_bytes = options_.stored_row_bytes[table];
  rocksdb::WriteBatch batch;
  std::string value(kHeaderBytes + stored_bytes, '\0');
  for (const Row& row : rows) {
    std::memcpy(&value[0], &row.last_use, 4);
    std::memcpy(&value[4], &row.generation, 2);
    value[6] = static_cast<char>(row.use_count);
    if (stored_bytes > 0) std::memcpy(&value[kHeaderBytes], row.stored, stored_bytes);
    rocksdb::Status s = batch.Put(EncodeKey(incarnation, table, row.id).slice(), value);
    if (!s.ok()) return Internal("put", s);
  }
  const uint64_t batch_bytes = rows.size() * RowBytes(table);

  absl::MutexLock put_lock(&put_mu_);
  uint64_t logical_bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, count] : counts_) logical_bytes += count * RowBytes(key.second);
  }
  // The data files: what they hold now (old versions pinned by scanners included), or what the
  // live rows and this batch will take once compacted, whichever is more.
  const uint64_t data_bytes =
      std::max<uint64_t>(IntProperty("rocksdb.total-sst-files-size"),
                         static_cast<uint64_t>(static_cast<double>(logical_bytes + batch_bytes) *
                                               kSpaceAmplification));
  // One compaction at a time writes its output while its inputs are still on disk: at most
  // the whole tree (small trees), else about L0 (stalled at its stop trigger) plus L1, or
  // max_compaction_bytes for deeper levels.
  const uint64_t compaction_bytes = std::min<uint64_t>(
      data_bytes, kLevelBaseBytes + kMaxCompactionBytes + 36 * options_.write_buffer_bytes);
  const uint64_t estimate = data_bytes + compaction_bytes +
                            IntProperty("rocksdb.cur-size-all-mem-tables") + batch_bytes +
                            kFixedBytes;
  if (estimate > static_cast<uint64_t>(options_.max_disk_bytes)) {
    refused_rows_.fetch_add(rows.size(), std::memory_order_relaxed);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "disk tier: %d rows of table %d refused: the directory could reach %d bytes, past "
        "--tier_max_disk_gb (%d bytes)",
        rows.size(), table, estimate, options_.max_disk_bytes));
  }
  rocksdb::WriteOptions write_options;
  write_options.disableWAL = true;
  rocksdb::Status s = db_->Write(write_options, &batch);
  if (!s.ok()) return Internal("put", s);
  absl::MutexLock lock(&mu_);
  counts_[{incarnation, table}] += rows.size();
  return absl::OkStatus();
}

absl::Status RowTier::Impl::Get(uint32_t incarnation, uint32_t table,
                                absl::Span<const uint64_t> ids,
                                std::vector<std::unique_ptr<Found>>* found) {
  found->clear();
  found->resize(ids.size());
  if (absl::Status s = CheckTable(table); !s.ok()) return s;
  if (ids.empty()) return absl::OkStatus();
  const size_t n = ids.size();
  std::vector<KeyBuf> keys(n);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = EncodeKey(incarnation, table, ids[i]);
    slices[i] = keys[i].slice();
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  db_->MultiGet(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), n, slices.data(), values.data(),
                statuses.data());

  const uint32_t stored_bytes = options_.stored_row_bytes[table];
  const uint32_t now = Now(table);
  const uint32_t ttl = Ttl(table);
  rocksdb::WriteBatch expired;
  uint64_t num_expired = 0;
  auto fail = [&](absl::Status status) {
    for (auto& f : *found) f.reset();
    return status;
  };
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok()) return fail(Internal("get", statuses[i]));
    const rocksdb::Slice v = values[i];
    if (v.size() != kHeaderBytes + stored_bytes) {
      return fail(absl::InternalError(absl::StrFormat(
          "disk tier: row %d of table %d (incarnation %d) holds %d bytes, expected %d: the "
          "database is corrupt",
          ids[i], table, incarnation, v.size(), kHeaderBytes + stored_bytes)));
    }
    const Header h = DecodeHeader(v.data());
    if (Expired(now, h.last_use, ttl)) {
      rocksdb::Status s = expired.Delete(slices[i]);
      if (!s.ok()) return fail(Internal("get", s));
      ++num_expired;
      continue;
    }
    auto f = std::make_unique<Found>();
    f->last_use = h.last_use;
    f->generation = h.generation;
    f->use_count = h.use_count;
    f->stored.assign(v.data() + kHeaderBytes, stored_bytes);
    (*found)[i] = std::move(f);
  }
  if (num_expired > 0) {
    rocksdb::WriteOptions write_options;
    write_options.disableWAL = true;
    rocksdb::Status s = db_->Write(write_options, &expired);
    if (!s.ok()) return fail(Internal("deleting expired rows", s));
    CountExpired(incarnation, table, num_expired);
  }
  return absl::OkStatus();
}

absl::Status RowTier::Impl::Delete(uint32_t incarnation, uint32_t table,
                                   absl::Span<const uint64_t> ids) {
  if (absl::Status s = CheckTable(table); !s.ok()) return s;
  if (ids.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (uint64_t id : ids) {
    rocksdb::Status s = batch.Delete(EncodeKey(incarnation, table, id).slice());
    if (!s.ok()) return Internal("delete", s);
  }
  rocksdb::WriteOptions write_options;
  write_options.disableWAL = true;
  rocksdb::Status s = db_->Write(write_options, &batch);
  if (!s.ok()) return Internal("delete", s);
  absl::MutexLock lock(&mu_);
  auto it = counts_.find({incarnation, table});
  if (it != counts_.end()) it->second -= std::min<uint64_t>(it->second, ids.size());
  return absl::OkStatus();
}

void RowTier::Impl::Drop(uint32_t incarnation) {
  // [incarnation, incarnation + 1): the 4-byte prefix sorts before every key of the
  // incarnation, the prefix followed by 0xff bytes after all of them (also for the last
  // incarnation, which has no next prefix).
  char begin[4];
  const uint32_t be = BigEndian32(incarnation);
  std::memcpy(begin, &be, 4);
  std::string end(begin, 4);
  end.append(kKeyBytes + 1 - 4, '\xff');
  rocksdb::WriteOptions write_options;
  write_options.disableWAL = true;
  rocksdb::Status s =
      db_->DeleteRange(write_options, db_->DefaultColumnFamily(), rocksdb::Slice(begin, 4), end);
  if (!s.ok()) {
    std::fprintf(stderr, "disk tier %s: dropping incarnation %u: %s\n", options_.dir.c_str(),
                 incarnation, s.ToString().c_str());
  }
  absl::MutexLock lock(&mu_);
  auto it = counts_.lower_bound({incarnation, 0});
  while (it != counts_.end() && it->first.first == incarnation) it = counts_.erase(it);
}

class RowTier::Impl::ScannerImpl final : public RowTier::Scanner {
 public:
  // An error scanner: Next returns `error`.
  explicit ScannerImpl(absl::Status error) : error_(std::move(error)) {}

  ScannerImpl(const Impl* impl, uint32_t incarnation, uint32_t table)
      : impl_(impl), table_(table), db_(impl->db_.get()) {
    EncodePrefix(incarnation, static_cast<uint16_t>(table), begin_);
    if (table + 1 <= 0xffff) {
      EncodePrefix(incarnation, static_cast<uint16_t>(table + 1), end_);
      end_size_ = 6;
    } else {  // the last table: the incarnation's prefix followed by 0xff bytes
      EncodePrefix(incarnation, static_cast<uint16_t>(table), end_);
      std::memset(end_ + 6, 0xff, sizeof(end_) - 6);
      end_size_ = sizeof(end_);
    }
    upper_bound_ = rocksdb::Slice(end_, end_size_);
    snapshot_ = db_->GetSnapshot();
    rocksdb::ReadOptions read_options;
    read_options.snapshot = snapshot_;
    read_options.iterate_upper_bound = &upper_bound_;
    read_options.fill_cache = false;  // one pass over the rows: keep the cache for Get
    it_.reset(db_->NewIterator(read_options));
    it_->Seek(rocksdb::Slice(begin_, 6));
  }

  ~ScannerImpl() override {
    it_.reset();
    if (snapshot_ != nullptr) db_->ReleaseSnapshot(snapshot_);
  }

  absl::StatusOr<size_t> Next(size_t max_rows, std::vector<uint64_t>* ids,
                              std::vector<Found>* rows) override {
    ids->clear();
    rows->clear();
    if (!error_.ok()) return error_;
    const uint32_t stored_bytes = impl_->options_.stored_row_bytes[table_];
    const uint32_t ttl = impl_->Ttl(table_);
    const uint32_t now = impl_->Now(table_);
    while (ids->size() < max_rows && it_->Valid()) {
      const rocksdb::Slice k = it_->key();
      const rocksdb::Slice v = it_->value();
      if (k.size() != kKeyBytes || v.size() != kHeaderBytes + stored_bytes) {
        ids->clear();
        rows->clear();
        return absl::InternalError(absl::StrFormat(
            "disk tier: a row of table %d has a %d-byte key and a %d-byte value, expected %d "
            "and %d: the database is corrupt",
            table_, k.size(), v.size(), kKeyBytes, kHeaderBytes + stored_bytes));
      }
      const Header h = DecodeHeader(v.data());
      if (!Expired(now, h.last_use, ttl)) {
        ids->push_back(DecodeKey(k).id);
        Found& f = rows->emplace_back();
        f.last_use = h.last_use;
        f.generation = h.generation;
        f.use_count = h.use_count;
        f.stored.assign(v.data() + kHeaderBytes, stored_bytes);
      }
      it_->Next();
    }
    if (!it_->status().ok()) {
      ids->clear();
      rows->clear();
      return Internal("scan", it_->status());
    }
    return ids->size();
  }

 private:
  const absl::Status error_;
  const Impl* const impl_ = nullptr;
  const uint32_t table_ = 0;
  rocksdb::DB* const db_ = nullptr;
  char begin_[6];
  char end_[kKeyBytes + 1];
  size_t end_size_ = 0;
  rocksdb::Slice upper_bound_;
  const rocksdb::Snapshot* snapshot_ = nullptr;
  std::unique_ptr<rocksdb::Iterator> it_;
};

std::unique_ptr<RowTier::Scanner> RowTier::Impl::Scan(uint32_t incarnation, uint32_t table) {
  if (absl::Status s = CheckTable(table); !s.ok()) return std::make_unique<ScannerImpl>(s);
  return std::make_unique<ScannerImpl>(this, incarnation, table);
}

uint64_t RowTier::Impl::Rows(uint32_t incarnation, uint32_t table) const {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find({incarnation, table});
  return it == counts_.end() ? 0 : it->second;
}

RowTier::Stats RowTier::Impl::GetStats() const {
  Stats stats;
  stats.rows.assign(num_tables_, 0);
  stats.bytes.assign(num_tables_, 0);
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, count] : counts_) stats.rows[key.second] += count;
    stats.expired = expired_;
  }
  for (size_t t = 0; t < num_tables_; ++t) stats.bytes[t] = stats.rows[t] * RowBytes(t);
  stats.refused_rows = refused_rows_.load(std::memory_order_relaxed);
  stats.disk_bytes = DirectoryBytes(options_.dir);
  stats.max_disk_bytes = options_.max_disk_bytes;
  return stats;
}

absl::Status RowTier::Impl::CompactForTesting() {
  rocksdb::FlushOptions flush;
  flush.wait = true;
  rocksdb::Status s = db_->Flush(flush);
  if (!s.ok()) return Internal("flush", s);
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  s = db_->CompactRange(compact, nullptr, nullptr);
  if (!s.ok()) return Internal("compaction", s);
  return absl::OkStatus();
}

absl::Status RowTier::CheckDirectory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrFormat("--tier_dir \"%s\" is not writable: %s", dir, ec.message()));
  }
  const std::string probe = dir + "/.row_tier_probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool written = fd >= 0;
  int err = errno;
  if (written) {
    const char byte = 0;
    written = ::write(fd, &byte, 1) == 1;
    if (!written) err = errno;
    if (::close(fd) != 0 && written) {
      written = false;
      err = errno;
    }
    ::unlink(probe.c_str());
  }
  if (!written) {
    return absl::FailedPreconditionError(
        absl::StrFormat("--tier_dir \"%s\" is not writable: %s", dir, std::strerror(err)));
  }

  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RowTier>> RowTier::Open(Options options) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError("--tier_dir: empty; the disk tier needs a directory");
  }
  if (options.max_disk_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tier_max_disk_gb: the disk tier's cap must be > 0 (got %d bytes)",
                        options.max_disk_bytes));
  }
  if (options.write_buffer_bytes == 0 || options.block_cache_bytes == 0) {
    return absl::InvalidArgumentError(
        "disk tier: write_buffer_bytes and block_cache_bytes must be > 0");
  }
  if (options.stored_row_bytes.size() > 0x10000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("disk tier: %d tables, at most 65536", options.stored_row_bytes.size()));
  }
  const int64_t min_bytes = static_cast<int64_t>(2 * options.write_buffer_bytes) + kFixedBytes;
  if (options.max_disk_bytes < min_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--tier_max_disk_gb: a cap of %d bytes is below the %d bytes an empty disk tier may "
        "take (two memtables of %d bytes, logs and manifests)",
        options.max_disk_bytes, min_bytes, options.write_buffer_bytes));
  }

  if (absl::Status writable = CheckDirectory(options.dir); !writable.ok()) return writable;

  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->OpenDb(); !s.ok()) return s;
  return std::unique_ptr<RowTier>(new RowTier(std::move(impl)));
}

RowTier::RowTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RowTier::~RowTier() = default;

int64_t RowTier::MemoryBytes() const { return impl_->MemoryBytes(); }

int64_t RowTier::MemoryBytesFor(const Options& options) {
  return static_cast<int64_t>(2 * options.write_buffer_bytes + options.block_cache_bytes) +
         kOverheadBytes;
}
uint32_t RowTier::NewIncarnation() { return impl_->NewIncarnation(); }

absl::Status RowTier::Put(uint32_t incarnation, uint32_t table, absl::Span<const Row> rows) {
  return impl_->Put(incarnation, table, rows);
}

absl::Status RowTier::Get(uint32_t incarnation, uint32_t table, absl::Span<const uint64_t> ids,
                          std::vector<std::unique_ptr<Found>>* found) {
  return impl_->Get(incarnation, table, ids, found);
}

absl::Status RowTier::Delete(uint32_t incarnation, uint32_t table, absl::Span<const uint64_t> ids) {
  return impl_->Delete(incarnation, table, ids);
}

void RowTier::Drop(uint32_t incarnation) { impl_->Drop(incarnation); }

std::unique_ptr<RowTier::Scanner> RowTier::Scan(uint32_t incarnation, uint32_t table) {
  return impl_->Scan(incarnation, table);
}

uint64_t RowTier::Rows(uint32_t incarnation, uint32_t table) const {
  return impl_->Rows(incarnation, table);
}

RowTier::Stats RowTier::GetStats() const { return impl_->GetStats(); }

absl::Status RowTier::CompactForTesting() { return impl_->CompactForTesting(); }

}  // namespace server
}  // namespace ps

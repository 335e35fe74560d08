#include "server/storage/row_tier.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace ps {
namespace server {
namespace {

constexpr uint32_t kRowBytes0 = 40;
constexpr uint32_t kRowBytes1 = 36;

// A fresh directory under $TEST_TMPDIR (or /tmp), deleted at the end of the test.
struct TempDir {
  TempDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/row_tier_test.XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

// Bytes the files under `dir` take, as `du` counts them (allocated blocks or size, the larger).
int64_t DiskBytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st;
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    total += std::max<int64_t>(st.st_size, static_cast<int64_t>(st.st_blocks) * 512);
  }
  return total;
}

// A row as the test remembers it.
struct Expected {
  uint32_t last_use;
  uint16_t generation;
  uint8_t use_count;
  std::string stored;
};

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::vector<RowTier::Row> RowsOf(const std::map<uint64_t, Expected>& rows) {
  std::vector<RowTier::Row> out;
  for (const auto& [id, e] : rows) {
    RowTier::Row r;
    r.id = id;
    r.last_use = e.last_use;
    r.generation = e.generation;
    r.use_count = e.use_count;
    r.stored = e.stored.data();
    out.push_back(r);
  }
  return out;
}

RowTier::Options TestOptions(const std::string& dir) {
  RowTier::Options options;
  options.dir = dir + "/tier";
  options.max_disk_bytes = int64_t{1} << 30;
  options.stored_row_bytes = {kRowBytes0, kRowBytes1};
  options.write_buffer_bytes = size_t{1} << 20;
  options.block_cache_bytes = size_t{1} << 20;
  return options;
}

// Random rows of `table` with distinct random ids.
std::map<uint64_t, Expected> MakeRows(std::mt19937_64& rng, size_t n, uint32_t row_bytes) {
  std::map<uint64_t, Expected> rows;
  while (rows.size() < n) {
    Expected e;
    e.last_use = static_cast<uint32_t>(rng());
    e.generation = static_cast<uint16_t>(rng());
    e.use_count = static_cast<uint8_t>(rng() % 16);
    e.stored = RandomBytes(rng, row_bytes);
    rows.emplace(rng(), std::move(e));
  }
  return rows;
}

std::vector<uint64_t> IdsOf(const std::map<uint64_t, Expected>& rows) {
  std::vector<uint64_t> ids;
  for (const auto& [id, e] : rows) ids.push_back(id);
  return ids;
}

// Gets `rows` back and checks them bit for bit.
void CheckFound(RowTier& tier, uint32_t incarnation, uint32_t table,
                const std::map<uint64_t, Expected>& rows) {
  std::vector<uint64_t> ids = IdsOf(rows);
  std::mt19937_64 rng(7);
  std::shuffle(ids.begin(), ids.end(), rng);  // MultiGet takes ids in any order
  std::vector<std::unique_ptr<RowTier::Found>> found;
  REQUIRE(tier.Get(incarnation, table, ids, &found).ok());
  REQUIRE(found.size() == ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    REQUIRE(found[i] != nullptr);
    const Expected& e = rows.at(ids[i]);
    CHECK(found[i]->last_use == e.last_use);
    CHECK(found[i]->generation == e.generation);
    CHECK(found[i]->use_count == e.use_count);
    CHECK(found[i]->stored == e.stored);
  }
}

bool Present(RowTier& tier, uint32_t incarnation, uint32_t table, uint64_t id) {
  std::vector<std::unique_ptr<RowTier::Found>> found;
  const uint64_t ids[] = {id};
  REQUIRE(tier.Get(incarnation, table, ids, &found).ok());
  REQUIRE(found.size() == 1);
  return found[0] != nullptr;
}

TEST_CASE("rows put are got back bit for bit, and deleted", "[row_tier]") {
  TempDir tmp;
  absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(TestOptions(tmp.path));
  REQUIRE(tier.ok());
  RowTier& t = **tier;
  CHECK(t.MemoryBytes() == (3 << 20) + RowTier::kOverheadBytes);
  const uint32_t inc = t.NewIncarnation();
  CHECK(inc != 0);
  CHECK(t.NewIncarnation() != inc);

  std::mt19937_64 rng(1);
  const std::map<uint64_t, Expected> rows0 = MakeRows(rng, 500, kRowBytes0);
  const std::map<uint64_t, Expected> rows1 = MakeRows(rng, 300, kRowBytes1);
  REQUIRE(t.Put(inc, 0, RowsOf(rows0)).ok());
  REQUIRE(t.Put(inc, 1, RowsOf(rows1)).ok());
  CheckFound(t, inc, 0, rows0);
  CheckFound(t, inc, 1, rows1);
  CHECK(t.Rows(inc, 0) == 500);
  CHECK(t.Rows(inc, 1) == 300);

  RowTier::Stats stats = t.GetStats();
  CHECK(stats.rows == std::vector<uint64_t>{500, 300});
  CHECK(stats.bytes == std::vector<uint64_t>{500 * (22 + kRowBytes0), 300 * (22 + kRowBytes1)});
  CHECK(stats.expired == std::vector<uint64_t>{0, 0});
  CHECK(stats.refused_rows == 0);
  CHECK(stats.max_disk_bytes == int64_t{1} << 30);
  CHECK(stats.disk_bytes > 0);

  SECTION("ids not put, or put in another table, are not found") {
    std::vector<uint64_t> ids = {rows0.begin()->first, rows1.begin()->first, 12345};
    std::vector<std::unique_ptr<RowTier::Found>> found(7);
    REQUIRE(t.Get(inc, 0, ids, &found).ok());
    REQUIRE(found.size() == 3);
    CHECK(found[0] != nullptr);
    CHECK(found[1] == nullptr);
    CHECK(found[2] == nullptr);
  }

  SECTION("rows survive a flush and a compaction") {
    REQUIRE(t.CompactForTesting().ok());
    CheckFound(t, inc, 0, rows0);
    CheckFound(t, inc, 1, rows1);
    CHECK(t.GetStats().rows == std::vector<uint64_t>{500, 300});
  }

  SECTION("Delete removes rows and counts them out") {
    std::vector<uint64_t> gone;
    std::map<uint64_t, Expected> kept;
    for (const auto& [id, e] : rows0) {
      if (gone.size() < 200) {
        gone.push_back(id);
      } else {
        kept.emplace(id, e);
      }
    }
    REQUIRE(t.Delete(inc, 0, gone).ok());
    CHECK(t.Rows(inc, 0) == 300);
    CHECK(t.GetStats().rows == std::vector<uint64_t>{300, 300});
    std::vector<std::unique_ptr<RowTier::Found>> found;
    REQUIRE(t.Get(inc, 0, gone, &found).ok());
    for (const auto& f : found) CHECK(f == nullptr);
    CheckFound(t, inc, 0, kept);
  }

  SECTION("a table out of range is an invalid argument") {
    std::vector<std::unique_ptr<RowTier::Found>> found;
    const uint64_t ids[] = {1};
    CHECK(t.Get(inc, 2, ids, &found).code() == absl::StatusCode::kInvalidArgument);
    CHECK(t.Delete(inc, 2, ids).code() == absl::StatusCode::kInvalidArgument);
    CHECK(t.Put(inc, 2, RowsOf(rows0)).code() == absl::StatusCode::kInvalidArgument);
    std::vector<uint64_t> scanned;
    std::vector<RowTier::Found> scanned_rows;
    CHECK(t.Scan(inc, 2)->Next(10, &scanned, &scanned_rows).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("incarnations are independent and Drop removes one", "[row_tier]") {
  TempDir tmp;
  absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(TestOptions(tmp.path));
  REQUIRE(tier.ok());
  RowTier& t = **tier;
  const uint32_t a = t.NewIncarnation();
  const uint32_t b = t.NewIncarnation();
  std::mt19937_64 rng(2);
  // The same ids in both incarnations, with different rows.
  const std::map<uint64_t, Expected> rows_a = MakeRows(rng, 200, kRowBytes0);
  std::map<uint64_t, Expected> rows_b;
  for (const auto& [id, e] : rows_a) {
    rows_b[id] = Expected{e.last_use + 1, e.generation, e.use_count, RandomBytes(rng, kRowBytes0)};
  }
  const std::map<uint64_t, Expected> rows_b1 = MakeRows(rng, 50, kRowBytes1);
  REQUIRE(t.Put(a, 0, RowsOf(rows_a)).ok());
  REQUIRE(t.Put(b, 0, RowsOf(rows_b)).ok());
  REQUIRE(t.Put(b, 1, RowsOf(rows_b1)).ok());
  CheckFound(t, a, 0, rows_a);
  CheckFound(t, b, 0, rows_b);
  CHECK(t.GetStats().rows == std::vector<uint64_t>{400, 50});

  const bool compact_first = GENERATE(false, true);
  if (compact_first) REQUIRE(t.CompactForTesting().ok());
  t.Drop(b);
  CHECK(t.Rows(b, 0) == 0);
  CHECK(t.Rows(b, 1) == 0);
  CHECK(t.Rows(a, 0) == 200);
  CHECK(t.GetStats().rows == std::vector<uint64_t>{200, 0});
  CheckFound(t, a, 0, rows_a);
  for (const auto& [id, e] : rows_b) CHECK_FALSE(Present(t, b, 0, id));
  for (const auto& [id, e] : rows_b1) CHECK_FALSE(Present(t, b, 1, id));
  // The range deletion survives compaction and does not reach the other incarnation.
  REQUIRE(t.CompactForTesting().ok());
  CheckFound(t, a, 0, rows_a);
  for (const auto& [id, e] : rows_b) CHECK_FALSE(Present(t, b, 0, id));
  CHECK(t.GetStats().rows == std::vector<uint64_t>{200, 0});
}

TEST_CASE("the last incarnation can be dropped", "[row_tier]") {
  TempDir tmp;
  absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(TestOptions(tmp.path));
  REQUIRE(tier.ok());
  RowTier& t = **tier;
  std::mt19937_64 rng(3);
  const std::map<uint64_t, Expected> rows = MakeRows(rng, 20, kRowBytes0);
  const uint32_t last = UINT32_MAX;
  REQUIRE(t.Put(last, 0, RowsOf(rows)).ok());
  REQUIRE(t.Put(last - 1, 0, RowsOf(rows)).ok());
  t.Drop(last);
  for (const auto& [id, e] : rows) CHECK_FALSE(Present(t, last, 0, id));
  CheckFound(t, last - 1, 0, rows);
}

TEST_CASE("rows unused for more than the TTL expire", "[row_tier][ttl]") {
  TempDir tmp;
  std::atomic<uint32_t> ticks[2];
  ticks[0].store(5);
  ticks[1].store(5);
  RowTier::Options options = TestOptions(tmp.path);
  options.ttl_ticks = {10};  // table 1: no TTL (missing entry)
  options.use_ticks = ticks;
  absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(options);
  REQUIRE(tier.ok());
  RowTier& t = **tier;
  const uint32_t inc = t.NewIncarnation();
  std::mt19937_64 rng(4);

  SECTION("Get finds a row at its TTL and expires it one tick later") {
    std::map<uint64_t, Expected> rows = MakeRows(rng, 10, kRowBytes0);
    for (auto& [id, e] : rows) e.last_use = 5;
    std::map<uint64_t, Expected> rows1 = MakeRows(rng, 10, kRowBytes1);
    for (auto& [id, e] : rows1) e.last_use = 5;
    REQUIRE(t.Put(inc, 0, RowsOf(rows)).ok());
    REQUIRE(t.Put(inc, 1, RowsOf(rows1)).ok());
    ticks[0].store(15);
    ticks[1].store(1000);
    CheckFound(t, inc, 0, rows);
    CheckFound(t, inc, 1, rows1);  // no TTL
    ticks[0].store(16);
    const uint64_t first = rows.begin()->first;
    CHECK_FALSE(Present(t, inc, 0, first));
    CHECK(t.Rows(inc, 0) == 9);
    RowTier::Stats stats = t.GetStats();
    CHECK(stats.expired == std::vector<uint64_t>{1, 0});
    CHECK(stats.rows == std::vector<uint64_t>{9, 10});
    // Deleted: a clock going back (a wrap, in tests) does not bring it back.
    ticks[0].store(15);
    CHECK_FALSE(Present(t, inc, 0, first));
    // Scan skips expired rows without deleting them.
    ticks[0].store(16);
    std::vector<uint64_t> ids;
    std::vector<RowTier::Found> found;
    absl::StatusOr<size_t> n = t.Scan(inc, 0)->Next(100, &ids, &found);
    REQUIRE(n.ok());
    CHECK(*n == 0);
    CHECK(t.Rows(inc, 0) == 9);
    ticks[0].store(15);
    n = t.Scan(inc, 0)->Next(100, &ids, &found);
    REQUIRE(n.ok());
    CHECK(*n == 9);
  }

  SECTION("a compaction drops expired rows from the files and counts them") {
    std::map<uint64_t, Expected> old_rows = MakeRows(rng, 1000, kRowBytes0);
    for (auto& [id, e] : old_rows) e.last_use = 5;
    REQUIRE(t.Put(inc, 0, RowsOf(old_rows)).ok());
    REQUIRE(t.CompactForTesting().ok());  // nothing expired yet
    CHECK(t.Rows(inc, 0) == 1000);
    // Rows promoted (read, then deleted) before they expire are not counted as expired.
    std::vector<uint64_t> promoted;
    for (const auto& [id, e] : old_rows) {
      if (promoted.size() == 100) break;
      promoted.push_back(id);
    }
    REQUIRE(t.Delete(inc, 0, promoted).ok());
    CHECK(t.Rows(inc, 0) == 900);
    ticks[0].store(12);
    std::map<uint64_t, Expected> new_rows = MakeRows(rng, 500, kRowBytes0);
    for (auto& [id, e] : new_rows) e.last_use = 12;
    REQUIRE(t.Put(inc, 0, RowsOf(new_rows)).ok());
    ticks[0].store(20);  // old rows: 15 ticks unused; new rows: 8
    REQUIRE(t.CompactForTesting().ok());
    RowTier::Stats stats = t.GetStats();
    CHECK(stats.rows[0] == 500);
    CHECK(stats.expired[0] == 900);
    CHECK(t.Rows(inc, 0) == 500);
    CheckFound(t, inc, 0, new_rows);
    // The files no longer hold them: Get finds nothing, even with the clock back.
    ticks[0].store(5);
    for (const auto& [id, e] : old_rows) CHECK_FALSE(Present(t, inc, 0, id));
    CHECK(t.GetStats().expired[0] == 900);
  }
}

TEST_CASE("Put refuses batches past the disk cap", "[row_tier][disk_cap]") {
  TempDir tmp;
  RowTier::Options options = TestOptions(tmp.path);
  constexpr uint32_t kBig = 256;
  options.stored_row_bytes = {kBig};
  const int64_t cap = int64_t{12} << 20;
  options.max_disk_bytes = cap;
  absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(options);
  REQUIRE(tier.ok());
  RowTier& t = **tier;
  const uint32_t inc = t.NewIncarnation();
  std::mt19937_64 rng(5);
  const std::string bytes = RandomBytes(rng, kBig);
  uint64_t next_id = 0;
  uint64_t refused = 0;
  int batches = 0;
  for (; batches < 200; ++batches) {
    std::vector<RowTier::Row> rows(1000);
    for (RowTier::Row& r : rows) {
      r.id = rng();
      r.stored = bytes.data();
      r.last_use = static_cast<uint32_t>(next_id++);
    }
    absl::Status s = t.Put(inc, 0, rows);
    CHECK(DiskBytes(options.dir) <= cap);
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      refused = rows.size();
      break;
    }
    REQUIRE(s.ok());
  }
  INFO("batches accepted: " << batches);
  CHECK(batches >= 5);  // the cap is not wasted
  CHECK(refused == 1000);
  RowTier::Stats stats = t.GetStats();
  CHECK(stats.refused_rows == 1000);
  CHECK(stats.rows[0] == batches * 1000u);
  CHECK(stats.disk_bytes <= cap);
  REQUIRE(t.CompactForTesting().ok());
  CHECK(DiskBytes(options.dir) <= cap);
  CHECK(t.GetStats().disk_bytes <= cap);
}

TEST_CASE("Scan reads rows in id order as of the Scan, in pieces", "[row_tier][scan]") {
  TempDir tmp;
  absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(TestOptions(tmp.path));
  REQUIRE(tier.ok());
  RowTier& t = **tier;
  const uint32_t inc = t.NewIncarnation();
  const uint32_t other = t.NewIncarnation();
  std::mt19937_64 rng(6);
  const std::map<uint64_t, Expected> rows = MakeRows(rng, 1000, kRowBytes0);
  REQUIRE(t.Put(inc, 0, RowsOf(rows)).ok());
  // Neighbours in key order: the other table and the other incarnation.
  REQUIRE(t.Put(inc, 1, RowsOf(MakeRows(rng, 100, kRowBytes1))).ok());
  REQUIRE(t.Put(other, 0, RowsOf(MakeRows(rng, 100, kRowBytes0))).ok());
  const bool compacted = GENERATE(false, true);
  if (compacted) REQUIRE(t.CompactForTesting().ok());

  std::unique_ptr<RowTier::Scanner> scanner = t.Scan(inc, 0);
  // Changes after the Scan: none is seen.
  REQUIRE(t.Delete(inc, 0, IdsOf(rows)).ok());
  REQUIRE(t.Put(inc, 0, RowsOf(MakeRows(rng, 100, kRowBytes0))).ok());
  if (compacted) REQUIRE(t.CompactForTesting().ok());

  std::vector<uint64_t> ids;
  std::vector<RowTier::Found> found;
  auto expected = rows.begin();
  size_t pieces = 0;
  for (;;) {
    absl::StatusOr<size_t> n = scanner->Next(64, &ids, &found);
    REQUIRE(n.ok());
    REQUIRE(ids.size() == *n);
    REQUIRE(found.size() == *n);
    if (*n == 0) break;
    ++pieces;
    CHECK(*n == std::min<size_t>(64, std::distance(expected, rows.end())));
    for (size_t i = 0; i < *n; ++i, ++expected) {
      REQUIRE(expected != rows.end());
      CHECK(ids[i] == expected->first);
      CHECK(found[i].last_use == expected->second.last_use);
      CHECK(found[i].generation == expected->second.generation);
      CHECK(found[i].use_count == expected->second.use_count);
      CHECK(found[i].stored == expected->second.stored);
    }
  }
  CHECK(expected == rows.end());
  CHECK(pieces == (1000 + 63) / 64);
  scanner.reset();

  // A new Scan sees the tier now.
  scanner = t.Scan(inc, 0);
  absl::StatusOr<size_t> n = scanner->Next(1000, &ids, &found);
  REQUIRE(n.ok());
  CHECK(*n == 100);
}

TEST_CASE("threads use the tier at once", "[row_tier][threads]") {
  TempDir tmp;
  absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(TestOptions(tmp.path));
  REQUIRE(tier.ok());
  RowTier& t = **tier;
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&t, &failures, k] {
      std::mt19937_64 rng(100 + k);
      const uint32_t inc = t.NewIncarnation();
      for (int round = 0; round < 20; ++round) {
        const std::map<uint64_t, Expected> rows = MakeRows(rng, 200, kRowBytes0);
        const std::vector<uint64_t> ids = IdsOf(rows);
        std::vector<std::unique_ptr<RowTier::Found>> found;
        std::vector<uint64_t> scanned;
        std::vector<RowTier::Found> scanned_rows;
        bool ok = t.Put(inc, 0, RowsOf(rows)).ok() && t.Get(inc, 0, ids, &found).ok() &&
                  t.Scan(inc, 0)->Next(1000, &scanned, &scanned_rows).ok() &&
                  scanned.size() == 200 && t.Delete(inc, 0, ids).ok() && t.Rows(inc, 0) == 0;
        for (const auto& f : found) ok = ok && f != nullptr;
        if (!ok) ++failures[k];
        t.GetStats();
      }
      t.Drop(inc);
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(failures == std::vector<int>(kThreads, 0));
  CHECK(t.GetStats().rows == std::vector<uint64_t>{0, 0});
}

TEST_CASE("Open refuses bad options and unwritable directories", "[row_tier][open]") {
  TempDir tmp;
  RowTier::Options options = TestOptions(tmp.path);

  SECTION("an empty directory") {
    options.dir = "";
    absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(options);
    CHECK(tier.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(tier.status().message()), Catch::Contains("--tier_dir"));
  }
  SECTION("no cap") {
    options.max_disk_bytes = GENERATE(int64_t{0}, int64_t{-1});
    absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(options);
    CHECK(tier.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(tier.status().message()), Catch::Contains("--tier_max_disk_gb"));
  }
  SECTION("a cap below what an empty database takes") {
    options.max_disk_bytes = 3 << 20;  // two 1 MiB memtables and 2 MiB is the least
    absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(options);
    CHECK(tier.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(tier.status().message()), Catch::Contains("--tier_max_disk_gb"));
    options.max_disk_bytes = 4 << 20;
    CHECK(RowTier::Open(options).ok());
  }
  SECTION("a directory under a regular file") {
    const std::string file = tmp.path + "/file";
    std::ofstream(file) << "not a directory";
    options.dir = file + "/tier";
    absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(options);
    CHECK(tier.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(tier.status().message()), Catch::Contains("--tier_dir"));
    CHECK_THAT(std::string(tier.status().message()), Catch::Contains(options.dir));
  }
  SECTION("a directory that cannot be written") {
    options.dir = "/proc/row_tier_test";
    absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(options);
    CHECK(tier.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(tier.status().message()), Catch::Contains("--tier_dir"));
  }
}

TEST_CASE("a reopened directory starts empty", "[row_tier][open]") {
  TempDir tmp;
  const RowTier::Options options = TestOptions(tmp.path);
  std::mt19937_64 rng(8);
  const std::map<uint64_t, Expected> rows = MakeRows(rng, 100, kRowBytes0);
  uint32_t inc = 0;
  {
    absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(options);
    REQUIRE(tier.ok());
    inc = (*tier)->NewIncarnation();
    REQUIRE((*tier)->Put(inc, 0, RowsOf(rows)).ok());
    REQUIRE((*tier)->CompactForTesting().ok());  // rows in files, not just memtables
  }
  // Something else in the directory stays.
  std::ofstream(options.dir + "/other") << "x";
  absl::StatusOr<std::unique_ptr<RowTier>> tier = RowTier::Open(options);
  REQUIRE(tier.ok());
  CHECK((*tier)->GetStats().rows == std::vector<uint64_t>{0, 0});
  for (const auto& [id, e] : rows) CHECK_FALSE(Present(**tier, inc, 0, id));
  std::vector<uint64_t> ids;
  std::vector<RowTier::Found> found;
  absl::StatusOr<size_t> n = (*tier)->Scan(inc, 0)->Next(10, &ids, &found);
  REQUIRE(n.ok());
  CHECK(*n == 0);
  CHECK(std::filesystem::exists(options.dir + "/other"));
}

}  // namespace
}  // namespace server
}  // namespace ps

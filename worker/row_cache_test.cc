#include "worker/row_cache.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/match.h"

namespace ps {
namespace worker {
namespace {

// A row of `dim` floats that names its key and the step it was pulled for.
std::vector<float> RowOf(uint64_t key, int64_t step, int dim) {
  std::vector<float> row(dim);
  for (int c = 0; c < dim; ++c) row[c] = static_cast<float>(key * 1000 + step * 10 + c);
  return row;
}

std::vector<float> RowsOf(const std::vector<uint64_t>& keys, int64_t step, int dim) {
  std::vector<float> rows;
  for (uint64_t k : keys) {
    const std::vector<float> row = RowOf(k, step, dim);
    rows.insert(rows.end(), row.begin(), row.end());
  }
  return rows;
}

std::unique_ptr<RowCache> MakeCache(uint64_t max_rows, int64_t refresh, std::vector<int> dims,
                                    metrics::Registry* registry = nullptr, bool on_device = false,
                                    uint32_t min_pulls = 1) {
  RowCache::Options options;
  options.on_device = on_device;
  options.min_pulls = min_pulls;
  options.max_rows = max_rows;
  options.refresh_steps = refresh;
  options.dims = std::move(dims);
  options.registry = registry;
  options.rank = 3;
  absl::StatusOr<std::unique_ptr<RowCache>> cache = RowCache::Create(options);
  REQUIRE(cache.ok());
  return std::move(*cache);
}

// A batch's distinct keys: `draws` draws over 0 .. range - 1, small keys far more often (a power
// law), each kept at its first draw.
std::vector<uint64_t> PowerLawKeys(std::mt19937_64* rng, int draws, double range) {
  std::vector<uint64_t> keys;
  std::set<uint64_t> seen;
  for (int v = 0; v < draws; ++v) {
    const double u = std::uniform_real_distribution<double>(0, 1)(*rng);
    const uint64_t k = static_cast<uint64_t>(std::pow(range, u * u)) - 1;
    if (seen.insert(k).second) keys.push_back(k);
  }
  return keys;
}

// What a worker does with the cache at `step`: looks `keys` up, "pulls" the misses (rows made by
// RowsOf for `step`), admits them. Returns the keys that missed; *rows gets every key's row.
std::vector<uint64_t> PullStep(RowCache* cache, int table, int dim, int64_t step,
                               const std::vector<uint64_t>& keys, std::vector<float>* rows) {
  rows->assign(keys.size() * dim, -1.0f);
  std::vector<uint32_t> misses;
  cache->Lookup(table, step, keys, rows->data(), &misses);
  std::vector<uint64_t> missed;
  for (uint32_t i : misses) missed.push_back(keys[i]);
  const std::vector<float> pulled = RowsOf(missed, step, dim);
  for (size_t m = 0; m < misses.size(); ++m) {
    std::copy(pulled.begin() + m * dim, pulled.begin() + (m + 1) * dim,
              rows->begin() + size_t(misses[m]) * dim);
  }
  cache->Admit(table, step, missed, pulled.data());
  return missed;
}

TEST_CASE("a cached row is served until refresh_steps have passed, then pulled again",
          "[worker][row_cache]") {
  const int dim = 4;
  auto cache = MakeCache(100, 2, {dim});
  std::vector<float> rows;
  // Step 0: everything misses.
  CHECK(PullStep(cache.get(), 0, dim, 0, {1, 2, 3}, &rows) == std::vector<uint64_t>{1, 2, 3});
  CHECK(rows == RowsOf({1, 2, 3}, 0, dim));
  // Steps 1 and 2: keys 1..3 hit with the rows of step 0; key 4 is new.
  CHECK(PullStep(cache.get(), 0, dim, 1, {3, 4, 1}, &rows) == std::vector<uint64_t>{4});
  std::vector<float> want = RowsOf({3}, 0, dim);
  for (float f : RowsOf({4}, 1, dim)) want.push_back(f);
  for (float f : RowsOf({1}, 0, dim)) want.push_back(f);
  CHECK(rows == want);
  CHECK(PullStep(cache.get(), 0, dim, 2, {1, 2}, &rows).empty());
  CHECK(rows == RowsOf({1, 2}, 0, dim));
  // Step 3: the rows of step 0 are 3 steps old, past refresh_steps; key 4's (step 1) is not.
  CHECK(PullStep(cache.get(), 0, dim, 3, {1, 4, 2}, &rows) == std::vector<uint64_t>{1, 2});
  want = RowsOf({1}, 3, dim);
  for (float f : RowsOf({4}, 1, dim)) want.push_back(f);
  for (float f : RowsOf({2}, 3, dim)) want.push_back(f);
  CHECK(rows == want);
  // The pull of step 3 replaced the rows in place: served again at step 4 with step 3's values.
  CHECK(PullStep(cache.get(), 0, dim, 4, {2}, &rows).empty());
  CHECK(rows == RowsOf({2}, 3, dim));

  const RowCacheStats s = cache->stats();
  CHECK(s.lookups == 3 + 3 + 2 + 3 + 1);
  CHECK(s.hits == 0 + 2 + 2 + 1 + 1);
  CHECK(s.cache_bytes == 6 * dim * 4);
  CHECK(s.pulled_bytes == (3 + 1 + 2) * dim * 4);
  CHECK(s.rows == 4);
  CHECK(s.hit_rate() == Approx(6.0 / 12));
}

TEST_CASE("tables are cached apart, each with its dim", "[worker][row_cache]") {
  auto cache = MakeCache(10, 1, {2, 3});
  REQUIRE(cache->num_tables() == 2);
  std::vector<float> rows;
  CHECK(PullStep(cache.get(), 0, 2, 0, {7}, &rows).size() == 1);
  // The same key in the other table is another row.
  CHECK(PullStep(cache.get(), 1, 3, 0, {7}, &rows).size() == 1);
  CHECK(rows == RowOf(7, 0, 3));
  CHECK(PullStep(cache.get(), 0, 2, 1, {7}, &rows).empty());
  CHECK(rows == RowOf(7, 0, 2));
  CHECK(PullStep(cache.get(), 1, 3, 1, {7}, &rows).empty());
  CHECK(rows == RowOf(7, 0, 3));
  CHECK(cache->stats().rows == 2);
  CHECK(cache->stats().cache_bytes == (2 + 3) * 4);
}

TEST_CASE("a full cache evicts by CLOCK: the rows read again stay", "[worker][row_cache]") {
  const int dim = 1;
  auto cache = MakeCache(4, 100, {dim});
  std::vector<float> rows;
  PullStep(cache.get(), 0, dim, 0, {1, 2, 3, 4}, &rows);
  // 1 and 3 are read again: referenced.
  CHECK(PullStep(cache.get(), 0, dim, 1, {1, 3}, &rows).empty());
  // 5 and 6 take the places of the unreferenced 2 and 4 (the hand passes 1 and 3, clearing them).
  CHECK(PullStep(cache.get(), 0, dim, 2, {5, 6}, &rows).size() == 2);
  CHECK(cache->stats().rows == 4);
  CHECK(PullStep(cache.get(), 0, dim, 3, {1, 3, 5, 6}, &rows).empty());
  CHECK(PullStep(cache.get(), 0, dim, 4, {2}, &rows) == std::vector<uint64_t>{2});
  CHECK(PullStep(cache.get(), 0, dim, 5, {4}, &rows) == std::vector<uint64_t>{4});
  CHECK(cache->stats().rows == 4);
}

TEST_CASE("expired rows are evicted before referenced fresh ones", "[worker][row_cache]") {
  const int dim = 2;
  auto cache = MakeCache(3, 1, {dim});
  std::vector<float> rows;
  PullStep(cache.get(), 0, dim, 0, {1, 2}, &rows);
  PullStep(cache.get(), 0, dim, 2, {3}, &rows);
  CHECK(PullStep(cache.get(), 0, dim, 3, {3}, &rows).empty());  // 3 referenced, fresh
  // At step 3, 1 and 2 (pulled at step 0) are expired: 4 and 5 take their slots, not 3's.
  CHECK(PullStep(cache.get(), 0, dim, 3, {4, 5}, &rows).size() == 2);
  CHECK(PullStep(cache.get(), 0, dim, 3, {3, 4, 5}, &rows).empty());
  std::vector<float> want = RowsOf({3}, 2, dim);
  for (float f : RowsOf({4, 5}, 3, dim)) want.push_back(f);
  CHECK(rows == want);
  CHECK(PullStep(cache.get(), 0, dim, 3, {1, 2}, &rows).size() == 2);
}

TEST_CASE("more misses than max_rows in one step keep the cache consistent",
          "[worker][row_cache]") {
  const int dim = 3;
  auto cache = MakeCache(5, 1, {dim});
  std::vector<uint64_t> keys;
  for (uint64_t k = 100; k < 112; ++k) keys.push_back(k);
  std::vector<float> rows;
  CHECK(PullStep(cache.get(), 0, dim, 0, keys, &rows).size() == keys.size());
  CHECK(cache->stats().rows == 5);
  // Whatever stayed is served with its own row.
  std::vector<uint32_t> misses;
  rows.assign(keys.size() * dim, -1.0f);
  cache->Lookup(0, 1, keys, rows.data(), &misses);
  CHECK(misses.size() == keys.size() - 5);
  size_t m = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (m < misses.size() && misses[m] == i) {
      ++m;
      continue;
    }
    CHECK(std::vector<float>(rows.begin() + i * dim, rows.begin() + (i + 1) * dim) ==
          RowOf(keys[i], 0, dim));
  }
}

TEST_CASE("with min_pulls 2 a row enters on its key's second pull, and is refreshed in place",
          "[worker][row_cache][admission]") {
  const int dim = 2;
  auto cache = MakeCache(100, 2, {dim}, nullptr, false, /*min_pulls=*/2);
  std::vector<float> rows;
  // Step 0: the first pull of 1, 2, 3 is only counted.
  CHECK(PullStep(cache.get(), 0, dim, 0, {1, 2, 3}, &rows).size() == 3);
  CHECK(cache->stats().rows == 0);
  CHECK(cache->stats().refused == 3);
  // Step 1: the second pull of 1 and 2 admits them.
  CHECK(PullStep(cache.get(), 0, dim, 1, {1, 2}, &rows).size() == 2);
  CHECK(cache->stats().rows == 2);
  // Step 2: 1 and 2 hit with step 1's rows; 3's second pull admits it.
  CHECK(PullStep(cache.get(), 0, dim, 2, {1, 3, 2}, &rows) == std::vector<uint64_t>{3});
  std::vector<float> want = RowsOf({1}, 1, dim);
  for (float f : RowsOf({3}, 2, dim)) want.push_back(f);
  for (float f : RowsOf({2}, 1, dim)) want.push_back(f);
  CHECK(rows == want);
  // Step 4: 1's row (step 1) expired; pulled again, it is refreshed in place with no new count.
  CHECK(PullStep(cache.get(), 0, dim, 4, {1, 3}, &rows) == std::vector<uint64_t>{1});
  CHECK(PullStep(cache.get(), 0, dim, 5, {1}, &rows).empty());
  CHECK(rows == RowsOf({1}, 4, dim));
  CHECK(cache->stats().refused == 3);
  CHECK(cache->stats().rows == 3);
  CHECK(cache->stats().pulled_bytes == (3 + 2 + 1 + 1) * dim * 4);
}

TEST_CASE("keys pulled once do not evict the hot rows with min_pulls 2, and do with 1",
          "[worker][row_cache][admission]") {
  // Each step reads the same 16 hot keys and 64 keys never seen before, into 16 rows: admitting
  // every miss lets the cold keys push the hot ones out every step.
  const int dim = 1;
  const auto hot_hits = [&](uint32_t min_pulls) {
    auto cache = MakeCache(16, 1000, {dim}, nullptr, false, min_pulls);
    std::vector<float> rows;
    uint64_t next_cold = 1000;
    int64_t hits = 0;
    for (int64_t step = 0; step < 50; ++step) {
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < 16; ++k) keys.push_back(k);
      for (int c = 0; c < 64; ++c) keys.push_back(next_cold++);
      const std::vector<uint64_t> missed = PullStep(cache.get(), 0, dim, step, keys, &rows);
      if (step >= 2) hits += static_cast<int64_t>(keys.size() - missed.size());
    }
    // With min_pulls 2, every cold key and each hot key's first pull were refused.
    if (min_pulls == 2) CHECK(cache->stats().refused == 50 * 64 + 16);
    return hits;
  };
  // From step 2 on (the hot keys' second pull was step 1), every hot key hits.
  CHECK(hot_hits(2) == 48 * 16);
  CHECK(hot_hits(1) < 48 * 16 / 2);
}

TEST_CASE("a table large enough to prefetch finds every row it holds, after many evictions",
          "[worker][row_cache]") {
  // 40,000 rows: 1.3 MB of index and slots, past the size from which lookups prefetch ahead.
  const int dim = 1;
  const uint64_t capacity = 40000;
  auto cache = MakeCache(capacity, 1 << 20, {dim});
  std::mt19937_64 rng(11);
  std::vector<uint64_t> all;
  std::vector<float> rows;
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<uint64_t> keys(5000);
    for (uint64_t& k : keys) k = rng();
    all.insert(all.end(), keys.begin(), keys.end());
    CHECK(PullStep(cache.get(), 0, dim, step, keys, &rows).size() == keys.size());
  }
  CHECK(cache->stats().rows == static_cast<int64_t>(capacity));
  // The keys still held are served with their own rows; exactly `capacity` of them.
  rows.assign(all.size() * dim, -1.0f);
  std::vector<uint32_t> misses;
  cache->Lookup(0, 20, all, rows.data(), &misses);
  CHECK(all.size() - misses.size() == capacity);
  size_t m = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (m < misses.size() && misses[m] == i) {
      ++m;
      continue;
    }
    REQUIRE(rows[i] == RowOf(all[i], static_cast<int64_t>(i / 5000), dim)[0]);
  }
}

// A model of the cache with the same rules, for a random run: key -> (step pulled, row step).
TEST_CASE("random Zipf-like runs serve every hit with the row of its last pull, deterministically",
          "[worker][row_cache]") {
  const int64_t refresh = GENERATE(1, 3, 1000);
  const uint64_t capacity = GENERATE(8, 64);
  const uint32_t min_pulls = GENERATE(1, 2);
  const int dim = 2;
  const auto run = [&](std::vector<int64_t>* hits_per_step) {
    auto cache = MakeCache(capacity, refresh, {dim}, nullptr, false, min_pulls);
    std::mt19937_64 rng(42);
    std::map<uint64_t, int64_t> last_pull;  // key -> step of its last pull
    std::vector<float> rows;
    for (int64_t step = 0; step < 200; ++step) {
      const std::vector<uint64_t> keys = PowerLawKeys(&rng, 40, 1000);
      const std::vector<uint64_t> missed = PullStep(cache.get(), 0, dim, step, keys, &rows);
      std::map<uint64_t, bool> was_missed;
      for (uint64_t k : missed) was_missed[k] = true;
      int64_t hits = 0;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (was_missed[keys[i]]) {
          last_pull[keys[i]] = step;
          continue;
        }
        ++hits;
        // A hit is fresh, and its row is that of the key's last pull.
        REQUIRE(last_pull.count(keys[i]) == 1);
        CHECK(last_pull[keys[i]] >= step - refresh);
        CHECK(std::vector<float>(rows.begin() + i * dim, rows.begin() + (i + 1) * dim) ==
              RowOf(keys[i], last_pull[keys[i]], dim));
      }
      hits_per_step->push_back(hits);
      CHECK(cache->stats().rows <= static_cast<int64_t>(capacity));
    }
    if (refresh >= 200) {
      // Nothing expired: every resident row is found (the index survived the evictions).
      std::vector<uint64_t> all;
      for (uint64_t k = 0; k < 1000; ++k) all.push_back(k);
      rows.resize(all.size() * dim);
      std::vector<uint32_t> misses;
      const int64_t hits_before = cache->stats().hits;
      cache->Lookup(0, 200, all, rows.data(), &misses);
      CHECK(cache->stats().hits - hits_before == static_cast<int64_t>(capacity));
      CHECK(misses.size() == all.size() - capacity);
    }
    return cache->stats();
  };
  std::vector<int64_t> first, second;
  const RowCacheStats a = run(&first);
  const RowCacheStats b = run(&second);
  CHECK(first == second);
  CHECK(a.hits == b.hits);
  CHECK(a.hits > 0);
  CHECK(a.rows == static_cast<int64_t>(capacity));
  if (refresh < 200) CHECK(a.lookups * dim * 4 == a.cache_bytes + a.pulled_bytes);
}

TEST_CASE("on the device, the slots handed out serve every hit as the host cache serves it",
          "[worker][row_cache]") {
  // The same random run through a host cache (rows copied) and a device one (slots handed out,
  // the copies made here on a model of the device's rows, hits before admissions, as GpuModel's
  // pass makes them): the same hits, misses and rows, and no slot admitted twice in one call.
  const int64_t refresh = GENERATE(1, 4);
  const uint64_t capacity = GENERATE(8, 64);
  const uint32_t min_pulls = GENERATE(1, 2);
  const int dim = 3;
  auto host = MakeCache(capacity, refresh, {dim}, nullptr, false, min_pulls);
  auto device = MakeCache(capacity, refresh, {dim}, nullptr, /*on_device=*/true, min_pulls);
  CHECK(device->on_device());
  CHECK(device->capacity() == capacity);
  std::vector<float> slots_rows(capacity * dim, std::nanf(""));  // the device's cache
  std::mt19937_64 rng(7);
  std::vector<float> host_rows;
  for (int64_t step = 0; step < 150; ++step) {
    INFO("step " << step);
    const std::vector<uint64_t> keys = PowerLawKeys(&rng, 30, 300);
    const std::vector<uint64_t> host_missed = PullStep(host.get(), 0, dim, step, keys, &host_rows);
    // The device's step: slots for the hits, the misses pulled, their slots.
    std::vector<uint32_t> hit_slots, hit_places, misses, admit_slots, admit_places;
    device->LookupSlots(0, step, keys, &hit_slots, &hit_places, &misses);
    std::vector<uint64_t> missed;
    for (uint32_t m : misses) missed.push_back(keys[m]);
    REQUIRE(missed == host_missed);
    std::vector<float> rows(keys.size() * dim, std::nanf(""));
    const std::vector<float> pulled = RowsOf(missed, step, dim);
    for (size_t m = 0; m < misses.size(); ++m) {
      std::copy(pulled.begin() + m * dim, pulled.begin() + (m + 1) * dim,
                rows.begin() + size_t(misses[m]) * dim);
    }
    device->AdmitSlots(0, step, missed, &admit_slots, &admit_places);
    std::set<uint32_t> distinct(admit_slots.begin(), admit_slots.end());
    CHECK(distinct.size() == admit_slots.size());
    for (size_t h = 0; h < hit_slots.size(); ++h) {
      std::copy(slots_rows.begin() + size_t(hit_slots[h]) * dim,
                slots_rows.begin() + size_t(hit_slots[h] + 1) * dim,
                rows.begin() + size_t(hit_places[h]) * dim);
    }
    for (size_t a = 0; a < admit_slots.size(); ++a) {
      const size_t place = misses[admit_places[a]];
      std::copy(rows.begin() + place * dim, rows.begin() + (place + 1) * dim,
                slots_rows.begin() + size_t(admit_slots[a]) * dim);
    }
    CHECK(rows == host_rows);
  }
  CHECK(device->stats().hits == host->stats().hits);
  CHECK(device->stats().hits > 0);
}

TEST_CASE("the cache's Prometheus series count lookups, hits and bytes by source",
          "[worker][row_cache][metrics]") {
  metrics::Registry registry;
  const int dim = 2;
  auto cache = MakeCache(10, 1, {dim}, &registry);
  std::vector<float> rows;
  PullStep(cache.get(), 0, dim, 0, {1, 2, 3}, &rows);
  PullStep(cache.get(), 0, dim, 1, {1, 4}, &rows);
  const std::string text = registry.Render();
  CHECK(absl::StrContains(text, "ps_worker_row_cache_lookups_total{rank=\"3\"} 5\n"));
  CHECK(absl::StrContains(text, "ps_worker_row_cache_hits_total{rank=\"3\"} 1\n"));
  CHECK(
      absl::StrContains(text, "ps_worker_row_cache_bytes_total{rank=\"3\",source=\"cache\"} 8\n"));
  CHECK(absl::StrContains(text,
                          "ps_worker_row_cache_bytes_total{rank=\"3\",source=\"server\"} 32\n"));
  CHECK(absl::StrContains(text, "ps_worker_row_cache_rows{rank=\"3\"} 4\n"));
  CHECK(absl::StrContains(text, "ps_worker_row_cache_refused_total{rank=\"3\"} 0\n"));

  // With min_pulls 2, the first pull of each key is refused.
  metrics::Registry admitting;
  auto counted = MakeCache(10, 1, {dim}, &admitting, false, /*min_pulls=*/2);
  PullStep(counted.get(), 0, dim, 0, {1, 2, 3}, &rows);
  PullStep(counted.get(), 0, dim, 1, {1, 4}, &rows);
  const std::string after = admitting.Render();
  CHECK(absl::StrContains(after, "ps_worker_row_cache_refused_total{rank=\"3\"} 4\n"));
  CHECK(absl::StrContains(after, "ps_worker_row_cache_rows{rank=\"3\"} 1\n"));
}

TEST_CASE("bad options are refused", "[worker][row_cache]") {
  RowCache::Options options;
  options.dims = {4};
  options.max_rows = 0;
  CHECK(RowCache::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options.max_rows = 10;
  options.refresh_steps = 0;
  CHECK(RowCache::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options.refresh_steps = 1;
  options.dims = {};
  CHECK(RowCache::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options.dims = {0};
  CHECK(RowCache::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options.dims = {4};
  options.min_pulls = 0;
  CHECK(RowCache::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options.min_pulls = 16;
  CHECK(RowCache::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options.min_pulls = 15;
  CHECK(RowCache::Create(options).ok());
  options.min_pulls = 1;
  CHECK(RowCache::Create(options).ok());
}

}  // namespace
}  // namespace worker
}  // namespace ps

#include "server/hot_keys.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

// Every allocation of this test binary is counted, so that a test can show that recording
// allocates nothing. Every form of the global operator new and delete is replaced, all on malloc
// and free: replacing only some would pair a replaced new with a library delete (or the other way
// round), which AddressSanitizer reports as an alloc-dealloc mismatch.
namespace {
std::atomic<uint64_t> g_allocations{0};

void* CountedAlloc(std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* CountedAlignedAlloc(std::size_t size, std::align_val_t align) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  const std::size_t a = std::max(static_cast<std::size_t>(align), sizeof(void*));
  return posix_memalign(&p, a, size == 0 ? 1 : size) == 0 ? p : nullptr;
}
void* OrThrow(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t size) { return OrThrow(CountedAlloc(size)); }
void* operator new[](std::size_t size) { return OrThrow(CountedAlloc(size)); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return CountedAlloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return CountedAlloc(size);
}
void* operator new(std::size_t size, std::align_val_t align) {
  return OrThrow(CountedAlignedAlloc(size, align));
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return OrThrow(CountedAlignedAlloc(size, align));
}
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return CountedAlignedAlloc(size, align);
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return CountedAlignedAlloc(size, align);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace ps {
namespace server {
namespace {

// A seeded stream of ids whose ranks follow Zipf's law with exponent `s` over `n` ids, the ids
// themselves scattered over uint64 (rank r is id ids[r]).
class ZipfStream {
 public:
  ZipfStream(size_t n, double s, uint64_t seed) : rng_(seed), cdf_(n), ids_(n) {
    double sum = 0;
    for (size_t r = 0; r < n; ++r) cdf_[r] = sum += 1.0 / std::pow(static_cast<double>(r + 1), s);
    for (double& c : cdf_) c /= sum;
    std::mt19937_64 id_rng(seed ^ 0x5eed);
    absl::flat_hash_set<uint64_t> used;
    for (uint64_t& id : ids_) {
      do id = id_rng();
      while (!used.insert(id).second);
    }
  }

  uint64_t Next() {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    const size_t r = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    return ids_[std::min(r, ids_.size() - 1)];
  }

 private:
  std::mt19937_64 rng_;
  std::vector<double> cdf_;
  std::vector<uint64_t> ids_;
};

// `requests` requests of `keys_per_request` keys from the stream.
std::vector<std::vector<uint64_t>> Requests(ZipfStream* stream, int requests,
                                            int keys_per_request) {
  std::vector<std::vector<uint64_t>> out(requests);
  for (auto& request : out) {
    request.resize(keys_per_request);
    for (uint64_t& key : request) key = stream->Next();
  }
  return out;
}

absl::flat_hash_map<uint64_t, uint64_t> ExactCounts(
    const std::vector<std::vector<uint64_t>>& requests) {
  absl::flat_hash_map<uint64_t, uint64_t> counts;
  for (const auto& request : requests) {
    for (uint64_t key : request) ++counts[key];
  }
  return counts;
}

std::vector<uint64_t> TrueTop(const absl::flat_hash_map<uint64_t, uint64_t>& counts, size_t k) {
  std::vector<std::pair<uint64_t, uint64_t>> all(counts.begin(), counts.end());
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::vector<uint64_t> top;
  for (size_t i = 0; i < k && i < all.size(); ++i) top.push_back(all[i].first);
  return top;
}

bool Contains(const std::vector<HotKey>& top, uint64_t id) {
  return std::any_of(top.begin(), top.end(), [id](const HotKey& h) { return h.id == id; });
}

TEST_CASE("every key counted: the true top-10 of a Zipf stream is found, within the bounds",
          "[hot_keys]") {
  const double s = GENERATE(0.9, 1.1, 1.5);
  INFO("zipf exponent " << s);
  ZipfStream stream(100000, s, /*seed=*/42);
  const auto requests = Requests(&stream, 1000, 1000);  // 1M keys
  const auto exact = ExactCounts(requests);

  HotKeys::Options options;
  options.sample_every = 1;
  HotKeys sketch(options);
  for (const auto& request : requests) REQUIRE(sketch.Record(request));

  const std::vector<HotKey> top10 = sketch.Top(10);
  REQUIRE(top10.size() == 10);
  for (uint64_t id : TrueTop(exact, 10)) {
    INFO("true top key " << id << " (count " << exact.at(id) << ")");
    CHECK(Contains(top10, id));
  }
  // Every key the sketch monitors obeys count - error <= true <= count.
  const std::vector<HotKey> all = sketch.Top(HotKeys::kDefaultCapacity);
  CHECK(all.size() == HotKeys::kDefaultCapacity);
  uint64_t total = 0;
  for (const HotKey& h : all) {
    const uint64_t truth = exact.contains(h.id) ? exact.at(h.id) : 0;
    INFO("key " << h.id << " count " << h.count << " error " << h.error << " true " << truth);
    CHECK(h.count - h.error <= truth);
    CHECK(truth <= h.count);
    total += h.count;
  }
  // The counts sum to the weight offered.
  CHECK(total == 1000u * 1000u);
  // Highest first.
  for (size_t i = 1; i < all.size(); ++i) CHECK(all[i - 1].count >= all[i].count);
}

TEST_CASE("sampled keys still find the hot keys and estimate their counts", "[hot_keys]") {
  const double s = GENERATE(1.1, 1.5);
  const uint32_t every = GENERATE(16u, HotKeys::kDefaultSampleEvery);
  INFO("zipf exponent " << s << ", 1 key in " << every);
  ZipfStream stream(100000, s, /*seed=*/7);
  // Requests of the data path's sizes: a few large and many small.
  auto requests = Requests(&stream, 300, 3000);
  auto small = Requests(&stream, 2000, 50);
  requests.insert(requests.end(), small.begin(), small.end());
  const auto exact = ExactCounts(requests);

  HotKeys::Options options;
  options.sample_every = every;
  HotKeys sketch(options);
  for (const auto& request : requests) REQUIRE(sketch.Record(request));

  const std::vector<HotKey> top = sketch.Top(15);
  for (uint64_t id : TrueTop(exact, 10)) {
    INFO("true top key " << id << " (count " << exact.at(id) << ")");
    REQUIRE(Contains(top, id));
    const HotKey& h =
        *std::find_if(top.begin(), top.end(), [id](const HotKey& k) { return k.id == id; });
    // An estimate in keys, not in samples: within the sketch's error and 4 standard deviations
    // of the sampling (a key seen n times gets about n / every samples of weight every).
    const double sd = std::sqrt(static_cast<double>(exact.at(id)) * every);
    CHECK(std::abs(static_cast<double>(h.count) - exact.at(id)) <= h.error + 4 * sd);
  }
  // The sampled weights sum to about the keys offered.
  uint64_t total = 0;
  for (const HotKey& h : sketch.Top(HotKeys::kDefaultCapacity)) total += h.count;
  const double keys = 300 * 3000 + 2000 * 50;
  CHECK(std::abs(total - keys) < 0.02 * keys);
}

TEST_CASE("a full sketch replaces its smallest count, which becomes the newcomer's error",
          "[hot_keys]") {
  HotKeys::Options options;
  options.capacity = 3;
  options.sample_every = 1;
  HotKeys sketch(options);
  sketch.Add(10, 5);
  sketch.Add(20, 2);
  sketch.Add(30, 7);
  CHECK(sketch.Top(10) == std::vector<HotKey>{{30, 7, 0}, {10, 5, 0}, {20, 2, 0}});
  sketch.Add(40);  // takes 20's place: count 2 + 1, error 2
  CHECK(sketch.Top(10) == std::vector<HotKey>{{30, 7, 0}, {10, 5, 0}, {40, 3, 2}});
  sketch.Add(20, 4);  // takes 40's place (3): count 7, error 3
  CHECK(sketch.Top(2) == std::vector<HotKey>{{20, 7, 3}, {30, 7, 0}});
  sketch.Add(10, 1);
  CHECK(sketch.Top(1) == std::vector<HotKey>{{20, 7, 3}});
  CHECK(sketch.Top(0).empty());
  CHECK(sketch.skipped() == 0);
}

TEST_CASE("many keys churning through a small sketch keep its index consistent", "[hot_keys]") {
  HotKeys::Options options;
  options.capacity = 8;
  options.sample_every = 1;
  HotKeys sketch(options);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) sketch.Add(rng() % 64);
  sketch.Add(1000, 1000000);
  const std::vector<HotKey> top = sketch.Top(8);
  REQUIRE(top.size() == 8);
  CHECK(top[0].id == 1000);
  absl::flat_hash_set<uint64_t> ids;
  for (const HotKey& h : top) CHECK(ids.insert(h.id).second);  // each key monitored once
  uint64_t total = 0;
  for (const HotKey& h : top) total += h.count;
  CHECK(total == 200000 + 1000000);
}

TEST_CASE("recording samples by offset and weight, and allocates nothing", "[hot_keys]") {
  HotKeys::Options options;
  options.sample_every = 64;
  HotKeys sketch(options);
  CHECK(sketch.Record({}));
  CHECK(sketch.Top(10).empty());
  // One key per request: sampled when the request's offset is 0, about one request in 64.
  const std::vector<uint64_t> one = {5};
  std::vector<uint64_t> big(64000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = 1000 + i % 100;
  const uint64_t before = g_allocations.load();
  for (int i = 0; i < 1600; ++i) sketch.Record(one);
  for (int i = 0; i < 100; ++i) sketch.Record(big);
  const uint64_t after = g_allocations.load();
  CHECK(after == before);
  // 101 keys in all: each monitored, with no error.
  const std::vector<HotKey> top = sketch.Top(HotKeys::kDefaultCapacity);
  CHECK(top.size() == 101);
  const auto five = std::find_if(top.begin(), top.end(), [](const HotKey& h) { return h.id == 5; });
  REQUIRE(five != top.end());
  // 1600 requests of key 5 alone: about 25 sampled, each weighing 64.
  CHECK(five->error == 0);
  CHECK(five->count % 64 == 0);
  CHECK(five->count > 800);
  CHECK(five->count < 2400);
  // Each big request: its 100 keys 640 times each, 1000 samples of weight 64.
  uint64_t big_total = 0;
  for (const HotKey& h : top) big_total += h.id >= 1000 ? h.count : 0;
  CHECK(big_total == 100u * 64000u);
}

TEST_CASE("a request that finds the sketch busy is skipped and counted, never waits",
          "[hot_keys]") {
  HotKeys::Options options;
  options.sample_every = 1;
  HotKeys sketch(options);
  std::vector<uint64_t> keys(2000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i % 50;
  constexpr int kThreads = 4;
  constexpr int kRequests = 2000;
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> skipped{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRequests; ++i) (sketch.Record(keys) ? recorded : skipped)++;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(recorded + skipped == kThreads * kRequests);
  CHECK(sketch.skipped() == skipped);
  uint64_t total = 0;
  for (const HotKey& h : sketch.Top(100)) total += h.count;
  CHECK(total == recorded * keys.size());
}

}  // namespace
}  // namespace server
}  // namespace ps

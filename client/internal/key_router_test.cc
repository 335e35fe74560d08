#include "client/internal/key_router.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "common/hash.h"

namespace ps {
namespace client_internal {
namespace {

TEST_CASE("plans dedupe keys and group them by server and shard", "[client][router]") {
  const uint32_t num_shards = GENERATE(1u, 7u, 64u);
  const uint32_t num_servers = GENERATE(1u, 3u);
  const uint32_t max_keys = GENERATE(1u, 5u, 1000u);
  std::vector<uint32_t> shard_to_server(num_shards);
  for (uint32_t s = 0; s < num_shards; ++s) shard_to_server[s] = (s * 5 + 1) % num_servers;
  std::mt19937_64 rng(42);
  std::vector<uint64_t> keys(3000);
  for (auto& k : keys) k = rng() % 1500;  // many repeats
  keys.push_back(0);
  keys.push_back(~uint64_t{0});
  const uint64_t table = NameHash("t");

  const KeyPlan plan = PlanKeys(keys, table, shard_to_server, max_keys);

  // Every key maps to its own value, and unique holds each distinct key once.
  REQUIRE(plan.order.size() == keys.size());
  REQUIRE(plan.unique_of.size() == keys.size());
  for (size_t p = 0; p < keys.size(); ++p) {
    CHECK(plan.unique[plan.unique_of[p]] == keys[plan.order[p]]);
  }
  CHECK(std::set<uint64_t>(keys.begin(), keys.end()).size() == plan.unique.size());

  // order and the shard ranges list every key once, under its shard.
  std::vector<int> seen(keys.size(), 0);
  for (uint32_t s = 0; s < num_shards; ++s) {
    for (uint32_t p = plan.shard_begin[s]; p < plan.shard_end[s]; ++p) {
      CHECK(ShardOf(table, keys[plan.order[p]], num_shards) == s);
      ++seen[plan.order[p]];
    }
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<long>(keys.size()));

  // Parts cover unique exactly once, in order, each within one server and max_keys.
  uint32_t next = 0;
  for (const Part& part : plan.parts) {
    CHECK(part.num_keys <= max_keys);
    uint32_t sum = 0;
    for (const Segment& seg : part.segments) {
      CHECK(seg.begin == next);
      CHECK(shard_to_server[seg.shard] == part.server);
      for (uint32_t j = seg.begin; j < seg.begin + seg.count; ++j) {
        CHECK(ShardOf(table, plan.unique[j], num_shards) == seg.shard);
      }
      next += seg.count;
      sum += seg.count;
    }
    CHECK(sum == part.num_keys);
  }
  CHECK(next == plan.unique.size());
}

TEST_CASE("an empty call plans nothing", "[client][router]") {
  const std::vector<uint32_t> map(8, 0);
  const KeyPlan plan = PlanKeys({}, NameHash("t"), map, 10);
  CHECK(plan.unique.empty());
  CHECK(plan.parts.empty());
}

TEST_CASE("a push's rows are checked for NaN and Inf while its keys are planned",
          "[client][router]") {
  const std::vector<uint32_t> map(8, 0);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 100; ++k) keys.push_back(k * 7919);
  std::vector<float> rows(keys.size() * 3, 0.5f);
  CHECK(PlanKeys(keys, NameHash("t"), map, 10, rows, 3).rows_finite);
  CHECK(PlanKeys(keys, NameHash("t"), map, 10).rows_finite);  // none given
  const size_t where = GENERATE(0, 1, 150, 299);
  const float bad =
      GENERATE(std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
               -std::numeric_limits<float>::infinity());
  rows[where] = bad;
  const KeyPlan plan = PlanKeys(keys, NameHash("t"), map, 10, rows, 3);
  CHECK_FALSE(plan.rows_finite);
  CHECK(plan.unique.size() == keys.size());  // planned all the same
}

TEST_CASE("reroute regroups a part's segments by the new map", "[client][router]") {
  Part part;
  part.server = 0;
  part.segments = {{0, 0, 3}, {1, 3, 2}, {2, 5, 4}};
  part.num_keys = 9;
  const std::vector<uint32_t> new_map = {1, 2, 1};
  const std::vector<Part> parts = Reroute(part, new_map);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].server == 1);
  CHECK(parts[0].num_keys == 7);
  CHECK(parts[0].segments.size() == 2);
  CHECK(parts[1].server == 2);
  CHECK(parts[1].num_keys == 2);
}

// Two plans are the same when every field is.
void CheckSamePlan(const KeyPlan& a, const KeyPlan& b) {
  CHECK(a.unique == b.unique);
  CHECK(a.order == b.order);
  CHECK(a.unique_of == b.unique_of);
  CHECK(a.shard_begin == b.shard_begin);
  CHECK(a.shard_end == b.shard_end);
  REQUIRE(a.parts.size() == b.parts.size());
  for (size_t i = 0; i < a.parts.size(); ++i) {
    CHECK(a.parts[i].server == b.parts[i].server);
    CHECK(a.parts[i].num_keys == b.parts[i].num_keys);
    REQUIRE(a.parts[i].segments.size() == b.parts[i].segments.size());
    for (size_t j = 0; j < a.parts[i].segments.size(); ++j) {
      CHECK(a.parts[i].segments[j].shard == b.parts[i].segments[j].shard);
      CHECK(a.parts[i].segments[j].begin == b.parts[i].segments[j].begin);
      CHECK(a.parts[i].segments[j].count == b.parts[i].segments[j].count);
    }
  }
}

TEST_CASE("the plan cache gives back a recent call's plan for the very same keys only",
          "[client][router]") {
  std::mt19937_64 rng(17);
  const std::vector<uint32_t> map = {0, 1, 0, 1, 2, 2, 0, 1};
  const uint64_t table = NameHash("t");
  std::vector<uint64_t> keys(1000);
  for (uint64_t& k : keys) k = rng() % 5000;
  PlanCache cache(2);
  CHECK_FALSE(cache.Find(keys, table, map, 64).has_value());
  const KeyPlan plan = PlanKeys(keys, table, map, 64);
  cache.Remember(keys, table, map, 64, plan);
  const std::optional<KeyPlan> found = cache.Find(keys, table, map, 64);
  REQUIRE(found.has_value());
  CheckSamePlan(*found, plan);
  // Anything different misses: a key, the table, the map, the request size, the length.
  std::vector<uint64_t> other = keys;
  other[500] ^= 1;
  CHECK_FALSE(cache.Find(other, table, map, 64).has_value());
  CHECK_FALSE(cache.Find(keys, NameHash("u"), map, 64).has_value());
  std::vector<uint32_t> moved = map;
  moved[3] = 2;
  CHECK_FALSE(cache.Find(keys, table, moved, 64).has_value());
  CHECK_FALSE(cache.Find(keys, table, map, 65).has_value());
  CHECK_FALSE(
      cache.Find(absl::MakeConstSpan(keys.data(), keys.size() - 1), table, map, 64).has_value());
  // The most recent `capacity` are kept.
  cache.Remember(other, table, map, 64, PlanKeys(other, table, map, 64));
  CHECK(cache.Find(keys, table, map, 64).has_value());
  std::vector<uint64_t> third = keys;
  third[0] ^= 2;
  cache.Remember(third, table, map, 64, PlanKeys(third, table, map, 64));
  CHECK_FALSE(cache.Find(keys, table, map, 64).has_value());
  CHECK(cache.Find(other, table, map, 64).has_value());
  CHECK(cache.Find(third, table, map, 64).has_value());
  // Small calls are not worth it.
  const std::vector<uint64_t> few(keys.begin(), keys.begin() + PlanCache::kMinKeys - 1);
  cache.Remember(few, table, map, 64, PlanKeys(few, table, map, 64));
  CHECK_FALSE(cache.Find(few, table, map, 64).has_value());
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

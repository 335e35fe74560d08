#include "server/task_pool.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace ps {
namespace server {
namespace {

TEST_CASE("every task of a batch runs exactly once", "[server][task_pool]") {
  const int threads = GENERATE(0, 1, 3);
  const size_t count = GENERATE(0, 1, 2, 7, 100);
  TaskPool pool(threads);
  std::vector<std::atomic<int>> runs(count);
  pool.RunAll(count, [&](size_t i) { runs[i].fetch_add(1); });
  for (size_t i = 0; i < count; ++i) CHECK(runs[i].load() == 1);
}

TEST_CASE("tasks run on the pool's threads and the caller's", "[server][task_pool]") {
  TaskPool pool(2);
  // Each task waits until three have started, which only three threads side by side can reach:
  // the caller's and both of the pool's.
  absl::Mutex mu;
  int started = 0;
  std::set<std::thread::id> ids;
  pool.RunAll(3, [&](size_t) {
    absl::MutexLock lock(&mu);
    ++started;
    ids.insert(std::this_thread::get_id());
    mu.Await(absl::Condition(
        +[](int* n) { return *n >= 3; }, &started));
  });
  CHECK(ids.size() == 3);
  CHECK(ids.count(std::this_thread::get_id()) == 1);
}

TEST_CASE("batches of several callers share the pool", "[server][task_pool]") {
  TaskPool pool(2);
  constexpr int kCallers = 4;
  constexpr size_t kTasks = 50;
  std::vector<std::vector<int>> hits(kCallers, std::vector<int>(kTasks, 0));
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 20; ++round) {
        pool.RunAll(kTasks, [&, c](size_t i) { ++hits[c][i]; });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (int c = 0; c < kCallers; ++c) {
    for (size_t i = 0; i < kTasks; ++i) CHECK(hits[c][i] == 20);
  }
}

TEST_CASE("groups cover every item once, in order, each at least the minimum weight but the last",
          "[server][task_pool]") {
  const int threads = GENERATE(0, 1, 3);
  const uint64_t min_weight = GENERATE(1, 10, 1000);
  std::mt19937 rng(99);
  for (int round = 0; round < 20; ++round) {
    const size_t items = rng() % 12;
    std::vector<uint64_t> weights(items);
    uint64_t total = 0;
    for (uint64_t& w : weights) total += (w = rng() % 50);
    TaskPool pool(threads);
    absl::Mutex mu;
    std::vector<std::tuple<size_t, size_t, uint64_t>> groups;
    pool.RunGroups(
        items, [&](size_t i) { return weights[i]; }, total, min_weight,
        [&](size_t first, size_t end, uint64_t first_weight) {
          absl::MutexLock lock(&mu);
          groups.emplace_back(first, end, first_weight);
        });
    std::sort(groups.begin(), groups.end());
    REQUIRE(!groups.empty());
    CHECK(groups.size() <= static_cast<size_t>(threads) + 1);
    if (threads == 0 || items <= 1 || total < 2 * min_weight) CHECK(groups.size() == 1);
    size_t next = 0;
    uint64_t before = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto [first, end, first_weight] = groups[g];
      CHECK(first == next);
      CHECK(first_weight == before);
      for (size_t i = first; i < end; ++i) before += weights[i];
      if (g + 1 < groups.size()) CHECK(before - first_weight >= min_weight);
      next = end;
    }
    CHECK(next == items);
  }
}

}  // namespace
}  // namespace server
}  // namespace ps

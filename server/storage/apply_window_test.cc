#include "server/storage/apply_window.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace ps {
namespace server {
namespace {

using Verdict = ApplyWindow::Verdict;

TEST_CASE("in-order sequences apply once", "[storage][apply_window]") {
  ApplyWindow window;
  for (uint64_t s = 1; s <= 5000; ++s) {
    REQUIRE(window.Admit(3, s) == Verdict::kApply);
    REQUIRE(window.Admit(3, s) == Verdict::kDuplicate);
    if (s > 1) REQUIRE(window.Admit(3, s - 1) == Verdict::kDuplicate);
  }
  CHECK(window.Admit(3, 5000 - 1024) == Verdict::kDuplicate);  // the oldest still in the window
  CHECK(window.Admit(3, 5000 - 1025) == Verdict::kTooOld);
  CHECK(window.Admit(3, 0) == Verdict::kTooOld);
  CHECK(window.num_workers() == 1);
}

TEST_CASE("out-of-order sequences within the window apply once", "[storage][apply_window]") {
  ApplyWindow window;
  CHECK(window.Admit(1, 10) == Verdict::kApply);
  CHECK(window.Admit(1, 7) == Verdict::kApply);  // older, never seen
  CHECK(window.Admit(1, 7) == Verdict::kDuplicate);
  CHECK(window.Admit(1, 1) == Verdict::kApply);
  CHECK(window.Admit(1, 12) == Verdict::kApply);
  CHECK(window.Admit(1, 11) == Verdict::kApply);
  CHECK(window.Admit(1, 10) == Verdict::kDuplicate);  // was the highest, now in the bitmap
  CHECK(window.Admit(1, 8) == Verdict::kApply);
  CHECK(window.Admit(1, 9) == Verdict::kApply);
  for (uint64_t s : {1, 7, 8, 9, 10, 11, 12}) CHECK(window.Admit(1, s) == Verdict::kDuplicate);
}

// Concurrent requests of one client arrive shuffled within a span smaller than the window, and
// each is retried a few times: exactly the first arrival of each sequence applies.
TEST_CASE("shuffled arrivals with retries apply each sequence exactly once",
          "[storage][apply_window]") {
  const int span = GENERATE(2, 64, 1000);
  CAPTURE(span);
  std::mt19937_64 rng(span);
  std::vector<uint64_t> arrivals;
  for (uint64_t s = 1; s <= 20000; ++s) {
    for (uint64_t r = 0, retries = rng() % 3; r <= retries; ++r) arrivals.push_back(s);
  }
  // Shuffle within consecutive windows of `span` arrivals.
  for (size_t begin = 0; begin < arrivals.size(); begin += span) {
    const size_t end = std::min(arrivals.size(), begin + span);
    std::shuffle(arrivals.begin() + begin, arrivals.begin() + end, rng);
  }
  ApplyWindow window;
  std::set<uint64_t> applied;
  for (uint64_t s : arrivals) {
    const Verdict v = window.Admit(9, s);
    REQUIRE(v != Verdict::kTooOld);
    REQUIRE((v == Verdict::kApply) == applied.insert(s).second);
  }
  CHECK(applied.size() == 20000);
}

TEST_CASE("workers have separate windows", "[storage][apply_window]") {
  ApplyWindow window;
  for (uint32_t w = 0; w < 1000; ++w) REQUIRE(window.Admit(w, 5) == Verdict::kApply);
  for (uint32_t w = 0; w < 1000; ++w) REQUIRE(window.Admit(w, 5) == Verdict::kDuplicate);
  CHECK(window.Admit(0xFFFFFFFF, 1) == Verdict::kApply);
  CHECK(window.Admit(7, 100000) == Verdict::kApply);
  CHECK(window.Admit(7, 5) == Verdict::kTooOld);
  CHECK(window.Admit(8, 4) == Verdict::kApply);  // worker 7 moving on does not affect worker 8
  CHECK(window.num_workers() == 1001);
}

TEST_CASE("the window slides by more than its size", "[storage][apply_window]") {
  const uint64_t jump = GENERATE(uint64_t{1023}, uint64_t{1024}, uint64_t{1025}, uint64_t{64},
                                 uint64_t{65}, uint64_t{1} << 40);
  CAPTURE(jump);
  ApplyWindow window;
  for (uint64_t s = 1; s <= 100; s += 3) REQUIRE(window.Admit(2, s) == Verdict::kApply);
  const uint64_t top = 100 + jump;
  REQUIRE(window.Admit(2, top) == Verdict::kApply);
  for (uint64_t s = 1; s <= 100; ++s) {
    const bool admitted = (s - 1) % 3 == 0;
    const bool in_window = top - s <= ApplyWindow::kWindow;
    const Verdict expected = !in_window ? Verdict::kTooOld
                             : admitted ? Verdict::kDuplicate
                                        : Verdict::kApply;
    INFO("sequence " << s);
    REQUIRE(window.Admit(2, s) == expected);
  }
  // Sequences between the old and the new highest were never seen.
  if (jump > 1) CHECK(window.Admit(2, top - 1) == Verdict::kApply);
  CHECK(window.Admit(2, top) == Verdict::kDuplicate);
  CHECK(window.Admit(2, UINT64_MAX) == Verdict::kApply);
  CHECK(window.Admit(2, UINT64_MAX) == Verdict::kDuplicate);
  CHECK(window.Admit(2, top) == Verdict::kTooOld);
}

}  // namespace
}  // namespace server
}  // namespace ps

#include "server/coordinator/wait_list.h"

#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "catch2/catch.hpp"

namespace ps {
namespace coordinator {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

// A wait for `*ready`, recording its answer in `*answer`.
WaitPoll WaitFor(const bool* ready, std::optional<absl::StatusOr<int>>* answer) {
  return MakeWaitPoll<int>(
      [ready](bool expired) -> std::optional<absl::StatusOr<int>> {
        if (*ready) return 7;
        if (!expired) return std::nullopt;
        return absl::DeadlineExceededError("not ready");
      },
      [answer](absl::StatusOr<int> result) { *answer = std::move(result); });
}

TEST_CASE("wait list: a wait is answered once it can be, after the caller runs it", "[wait_list]") {
  WaitList waits;
  bool ready = false;
  std::optional<absl::StatusOr<int>> answer;
  const WaitId id = waits.NewId();
  waits.Add(id, kStart + absl::Seconds(5), WaitFor(&ready, &answer));
  Completions out;
  waits.PollAll(&out);
  CHECK(out.empty());
  CHECK(waits.size() == 1);
  ready = true;
  waits.PollAll(&out);
  REQUIRE(out.size() == 1);
  CHECK(waits.size() == 0);
  CHECK_FALSE(answer.has_value());  // answers run only when the caller runs them
  RunAll(&out);
  CHECK(out.empty());
  REQUIRE(answer.has_value());
  CHECK(**answer == 7);
  CHECK_FALSE(waits.Cancel(id, &out));  // no longer pending
}

TEST_CASE("wait list: deadlines, cancel and shutdown each end a wait", "[wait_list]") {
  WaitList waits;
  bool ready = false;
  std::optional<absl::StatusOr<int>> early, late, cancelled, shut;
  const WaitId first = waits.NewId();
  const WaitId second = waits.NewId();
  const WaitId third = waits.NewId();
  const WaitId fourth = waits.NewId();
  CHECK(first < second);
  waits.Add(first, kStart + absl::Seconds(1), WaitFor(&ready, &early));
  waits.Add(second, kStart + absl::Seconds(9), WaitFor(&ready, &late));
  waits.Add(third, kStart + absl::Seconds(9), WaitFor(&ready, &cancelled));
  waits.Add(fourth, kStart + absl::Seconds(9), WaitFor(&ready, &shut));
  CHECK(waits.EarliestDeadline(kStart + absl::Seconds(5)) == kStart + absl::Seconds(1));
  CHECK(waits.EarliestDeadline(kStart) == kStart);

  Completions out;
  waits.Expire(kStart + absl::Seconds(1), &out);
  RunAll(&out);
  REQUIRE(early.has_value());
  CHECK(early->status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(waits.size() == 3);

  CHECK(waits.Cancel(third, &out));
  RunAll(&out);
  REQUIRE(cancelled.has_value());
  CHECK(cancelled->status().code() == absl::StatusCode::kCancelled);

  waits.EndAll(&out);
  RunAll(&out);
  CHECK(waits.size() == 0);
  REQUIRE(late.has_value());
  CHECK(late->status().code() == absl::StatusCode::kUnavailable);
  REQUIRE(shut.has_value());
  CHECK(shut->status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("AwaitAnswer blocks until the answer comes, from another thread too", "[wait_list]") {
  std::thread answerer;
  const absl::StatusOr<std::string> answer = AwaitAnswer<std::string>(
      [&](auto done) { answerer = std::thread([done] { done(std::string("here")); }); });
  answerer.join();
  REQUIRE(answer.ok());
  CHECK(*answer == "here");
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

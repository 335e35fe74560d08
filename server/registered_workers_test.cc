#include "server/registered_workers.h"

#include <catch2/catch.hpp>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"

namespace ps {
namespace server {
namespace {

rpc::MemberIds Range(uint32_t first, uint32_t next) {
  rpc::MemberIds ids;
  ids.set_first_member_id(first);
  ids.set_next_member_id(next);
  return ids;
}

// A coordinator whose answers the test gives by hand: each question waits in `questions` with
// the range as it was when asked, until Answer().
struct HandCoordinator {
  RegisteredWorkers::FetchFn Fetch() {
    return [this](std::function<void(absl::StatusOr<rpc::MemberIds>)> done) {
      questions.push_back({issued, std::move(done)});
    };
  }
  // Answers the oldest question with the range issued when it was asked.
  void Answer() {
    REQUIRE(!questions.empty());
    auto [ids, done] = std::move(questions.front());
    questions.pop_front();
    done(ids);
  }
  rpc::MemberIds issued = Range(1, 1);
  std::deque<std::pair<rpc::MemberIds, std::function<void(absl::StatusOr<rpc::MemberIds>)>>>
      questions;
};

// Collects a Check's answer.
struct Outcome {
  std::function<void(absl::Status)> Callback() {
    return [this](absl::Status s) { status = std::move(s); };
  }
  std::optional<absl::Status> status;
};

TEST_CASE("issued ids pass, others are refused PERMISSION_DENIED naming the id",
          "[server][registered_workers]") {
  rpc::MemberIds issued = Range(1, 4);
  RegisteredWorkers workers([&](auto done) { done(issued); });
  CHECK_FALSE(workers.Known(2));

  Outcome first;
  workers.Check(2, first.Callback());
  REQUIRE(first.status.has_value());
  CHECK(first.status->ok());
  CHECK(workers.fetches() == 1);
  // Now known: answered without asking again.
  CHECK(workers.Known(1));
  CHECK(workers.Known(3));
  Outcome known;
  workers.Check(3, known.Callback());
  CHECK(known.status->ok());
  CHECK(workers.fetches() == 1);

  Outcome stranger;
  workers.Check(4000000000u, stranger.Callback());
  REQUIRE(stranger.status.has_value());
  CHECK(stranger.status->code() == absl::StatusCode::kPermissionDenied);
  CHECK(absl::StrContains(stranger.status->message(),
                          "worker_id 4000000000 was never registered with the coordinator"));
  CHECK(absl::StrContains(stranger.status->message(), "member ids 1 to 3"));
  CHECK(absl::StrContains(stranger.status->message(), "Coordinator.Register"));
  CHECK(workers.fetches() == 2);

  // 0 is no id: refused without asking.
  Outcome none;
  workers.Check(0, none.Callback());
  CHECK(none.status->code() == absl::StatusCode::kPermissionDenied);
  CHECK(workers.fetches() == 2);
  CHECK_FALSE(workers.Known(0));
}

TEST_CASE("a job restored from a checkpoint refuses the ids below its first",
          "[server][registered_workers]") {
  RegisteredWorkers workers([](auto done) { done(Range(40, 42)); });
  Outcome old, current;
  workers.Check(39, old.Callback());
  workers.Check(41, current.Callback());
  CHECK(old.status->code() == absl::StatusCode::kPermissionDenied);
  CHECK(absl::StrContains(old.status->message(), "member ids 40 to 41"));
  CHECK(current.status->ok());
}

TEST_CASE("requests waiting on one question are answered together",
          "[server][registered_workers]") {
  HandCoordinator coordinator;
  RegisteredWorkers workers(coordinator.Fetch());
  coordinator.issued = Range(1, 8);
  std::vector<Outcome> outcomes(100);
  for (Outcome& o : outcomes) workers.Check(7, o.Callback());
  CHECK(coordinator.questions.size() == 1);
  for (const Outcome& o : outcomes) CHECK_FALSE(o.status.has_value());
  coordinator.Answer();
  for (const Outcome& o : outcomes) {
    REQUIRE(o.status.has_value());
    CHECK(o.status->ok());
  }
  CHECK(workers.fetches() == 1);
}

TEST_CASE("a worker that registered while a question was in flight is asked about again",
          "[server][registered_workers]") {
  HandCoordinator coordinator;
  RegisteredWorkers workers(coordinator.Fetch());
  coordinator.issued = Range(1, 5);
  Outcome four;
  workers.Check(4, four.Callback());
  // Worker 5 registers after that question was asked, and pushes before it is answered.
  coordinator.issued = Range(1, 6);
  Outcome five;
  workers.Check(5, five.Callback());
  coordinator.Answer();  // [1, 5): covers 4, not 5
  CHECK(four.status->ok());
  CHECK_FALSE(five.status.has_value());
  REQUIRE(coordinator.questions.size() == 1);
  coordinator.Answer();  // [1, 6)
  REQUIRE(five.status.has_value());
  CHECK(five.status->ok());
  CHECK(workers.fetches() == 2);
}

TEST_CASE("a coordinator that cannot be asked gives UNAVAILABLE, and is asked again next time",
          "[server][registered_workers]") {
  bool reachable = false;
  RegisteredWorkers workers([&](auto done) {
    if (reachable) {
      done(Range(1, 3));
    } else {
      done(absl::UnavailableError("connection refused"));
    }
  });
  Outcome away;
  workers.Check(2, away.Callback());
  CHECK(away.status->code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(away.status->message(), "cannot check worker_id 2"));
  CHECK(absl::StrContains(away.status->message(), "connection refused"));
  reachable = true;
  Outcome back;
  workers.Check(2, back.Callback());
  CHECK(back.status->ok());
  CHECK(workers.fetches() == 2);
}

// The coordinator answers on a thread of its own, as gRPC does, while many threads check.
TEST_CASE("concurrent checks get the right answers", "[server][registered_workers]") {
  absl::Mutex mu;
  std::deque<std::function<void(absl::StatusOr<rpc::MemberIds>)>> questions;
  bool stop = false;
  std::thread answerer([&] {
    absl::MutexLock lock(&mu);
    while (true) {
      auto ready = [&] { return stop || !questions.empty(); };
      mu.Await(absl::Condition(&ready));
      if (questions.empty()) return;
      auto done = std::move(questions.front());
      questions.pop_front();
      mu.Unlock();
      done(Range(1, 100));
      mu.Lock();
    }
  });
  {
    RegisteredWorkers workers([&](auto done) {
      absl::MutexLock lock(&mu);
      questions.push_back(std::move(done));
    });
    constexpr int kThreads = 4;
    constexpr int kChecks = 2000;
    std::vector<int> wrong(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(77 + t);
        absl::Mutex answered_mu;
        int answered = 0;
        for (int i = 0; i < kChecks; ++i) {
          const uint32_t id = rng() % 150;
          const bool issued = id >= 1 && id < 100;
          workers.Check(id, [&, issued](absl::Status s) {
            absl::MutexLock lock(&answered_mu);
            if (s.ok() != issued || (!s.ok() && s.code() != absl::StatusCode::kPermissionDenied)) {
              ++wrong[t];
            }
            ++answered;
          });
        }
        absl::MutexLock lock(&answered_mu);
        auto all = [&] { return answered == kChecks; };
        answered_mu.Await(absl::Condition(&all));
      });
    }
    for (std::thread& th : threads) th.join();
    for (int w : wrong) CHECK(w == 0);
  }  // waits for a question in flight
  {
    absl::MutexLock lock(&mu);
    stop = true;
  }
  answerer.join();
}

}  // namespace
}  // namespace server
}  // namespace ps

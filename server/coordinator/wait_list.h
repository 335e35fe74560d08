// The coordinator's pending waits (for the shard map, clocks, rendezvous keys): each has a
// deadline and a poll that says, under the coordinator's lock, whether it can be answered yet;
// answers run after the lock is released.
#ifndef PS_SERVER_COORDINATOR_WAIT_LIST_H_
#define PS_SERVER_COORDINATOR_WAIT_LIST_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace ps {
namespace coordinator {

// Identifies a pending wait, for CancelWait. Never reused within a coordinator's life.
using WaitId = uint64_t;

// Closures that answer waits; run them (RunAll) after the lock is released.
using Completions = std::vector<std::function<void()>>;

// Runs and clears `completions`.
void RunAll(Completions* completions);

// How a wait is being looked at.
enum class WaitEnd { kCheck, kDeadline, kCancelled, kShutdown };

// Returns the closure that answers a wait, or an empty function when `end` is kCheck and the wait
// cannot be answered yet.
using WaitPoll = std::function<std::function<void()>(WaitEnd)>;

// A wait's poll from `decide`, called with whether the deadline has passed, which returns the
// answer or nullopt (only before the deadline: a decide that gives no answer at its deadline
// aborts the process, as a broken invariant); `done` gets the answer, CANCELLED on kCancelled or
// UNAVAILABLE on kShutdown.
template <typename T>
WaitPoll MakeWaitPoll(std::function<std::optional<absl::StatusOr<T>>(bool expired)> decide,
                      std::function<void(absl::StatusOr<T>)> done) {
  return [decide = std::move(decide),
          done = std::move(done)](WaitEnd end) mutable -> std::function<void()> {
    std::optional<absl::StatusOr<T>> result;
    switch (end) {
      case WaitEnd::kCancelled:
        result = absl::CancelledError("wait cancelled");
        break;
      case WaitEnd::kShutdown:
        result = absl::UnavailableError("coordinator is shutting down");
        break;
      case WaitEnd::kCheck:
        result = decide(false);
        break;
      case WaitEnd::kDeadline:
        result = decide(true);
        if (!result.has_value()) {
          std::fprintf(stderr, "coordinator: a waiter gave no answer at its deadline\n");
          std::abort();
        }
        break;
    }
    if (!result.has_value()) return nullptr;
    return [done = std::move(done), result = std::move(*result)]() mutable {
      done(std::move(result));
    };
  };
}

// Blocks until `start(done)` calls `done`, and returns what it was given: the blocking form of
// an asynchronous call.
template <typename T, typename Start>
absl::StatusOr<T> AwaitAnswer(Start start) {
  absl::Notification notification;
  std::optional<absl::StatusOr<T>> result;
  start([&](absl::StatusOr<T> r) {
    result = std::move(r);
    notification.Notify();
  });
  notification.WaitForNotification();
  return std::move(*result);
}

// A WaitList holds the pending waits of a coordinator, by id. Thread-compatible (the coordinator
// calls it under its lock).
class WaitList {
 public:
  // A new id (from 1, never reused).
  WaitId NewId() { return next_id_++; }

  // Adds wait `id` (from NewId), pending until `deadline`.
  void Add(WaitId id, absl::Time deadline, WaitPoll poll);

  // Answers (into `out`, removing them) the waits that can be answered now.
  void PollAll(Completions* out);

  // Answers (into `out`, removing them) the waits whose deadline is at or before `now`.
  void Expire(absl::Time now, Completions* out);

  // Answers wait `id` with CANCELLED (into `out`) and removes it; false when it is not pending.
  bool Cancel(WaitId id, Completions* out);

  // Answers every wait with UNAVAILABLE (into `out`) and removes them all.
  void EndAll(Completions* out);

  // The earliest deadline, or `limit` when it is earlier or nothing is pending.
  absl::Time EarliestDeadline(absl::Time limit) const;

  size_t size() const { return waits_.size(); }

 private:
  struct Wait {
    absl::Time deadline;
    WaitPoll poll;
  };

  WaitId next_id_ = 1;
  std::map<WaitId, Wait> waits_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_WAIT_LIST_H_

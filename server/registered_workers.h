// Which worker ids a server accepts pushes from: the member ids the coordinator handed out with
// Register (proto/ps.proto, "worker_id").
//
// Member ids are given in increasing order and never reused within a coordinator's life, a
// restart from its data_dir included, so the ids it has issued are exactly a range [first, next)
// (Coordinator.GetMemberIds). A server keeps the latest range it heard of: a known id costs one
// atomic load. An id at or above the range may belong to a member that registered since, so the
// server asks the coordinator again, once for every request waiting on it, and answers from
// that. Every server asks on its own, so a replica promoted to primary accepts the same workers.
#ifndef PS_SERVER_REGISTERED_WORKERS_H_
#define PS_SERVER_REGISTERED_WORKERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"

namespace ps {
namespace server {

// RegisteredWorkers decides whether a request's worker_id was issued by the coordinator.
// Thread-safe.
class RegisteredWorkers {
 public:
  // Asks the coordinator for its MemberIds and calls `done` once with them or the call's error,
  // on any thread, possibly before returning (CoordinatorClient::GetMemberIdsAsync).
  using FetchFn = std::function<void(std::function<void(absl::StatusOr<rpc::MemberIds>)> done)>;

  explicit RegisteredWorkers(FetchFn fetch);
  // Waits for a question to the coordinator in flight.
  ~RegisteredWorkers();

  RegisteredWorkers(const RegisteredWorkers&) = delete;
  RegisteredWorkers& operator=(const RegisteredWorkers&) = delete;

  // Whether `worker_id` is in the range known so far: a member id the coordinator issued. Never
  // blocks; 0 is never known.
  bool Known(uint32_t worker_id) const;

  // Calls done(OK) if `worker_id` was issued: at once when it is Known, else after the
  // coordinator answered a question asked after this call. Otherwise, once the coordinator
  // answered: done(PERMISSION_DENIED) naming the id and the range issued; done(PERMISSION_DENIED)
  // at once for 0 (no id); done(UNAVAILABLE) when the coordinator could not be asked (retryable).
  // `done` runs on the caller's thread or on the thread of the coordinator's answer, without any
  // lock of this class held.
  void Check(uint32_t worker_id, std::function<void(absl::Status)> done);

  // How many times the coordinator was asked (for tests).
  uint64_t fetches() const { return fetches_.load(std::memory_order_relaxed); }

 private:
  struct Waiter {
    uint32_t worker_id;
    std::function<void(absl::Status)> done;
  };

  // The coordinator's answer to the question in flight.
  void Fetched(absl::StatusOr<rpc::MemberIds> ids);
  // Asks the coordinator (fetching_ was set by the caller).
  void StartFetch();

  // Constant after construction.
  const FetchFn fetch_;

  // first << 32 | next of the latest range heard of; 0 (empty) before the first answer.
  std::atomic<uint64_t> range_{0};
  std::atomic<uint64_t> fetches_{0};

  absl::Mutex mu_;
  // Whether a question is in flight.
  bool fetching_ ABSL_GUARDED_BY(mu_) = false;
  // Waiting for the question in flight (they arrived before it was asked).
  std::vector<Waiter> asked_ ABSL_GUARDED_BY(mu_);
  // Arrived while it was in flight: its answer may predate their worker's Register, so an id it
  // does not cover is asked about again.
  std::vector<Waiter> next_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_REGISTERED_WORKERS_H_

// One Pull or Push call of the client in flight: its plan, its requests, what each request
// carries and what its answer brings back, and the rounds of a call (send, wait for every
// request, finish or retry what failed for a retryable reason after a backoff, with the same
// sequence numbers). The client (client/ps_client.cc) routes and sends; a SparseCall decides.
// Private to the client library.
#ifndef PS_CLIENT_INTERNAL_SPARSE_CALL_H_
#define PS_CLIENT_INTERNAL_SPARSE_CALL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/internal/key_router.h"
#include "client/internal/routing.h"
#include "client/internal/server_link.h"
#include "client/internal/server_transport.h"
#include "client/push_ticket.h"

namespace ps {
namespace client_internal {

// A table as the client routes it.
struct TableInfo {
  std::string name;
  uint32_t dim = 0;
  uint64_t name_hash = 0;  // NameHash(name)
};

// Whether a request or call that ended with `status` is worth retrying: UNAVAILABLE,
// DEADLINE_EXCEEDED, and FAILED_PRECONDITION (a stale shard map: retried after refreshing it).
bool IsRetryable(const absl::Status& status);

// A SparseCall is one Pull or Push call. Its caller fills the fields before Plan; from then on
// the round state is guarded by its mutex. Thread-safe for the methods that say so; the others
// are called by one thread at a time (the one starting the call or a round).
class SparseCall {
 public:
  enum class Kind { kPull, kPush };

  // One request of the call, to one server; kept whole across retries (same sequence number).
  struct Request final : Exchange {
    Part part;
    uint64_t sequence = 0;
    uint64_t routed_version = 0;
    // While in flight: the call (whose Host hears the answer), and the server's link.
    std::shared_ptr<SparseCall> call;
    std::shared_ptr<ServerLink> link;

    void WritePayload(char* keys, char* grads) const override;
    void OnDone(const grpc::Status& status) override;
  };

  // Hears every request's end. Called once per started request, on the thread Exchange::OnDone
  // names; request->call is still set.
  class Host {
   public:
    virtual void OnAnswer(Request* request, const grpc::Status& status) = 0;

   protected:
    ~Host() = default;
  };

  // What EndRound decided: finish the call with `status`, or (`retry` not empty) resend `retry`
  // at `when`; `last_retryable` is the error that made them fail last.
  struct Next {
    absl::Status status;
    std::vector<std::unique_ptr<Request>> retry;
    absl::Time when;
    absl::Status last_retryable;
  };

  // The backoff before the first retry, and its cap (it doubles every round).
  static constexpr absl::Duration kFirstBackoff = absl::Milliseconds(5);
  static constexpr absl::Duration kMaxBackoff = absl::Seconds(1);

  // Set before Plan.
  Kind kind = Kind::kPull;
  Host* host = nullptr;
  const TableInfo* table = nullptr;
  int64_t clock = -1;
  absl::Span<const uint64_t> keys;
  absl::Span<float> values;       // pull
  absl::Span<const float> grads;  // push
  std::function<void(absl::Status)> done;
  // The thread that started the call blocks until `done` has run (Pull, Push).
  bool caller_waits = false;
  // When retrying stops.
  absl::Time deadline = absl::InfiniteFuture();
  // A push: the routing it was planned with, and the first of its sequences (its requests are
  // numbered first_sequence, first_sequence + 1, ... in plan order; 0 before they are).
  std::shared_ptr<const Routing> routing;
  uint64_t first_sequence = 0;
  // A push made again (Client::RetryPush): the ticket it resends.
  std::shared_ptr<const PushTicket> retry_of;

  // Plans the call's keys over `owners` (the server of each shard), at most `max_keys_per_request`
  // keys a request, and for a push sums the gradients of repeated keys. With `cache` (not owned),
  // takes the plan of a recent call on the same keys from it, or remembers this one's there.
  // INVALID_ARGUMENT, naming the table, for a push with a NaN or Inf gradient (nothing planned to
  // be sent). OK otherwise.
  absl::Status Plan(absl::Span<const uint32_t> owners, uint32_t max_keys_per_request,
                    PlanCache* cache = nullptr);

  // The planned requests, without sequence numbers (a push numbers them); the plan keeps the
  // keys. Empty for a call without keys. Call once, after Plan.
  std::vector<std::unique_ptr<Request>> TakeRequests();

  // A push made again: the requests of `ticket` (planned, as Plan does, with the same keys),
  // each with its sequence and its keys regrouped by the servers of `shard_to_server`.
  // INVALID_ARGUMENT when the ticket's runs do not cover the call's keys of each shard exactly
  // (other keys). Call once, after Plan, instead of TakeRequests.
  absl::StatusOr<std::vector<std::unique_ptr<Request>>> RequestsOf(
      const PushTicket& ticket, absl::Span<const uint32_t> shard_to_server);

  // The ticket of this push from worker `worker_id`: retry_of's when it was made again, else
  // which sequence carried which keys (planned again with `routing`, as the call was). Call only
  // for a push whose requests were numbered; O(keys).
  PushTicket Ticket(uint32_t worker_id) const;

  // Writes `request`'s small fields for a request routed with map `map_version` from worker
  // `worker_id`: header, table, runs; and its sizes (Exchange's key_bytes, grad_bytes,
  // answer_bytes, num_keys).
  void Describe(Request* request, uint64_t map_version, uint32_t worker_id) const;

  // Uses the answer of `request` (its response_bytes, after an OK end): a pull's rows are
  // scattered to every position of their keys in `values` (read from its slot when the server
  // wrote them there). INTERNAL for an answer that does not parse or has the wrong size.
  absl::Status TakeAnswer(Request* request);

  // Counts `n` more requests in flight. Thread-safe.
  void Sent(int n);
  // Records the end of a request in flight with `status`: a retryable failure keeps it for the
  // next round, any other request is freed here (before the call can finish); the first
  // non-retryable error becomes the call's. Returns whether no request is in flight any more:
  // the caller then calls EndRound. Thread-safe.
  bool Record(std::unique_ptr<Request> request, const absl::Status& status);
  // Decides, once no request is in flight, at time `now`: the first non-retryable error ends the
  // call with it; nothing to retry ends it OK; retries that would start after `deadline` end it
  // with the last retryable error; otherwise they are resent after the backoff, which doubles up
  // to kMaxBackoff. Requests not resent are freed before it returns.
  Next EndRound(absl::Time now);

  // `retry`'s parts regrouped by the servers of `shard_to_server` (a newer map), each keeping its
  // request's sequence. `retry` is emptied.
  static std::vector<std::unique_ptr<Request>> Reroute(
      std::vector<std::unique_ptr<Request>>* retry, absl::Span<const uint32_t> shard_to_server);

  const KeyPlan& plan() const { return plan_; }

 private:
  KeyPlan plan_;
  uint32_t max_keys_per_request_ = 1;
  // A push with repeated keys: summed gradients in unique order.
  std::vector<float> grad_sums_;
  absl::Duration backoff_ = kFirstBackoff;

  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<Request>> to_retry_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // a non-retryable error
  absl::Status last_retryable_ ABSL_GUARDED_BY(mu_);
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_SPARSE_CALL_H_

// The client's blocking calls that go to servers as plain RPCs, one per server: PullDense,
// PushDense (a dense tensor's chunks, proto/ps.proto rule 6) and EndStep (rule 8), each retried
// as a whole across failover. Private to the client library.
#ifndef PS_CLIENT_INTERNAL_DENSE_CALLS_H_
#define PS_CLIENT_INTERNAL_DENSE_CALLS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/internal/routing.h"
#include "proto/ps.pb.h"

namespace ps {
namespace client_internal {

// A dense tensor's chunks that go to one server in one request.
struct DenseRoute {
  uint32_t server = 0;
  std::vector<uint32_t> chunks;
};

// The chunks of a tensor of `total_floats` floats whose NameHash is `name_hash`, cut into chunks
// of `chunk_floats` (>= 1) floats, grouped by the server of their shard in `shard_to_server`,
// at most max(1, max_message_bytes / 2 / chunk bytes) chunks a request; in the order of their
// first chunk.
std::vector<DenseRoute> RouteDense(uint64_t name_hash, uint64_t total_floats,
                                   uint64_t chunk_floats, uint64_t max_message_bytes,
                                   absl::Span<const uint32_t> shard_to_server);

// DenseCalls makes a client's dense calls and EndStep. Thread-safe (its state is constant; the
// host's must be thread-safe too).
class DenseCalls {
 public:
  // What the calls need of the client.
  class Host {
   public:
    // The routing to use now.
    virtual std::shared_ptr<const Routing> CurrentRouting() const = 0;
    // Fetches a map newer than `routed_version`; whether the routing changed.
    virtual bool RefreshMap(uint64_t routed_version) = 0;
    // Server `server` answered UNAVAILABLE with `status` (perhaps it is gone).
    virtual void ReportUnavailable(uint32_t server, const absl::Status& status) = 0;

   protected:
    ~Host() = default;
  };

  struct Options {
    // The worker id pushes carry (RegisterResponse.member_id).
    uint32_t worker_id = 0;
    // job.cluster.dense_chunk_floats; >= 1.
    uint64_t chunk_floats = 1;
    // The largest request or response.
    uint64_t max_message_bytes = 64 << 20;
    // The job runs in sync mode (EndStep is sent).
    bool sync = false;
    // As ClientOptions'.
    absl::Duration retry_timeout = absl::Seconds(60);
    absl::Duration request_timeout = absl::Seconds(60);
  };

  // `host`, `clock` (the step requests carry) and `next_sequence` (the client's next push
  // sequence) must outlive this object.
  DenseCalls(const Options& options, Host* host, const std::atomic<int64_t>* clock,
             std::atomic<uint64_t>* next_sequence)
      : options_(options), host_(host), clock_(clock), next_sequence_(next_sequence) {}

  // As Client::PullDense.
  absl::Status Pull(absl::string_view name, absl::Span<float> values);
  // As Client::PushDense, `kind` ASSIGN or GRADIENT; takes one sequence per chunk.
  absl::Status Push(absl::string_view name, absl::Span<const float> values,
                    rpc::PushDenseRequest::Kind kind);
  // As Client::EndStep.
  absl::StatusOr<int64_t> EndStep(int64_t step);

  // Runs `attempt` with the current routing until it returns OK or a non-retryable error, or
  // retry_timeout would pass before the next try (then its last error); between tries waits a
  // backoff (5 ms, doubling up to 1 s) and refreshes the map, and returns a FAILED_PRECONDITION
  // at once when no newer map exists (the server refuses a shard: not a stale map).
  absl::Status Retry(const std::function<absl::Status(const Routing&)>& attempt);

 private:
  void FillHeader(const Routing& routing, rpc::RequestHeader* header) const;
  // Returns `status`, reporting server `server` first when it is UNAVAILABLE.
  absl::Status Reported(uint32_t server, absl::Status status) const;

  const Options options_;
  Host* const host_;
  const std::atomic<int64_t>* const clock_;
  std::atomic<uint64_t>* const next_sequence_;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_DENSE_CALLS_H_

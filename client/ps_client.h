// The C++ client of the parameter server: what applications (and the worker) link to push and pull
// parameters.
//
//   ps::ClientOptions options;
//   options.coordinator = "10.0.0.1:7000";
//   auto client = ps::Client::Connect(options);          // registers, fetches the shard map
//   std::vector<float> rows(keys.size() * dim);
//   absl::Status s = (*client)->Pull("user", keys, absl::MakeSpan(rows));
//   s = (*client)->Push("user", keys, grads);             // applied exactly once, even on retry
//   if (auto ticket = ps::PushTicket::FromStatus(s)) {    // failed: perhaps applied in part
//     s = (*client)->RetryPush(*ticket, "user", keys, grads);  // every part applied once
//   }
//
// A call dedupes its keys, groups them by shard and server, splits each server's part into
// requests that stay under the message limit, sends them to all servers in parallel over several
// channels, and retries what failed for a retryable reason (a server unavailable, a stale shard
// map) with the same sequence numbers, so a retried push is never applied twice.
#ifndef PS_CLIENT_PS_CLIENT_H_
#define PS_CLIENT_PS_CLIENT_H_

#include <grpcpp/security/credentials.h>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/push_ticket.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace ps {

class CoordinatorClient;  // common/coordinator_client.h

struct ClientOptions {
  // host:port of the coordinator, or several comma-separated ("a:1,b:2,c:3"): the job's
  // coordinators, of which the client follows the leader (CoordinatorClient). Required unless
  // coordinator_client is set.
  std::string coordinator;
  // A connection to the coordinators that the client uses instead of making its own from
  // `coordinator`: it registers, heartbeats (so the clocks reported through it go with the
  // heartbeats, CoordinatorClient::ReportClock) and asks for the shard map through it. Not owned:
  // it must outlive the client, which stops its heartbeats when destroyed; none may run when
  // Connect is called. Default null.
  CoordinatorClient* coordinator_client = nullptr;
  // How every channel (to the coordinator and the servers) authenticates: TLS and a bearer
  // token, as grpc_util::Security::ChannelCredentials() makes them from --tls_ca, --tls_cert,
  // --tls_key and --token_file. Default null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // How long Connect waits for the coordinator and a complete shard map. Default 60 s.
  absl::Duration connect_timeout = absl::Seconds(60);
  // gRPC channels (TCP connections) to each server; requests are spread over them. >= 1.
  int channels_per_server = 2;
  // Upper bound on the keys of one request; a call's keys for one server are split into requests
  // of at most this many keys, sent in parallel, so that the server's threads share the work and
  // transfer overlaps with lookups. >= 1.
  int max_keys_per_request = 32768;
  // Threads that start a call's requests beside the calling thread, which starts the first: each
  // request is encoded and written (under TLS, encrypted) by the thread that starts it, so a call
  // of many requests shares the cores instead of being bound by one. -1 (default): none on
  // machines of fewer than 4 cores, else half the cores, at most 8; 0: none, the calling thread
  // starts every request; at most 64.
  int send_threads = -1;
  // Pulls and pushes to a server on this host carry their keys, gradients and rows in shared
  // memory the server lends (proto/ps.proto rule 9) instead of through the socket; a server
  // elsewhere (or one that lends none: ps_server --shared_memory_mb=0) is reached through the
  // channel as always. false: always the channel.
  bool shared_memory = true;
  // With shared_memory: the pulls and pushes themselves are made in the shared memory (rule 10:
  // the request message written there and the server woken through a futex) rather than as RPCs
  // on the channel, when the server serves calls there. false: RPCs, with their payloads in
  // shared memory.
  bool shared_memory_calls = true;
  // Largest request or response in bytes; 0 takes the job's cluster.max_message_bytes.
  uint64_t max_message_bytes = 0;
  // How long a call keeps retrying retryable errors before it returns the last one. Default 60 s.
  absl::Duration retry_timeout = absl::Seconds(60);
  // Deadline of one request to a server. Default 60 s.
  absl::Duration request_timeout = absl::Seconds(60);
  // How this client registers with the coordinator: CLIENT, or WORKER with `rank` (-1: any).
  rpc::Role role = rpc::CLIENT;
  int rank = -1;
  // Called once, from the heartbeat thread, with the latest error when the coordinator has not
  // answered a heartbeat for `coordinator_lost_after` (CoordinatorClient::SetOnCoordinatorLost):
  // a daemon says so and exits. Default: none, heartbeats are retried for as long as the client
  // lives.
  std::function<void(const absl::Status&)> on_coordinator_lost;
  absl::Duration coordinator_lost_after = absl::Seconds(45);
  // Called once, from the heartbeat thread, when the coordinator answers a heartbeat saying that
  // the job failed (a worker failed; CoordinatorClient::SetOnJobFailed): a worker says why and
  // exits. Default: none, the client carries on (its calls fail once the servers are gone).
  std::function<void(const rpc::JobFailure&)> on_job_failed;
};

// How PushDense's values are used.
enum class DenseUpdate {
  kAssign,    // the values replace the tensor (the dense master copy)
  kGradient,  // the values are gradients, applied with the job's dense optimizer on the servers
};

// A Client is one connection to a parameter-server cluster. Thread-safe: any number of threads may
// call it concurrently. Destroying it waits for the calls in flight; a WORKER's client then tells
// the coordinator that the worker leaves the job (done: its silence is no failure), for up to a
// second.
class Client {
 public:
  using Callback = std::function<void(absl::Status)>;

  // Connects to the coordinator, registers, and waits for a complete shard map.
  // UNAVAILABLE if the coordinator cannot be reached or the map is not ready within
  // connect_timeout; INVALID_ARGUMENT for bad options (a bad coordinator list names the entry);
  // FAILED_PRECONDITION when heartbeats already run on options.coordinator_client; the
  // coordinator's error if registration is refused.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  virtual ~Client() = default;

  // The job the cluster runs (tables, cluster settings).
  virtual const config::Job& job() const = 0;
  // The id this client's pushes carry (its coordinator member id).
  virtual uint32_t worker_id() const = 0;
  // The rank the coordinator gave (workers), or -1.
  virtual int rank() const = 0;
  // Sync jobs restored from a checkpoint: the first step to train (the servers hold exactly the
  // steps before it); 0 otherwise.
  virtual int64_t start_step() const = 0;
  // The dim of `table`, or NOT_FOUND.
  virtual absl::StatusOr<uint32_t> Dim(absl::string_view table) const = 0;

  // Writes the rows of `keys` into `values` (dim floats per key, in the order of `keys`; keys may
  // repeat). Rows never pushed come from the table's initializer. NOT_FOUND for an unknown table;
  // INVALID_ARGUMENT if values.size() != keys.size() * dim; UNAVAILABLE (or another server error)
  // once retry_timeout has passed. On error `values` is unspecified.
  virtual absl::Status Pull(absl::string_view table, absl::Span<const uint64_t> keys,
                            absl::Span<float> values) = 0;

  // Applies `grads` (dim floats per key, in the order of `keys`) with the table's optimizer;
  // gradients of repeated keys are summed and applied once. Exactly once, also across the
  // client's own retries. NOT_FOUND for an unknown table; INVALID_ARGUMENT for lengths that
  // disagree or a NaN or Inf gradient (nothing applied, and no ticket); errors of servers as Pull.
  //
  // A Push goes to each server owning some of its keys in requests of their own. When it fails
  // after they were sent (a server unavailable past retry_timeout, a refusal, a lost shard),
  // some servers' parts may have been applied and others not: the status then carries a
  // PushTicket (PushTicket::FromStatus) naming the call. Calling Push again is a new push, which
  // applies the applied parts a second time; RetryPush with the ticket applies each part once.
  virtual absl::Status Push(absl::string_view table, absl::Span<const uint64_t> keys,
                            absl::Span<const float> grads) = 0;

  // Makes again the Push (or PushAsync, or RetryPush) that `ticket` names, with the same
  // `table`, `keys` and `grads`: every part is resent with its original sequence numbers, to the
  // servers owning its shards now, so that each shard applies its part exactly once (one that
  // had applied it answers it as a duplicate). OK once every part is applied (now or before);
  // on failure the same errors as Push, with the same ticket attached, to be tried again.
  // Refused with INVALID_ARGUMENT, nothing sent: a ticket of another client (another worker_id:
  // a ticket does not outlive the client that made it, nor work in another process), another
  // table, other keys or gradients (PushTicket::fingerprint), or a ticket too old: once this
  // client has numbered more than PushTicket::kWindow (1024) requests after the ticket's first
  // (each Push takes one per request, each PushDense one per chunk), a server can no longer
  // tell whether it applied it (proto/ps.proto rule 5). A push of this client running at the
  // same time may still push it past that window: the server then refuses its part
  // INVALID_ARGUMENT ("more than 1024 below"), not applied. NOT_FOUND for an unknown table.
  virtual absl::Status RetryPush(const PushTicket& ticket, absl::string_view table,
                                 absl::Span<const uint64_t> keys, absl::Span<const float> grads);

  // Reads the dense tensor `name` (values.size() floats). NOT_FOUND if it was never pushed.
  virtual absl::Status PullDense(absl::string_view name, absl::Span<float> values) = 0;

  // Assigns or applies gradients to the dense tensor `name`; its first push creates it with
  // values.size() floats. INVALID_ARGUMENT for a size that disagrees with the tensor's, NaN or Inf.
  virtual absl::Status PushDense(absl::string_view name, absl::Span<const float> values,
                                 DenseUpdate update) = 0;

  // Asynchronous variants: return at once; `done` is called exactly once, from a client thread,
  // with what the blocking call would return. keys, values and grads must stay valid until then.
  virtual void PullAsync(absl::string_view table, absl::Span<const uint64_t> keys,
                         absl::Span<float> values, Callback done) = 0;
  virtual void PushAsync(absl::string_view table, absl::Span<const uint64_t> keys,
                         absl::Span<const float> grads, Callback done) = 0;
  // RetryPush's; `ticket` is copied. The default (a client that cannot resend a push, such as
  // an in-process one that never fails in part) answers UNIMPLEMENTED.
  virtual void RetryPushAsync(const PushTicket& ticket, absl::string_view table,
                              absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                              Callback done);

  // Future-returning forms of the asynchronous calls.
  std::future<absl::Status> PullAsync(absl::string_view table, absl::Span<const uint64_t> keys,
                                      absl::Span<float> values);
  std::future<absl::Status> PushAsync(absl::string_view table, absl::Span<const uint64_t> keys,
                                      absl::Span<const float> grads);
  std::future<absl::Status> RetryPushAsync(const PushTicket& ticket, absl::string_view table,
                                           absl::Span<const uint64_t> keys,
                                           absl::Span<const float> grads);

  // Sync mode: tells every server that this worker has pushed everything of `step` (call it after
  // the step's pushes returned). A server applies the step's summed gradients once the job's
  // quorum of workers has ended it; pulls for step + 1 wait for that. Returns the newest step
  // applied on any server: above `step` when the cluster went on without this worker (a
  // straggler outside the quorum), which should then continue at that step + 1. Other modes: a
  // no-op returning -1. Errors of servers as Pull (a server that has not yet applied step - 1
  // answers UNAVAILABLE, retried like any other).
  virtual absl::StatusOr<int64_t> EndStep(int64_t step) = 0;

  // The step clock requests carry (the step a push belongs to, the step a pull serves); -1 (the
  // default) when the caller keeps no clock.
  virtual void SetClock(int64_t step) = 0;

  // The shard map this client routes with.
  virtual rpc::ShardMap shard_map() const = 0;
};

}  // namespace ps

#endif  // PS_CLIENT_PS_CLIENT_H_

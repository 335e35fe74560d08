// How a Pull or Push request reaches one server and its answer comes back: the seam between the
// client's planning, routing and retries (client/ps_client.cc, SparseCall) and the three ways to
// one server, each a ServerTransport:
//   - ChannelTransport (channel_transport.h): an RPC on one of the server's gRPC channels, the
//     keys and gradients in the message;
//   - SlotTransport (shared_transport.h): the same RPC, its keys, gradients and a pull's rows in a
//     slot of the region the server lent (proto/ps.proto rule 9);
//   - RegionCallTransport (shared_transport.h): the call itself made in that region (rule 10).
// ServerLink (server_link.h) picks one per server. Private to the client library.
#ifndef PS_CLIENT_INTERNAL_SERVER_TRANSPORT_H_
#define PS_CLIENT_INTERNAL_SERVER_TRANSPORT_H_

#include <grpcpp/client_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "client/internal/shared_region.h"
#include "proto/ps.pb.h"

namespace ps {
namespace client_internal {

// An Exchange is one request to one server and its answer, as a transport carries it: the caller
// sets the fields under "set by the caller" and starts it; the transport fills the rest and
// reports the end through OnDone. Thread-compatible; a transport touches it only between Start
// and OnDone.
class Exchange {
 public:
  virtual ~Exchange() = default;

  // Writes the request's keys (key_bytes) at `keys` and, for a push, its gradients (grad_bytes)
  // at `grads` (null for a pull). Called at most once per Start, on the thread that started it.
  virtual void WritePayload(char* keys, char* grads) const = 0;

  // The request ended with `status` (gRPC's, or that of a call made in a region, with the same
  // codes): when OK, response_bytes hold a PullResponse or PushResponse. Called exactly once per
  // Start, on a gRPC or region thread, or on the starting thread (before Start returns).
  virtual void OnDone(const grpc::Status& status) = 0;

  // Set by the caller.
  bool push = false;
  // The small fields: header, table and runs (a PullRequest's fields are a prefix of a
  // PushRequest's); the transports add `shared` when the payload goes in a slot.
  rpc::PushRequest fields;
  uint32_t num_keys = 0;
  // The payload's size: keys; gradients (push; 0 for a pull); the rows a pull's answer holds
  // (0 for a push), which a slot must have room for too.
  size_t key_bytes = 0;
  size_t grad_bytes = 0;
  size_t answer_bytes = 0;
  // The request's deadline at the server.
  absl::Time deadline = absl::InfiniteFuture();
  // The starting thread blocks until OnDone has run anyway: a call made in a region may be
  // waited for on it (SharedRegion::Call's wait_here).
  bool wait_here = false;
  // The server's address, for messages.
  const std::string* address = nullptr;

  // Set by the transport.
  grpc::ByteBuffer request_bytes;
  grpc::ByteBuffer response_bytes;
  // RPCs only: their context (a call made in a region has its deadline in the call).
  std::unique_ptr<grpc::ClientContext> context;
  // The slot holding the payload (slot -1: in the message), of `region`; whether the request was
  // made as a call in the region, and whether the server answered it there.
  std::shared_ptr<SharedRegion> region;
  int slot = -1;
  bool in_region = false;
  bool region_answered = false;
};

// The server an exchange went to, for messages: its peer as gRPC names it, or its address and
// "(in shared memory)".
std::string PeerOf(const Exchange& exchange);

// A ServerTransport carries exchanges to one server. Thread-safe: exchanges may be started from
// any number of threads at once.
class ServerTransport {
 public:
  virtual ~ServerTransport() = default;

  // Encodes `exchange` (its fields and payload) and starts it; exchange->OnDone runs exactly
  // once, with what the server answered, DEADLINE_EXCEEDED at exchange->deadline, or UNAVAILABLE
  // when the server cannot be reached. `exchange` must stay alive until then. Never fails
  // otherwise: a transport that cannot carry this exchange (no free slot, too large for a call
  // page) hands it to the one below it, down to the channel.
  virtual void Start(Exchange* exchange) = 0;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_SERVER_TRANSPORT_H_

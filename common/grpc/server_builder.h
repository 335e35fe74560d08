// The one way every daemon of the project builds and starts its gRPC server: the listen address,
// the credentials, message limits, channel arguments and interceptors in one struct, and the port
// it bound (or a clear error) back.
#ifndef PS_COMMON_GRPC_SERVER_BUILDER_H_
#define PS_COMMON_GRPC_SERVER_BUILDER_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {
namespace grpc_util {

// How a server is built.
struct ServerOptions {
  // "host:port" to listen on; port 0 picks a free port (reported back). Required.
  std::string listen_address;

  // Largest message received / sent, in bytes. Default -1: gRPC's default (4 MiB received, no
  // limit sent). Otherwise >= 0.
  int max_receive_message_bytes = -1;
  int max_send_message_bytes = -1;

  // Resource bounds, so that a flood or a stuck client cannot hold the server's memory or
  // connections forever. -1 (the default of each): gRPC's own default. Values < -1 or 0 (where
  // noted): INVALID_ARGUMENT.
  //
  // Concurrent calls on one connection (GRPC_ARG_MAX_CONCURRENT_STREAMS); gRPC's default has no
  // limit. A client over it waits for a stream (HTTP/2 flow control); it is not refused. > 0.
  int max_concurrent_streams = -1;
  // Bytes gRPC itself may hold for the server's connections (reads, writes, call arenas), through
  // a grpc::ResourceQuota: over it gRPC shrinks its buffers and drops connections rather than
  // grow. -1: none (no quota). > 0 otherwise.
  int64_t memory_quota_bytes = -1;
  // A connection with no call for this long is closed (GRPC_ARG_MAX_CONNECTION_IDLE_MS; GOAWAY,
  // clients reconnect on their next call). A long poll (the coordinator's WaitClock, KvWait) is a
  // call: its connection is not idle. gRPC's default: never. > 0.
  int max_connection_idle_ms = -1;
  // The server pings each connection after this long without traffic and drops it when no ack
  // comes within keepalive_timeout_ms (GRPC_ARG_KEEPALIVE_TIME_MS, _TIMEOUT_MS): a client whose
  // host died or whose network is gone stops holding the connection and its calls. gRPC's
  // defaults: 2 hours and 20 s. > 0. (How often clients may ping is gRPC's default enforcement:
  // at most every 5 minutes without data, else GOAWAY.)
  int keepalive_time_ms = -1;
  int keepalive_timeout_ms = -1;

  // Integer channel arguments of every connection, for example
  // {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20}. Default none.
  std::vector<std::pair<std::string, int>> int_args;

  // Interceptors of every call (for example metrics::MakeServerMetricsInterceptorFactory). Default
  // none: no interceptor and no cost per call.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;

  // How the server authenticates. Default null: plaintext (insecure credentials).
  std::shared_ptr<grpc::ServerCredentials> credentials;

  // Answers every call no service serves (a standby coordinator answers every method so). Not
  // owned; must outlive the server. Default none: such calls get UNIMPLEMENTED.
  grpc::CallbackGenericService* generic_service = nullptr;
};

// A started server and the port it listens on.
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// Builds a server with `options` serving `services` (not owned; they must outlive the server) and
// starts it. Returns the server and its bound port; INVALID_ARGUMENT for an empty listen address,
// no service (and no generic_service), or a bound out of its range (the message names the field);
// UNAVAILABLE ("cannot listen on <address>") when the address cannot be bound.
absl::StatusOr<StartedServer> StartServer(ServerOptions options,
                                          const std::vector<grpc::Service*>& services);

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_SERVER_BUILDER_H_

// The one way every daemon of the project builds and starts its gRPC server: the listen address,
// the credentials, message limits, channel arguments and interceptors in one struct, and the port
// it bound (or a clear error) back.
#ifndef PS_COMMON_GRPC_SERVER_BUILDER_H_
#define PS_COMMON_GRPC_SERVER_BUILDER_H_

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/support/server_interceptor.h>

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

  // Integer channel arguments of every connection, for example
  // {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20}. Default none.
  std::vector<std::pair<std::string, int>> int_args;

  // Interceptors of every call (for example metrics::MakeServerMetricsInterceptorFactory). Default
  // none: no interceptor and no cost per call.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;

  // How the server authenticates. Default null: plaintext (insecure credentials).
  std::shared_ptr<grpc::ServerCredentials> credentials;
};

// A started server and the port it listens on.
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// Builds a server with `options` serving `services` (not owned; they must outlive the server) and
// starts it. Returns the server and its bound port; INVALID_ARGUMENT for an empty listen address
// or no service; UNAVAILABLE ("cannot listen on <address>") when the address cannot be bound.
absl::StatusOr<StartedServer> StartServer(ServerOptions options,
                                          const std::vector<grpc::Service*>& services);

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_SERVER_BUILDER_H_

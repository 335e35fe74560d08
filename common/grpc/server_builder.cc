#include "common/grpc/server_builder.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace grpc_util {

absl::StatusOr<StartedServer> StartServer(ServerOptions options,
                                          const std::vector<grpc::Service*>& services) {
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError("no listen address for the gRPC server");
  }
  if (services.empty()) return absl::InvalidArgumentError("a gRPC server needs a service");
  StartedServer started;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      options.listen_address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureServerCredentials(),
      &started.port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (options.max_receive_message_bytes >= 0) {
    builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  }
  if (options.max_send_message_bytes >= 0) {
    builder.SetMaxSendMessageSize(options.max_send_message_bytes);
  }
  for (const auto& [key, value] : options.int_args) builder.AddChannelArgument(key, value);
  if (!options.interceptors.empty()) {
    builder.experimental().SetInterceptorCreators(std::move(options.interceptors));
  }
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    if (started.server != nullptr) started.server->Shutdown();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen_address));
  }
  return started;
}

}  // namespace grpc_util
}  // namespace ps

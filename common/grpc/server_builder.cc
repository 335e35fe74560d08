#include "common/grpc/server_builder.h"

#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace grpc_util {
namespace {

// OK when `value` is -1 (gRPC's default) or > 0; INVALID_ARGUMENT naming `field` otherwise.
absl::Status CheckBound(const char* field, int64_t value) {
  if (value == -1 || value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("ServerOptions.", field, " must be -1 (gRPC's default) or > 0, got ", value));
}

}  // namespace

absl::StatusOr<StartedServer> StartServer(ServerOptions options,
                                          const std::vector<grpc::Service*>& services) {
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError("no listen address for the gRPC server");
  }
  if (services.empty() && options.generic_service == nullptr) {
    return absl::InvalidArgumentError("a gRPC server needs a service");
  }
  for (const auto& [field, value] :
       {std::pair<const char*, int64_t>{"max_concurrent_streams", options.max_concurrent_streams},
        {"memory_quota_bytes", options.memory_quota_bytes},
        {"max_connection_idle_ms", options.max_connection_idle_ms},
        {"keepalive_time_ms", options.keepalive_time_ms},
        {"keepalive_timeout_ms", options.keepalive_timeout_ms}}) {
    if (absl::Status checked = CheckBound(field, value); !checked.ok()) return checked;
  }
  StartedServer started;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      options.listen_address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureServerCredentials(),
      &started.port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (options.generic_service != nullptr) {
    builder.RegisterCallbackGenericService(options.generic_service);
  }
  if (options.max_receive_message_bytes >= 0) {
    builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  }
  if (options.max_send_message_bytes >= 0) {
    builder.SetMaxSendMessageSize(options.max_send_message_bytes);
  }
  if (options.max_concurrent_streams > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  }
  if (options.memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("ps_server_memory");
    quota.Resize(static_cast<size_t>(options.memory_quota_bytes));
    builder.SetResourceQuota(quota);
  }
  if (options.max_connection_idle_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, options.max_connection_idle_ms);
  }
  if (options.keepalive_time_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, options.keepalive_time_ms);
  }
  if (options.keepalive_timeout_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options.keepalive_timeout_ms);
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

#include "server/ps_service.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/grpc_status.h"

namespace ps {
namespace server {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

ParameterServerService::ParameterServerService(std::function<void(uint64_t)> on_newer_map)
    : on_newer_map_(std::move(on_newer_map)) {}

ShardedStore* ParameterServerService::Ready(const rpc::RequestHeader& header,
                                            absl::Status* status) {
  ShardedStore* store = store_.load(std::memory_order_acquire);
  if (store == nullptr) {
    *status = absl::UnavailableError("the server is starting");
    return nullptr;
  }
  const uint64_t mine = store->map_version();
  if (header.map_version() > mine) {
    on_newer_map_(header.map_version());
    *status = absl::UnavailableError(absl::StrFormat(
        "this server has shard map version %d, the request was routed with %d; retry", mine,
        header.map_version()));
    return nullptr;
  }
  return store;
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* context,
                                                       const rpc::PullRequest* request,
                                                       rpc::PullResponse* response) {
  absl::Status status;
  ShardedStore* store = Ready(request->header(), &status);
  if (store == nullptr) return Done(context, status);
  status = store->Pull(*request, response);
  if (!status.ok()) response->Clear();
  return Done(context, status);
}

grpc::ServerUnaryReactor* ParameterServerService::Push(grpc::CallbackServerContext* context,
                                                       const rpc::PushRequest* request,
                                                       rpc::PushResponse* response) {
  absl::Status status;
  ShardedStore* store = Ready(request->header(), &status);
  if (store == nullptr) return Done(context, status);
  uint32_t duplicates = 0;
  status = store->Push(*request, &duplicates);
  response->set_duplicate_keys(duplicates);
  return Done(context, status);
}

grpc::ServerUnaryReactor* ParameterServerService::PullDense(grpc::CallbackServerContext* context,
                                                            const rpc::PullDenseRequest* request,
                                                            rpc::PullDenseResponse* response) {
  absl::Status status;
  ShardedStore* store = Ready(request->header(), &status);
  if (store == nullptr) return Done(context, status);
  status = store->PullDense(*request, response);
  if (!status.ok()) response->Clear();
  return Done(context, status);
}

grpc::ServerUnaryReactor* ParameterServerService::PushDense(grpc::CallbackServerContext* context,
                                                            const rpc::PushDenseRequest* request,
                                                            rpc::PushDenseResponse* response) {
  absl::Status status;
  ShardedStore* store = Ready(request->header(), &status);
  if (store == nullptr) return Done(context, status);
  return Done(context, store->PushDense(*request));
}

grpc::ServerUnaryReactor* ParameterServerService::GetStatus(
    grpc::CallbackServerContext* context, const rpc::ServerStatusRequest* request,
    rpc::ServerStatus* response) {
  ShardedStore* store = store_.load(std::memory_order_acquire);
  if (store == nullptr) return Done(context, absl::UnavailableError("the server is starting"));
  response->set_server_id(server_id_.load());
  store->FillStatus(response);
  return Done(context, absl::OkStatus());
}

}  // namespace server
}  // namespace ps

#include "client/internal/ctl_rpc.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/security.h"
#include "common/grpc_status.h"

namespace ps {
namespace client_internal {
namespace {

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address,
                                          std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc_util::ChannelOptions options = grpc_util::CtlChannelOptions();  // a big cluster's status
  options.credentials = std::move(credentials);
  return grpc_util::NewChannel(address, options);
}

}  // namespace

CtlConnection::CtlConnection(std::string address, absl::Duration timeout,
                             std::shared_ptr<grpc::ChannelCredentials> credentials, bool tls)
    : address_(std::move(address)),
      timeout_(timeout),
      tls_(tls),
      channel_(NewChannel(address_, std::move(credentials))),
      stub_(rpc::Coordinator::NewStub(channel_)) {}

absl::Status CtlConnection::Named(const absl::Status& status) const {
  return absl::Status(
      status.code(),
      absl::StrCat("coordinator ", address_, ": ", absl::StatusCodeToString(status.code()), ": ",
                   status.message(),
                   absl::IsUnavailable(status)
                       ? absl::StrCat(" (", grpc_util::UnreachableHint(tls_), ")")
                       : ""));
}

absl::StatusOr<rpc::ClusterStatus> CtlConnection::ClusterStatus() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  rpc::ClusterStatus response;
  const absl::Status status =
      FromGrpcStatus(stub_->GetStatus(&context, rpc::StatusRequest(), &response));
  if (!status.ok()) return Named(status);
  return response;
}

absl::StatusOr<rpc::ServerStatuses> CtlConnection::ServerStatuses(
    const rpc::ServerStatusRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  rpc::ServerStatusesRequest wrapped;
  *wrapped.mutable_request() = request;
  rpc::ServerStatuses response;
  const absl::Status status =
      FromGrpcStatus(stub_->GetServerStatuses(&context, wrapped, &response));
  if (!status.ok()) return Named(status);
  return response;
}

absl::StatusOr<ClusterSample> CtlConnection::Sample(const rpc::ServerStatusRequest& request) {
  ClusterSample sample;
  absl::StatusOr<rpc::ClusterStatus> cluster = ClusterStatus();
  if (!cluster.ok()) return cluster.status();
  sample.cluster = *std::move(cluster);
  absl::StatusOr<rpc::ServerStatuses> servers = ServerStatuses(request);
  if (!servers.ok()) return servers.status();
  sample.taken = absl::Now();
  sample.servers = *std::move(servers);
  return sample;
}

absl::StatusOr<rpc::CheckpointResponse> CtlConnection::Checkpoint(int64_t step) {
  if (!channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout_))) {
    return Named(absl::UnavailableError(
        absl::StrCat("not reachable within ", absl::FormatDuration(timeout_))));
  }
  grpc::ClientContext context;
  rpc::CheckpointRequest request;
  request.set_step(step);
  rpc::CheckpointResponse response;
  const absl::Status status = FromGrpcStatus(stub_->StartCheckpoint(&context, request, &response));
  if (!status.ok()) return Named(status);
  return response;
}

}  // namespace client_internal
}  // namespace ps

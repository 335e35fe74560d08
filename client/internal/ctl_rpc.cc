#include "client/internal/ctl_rpc.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/coordinator_client.h"
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

absl::Time DeadlineIn(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
}

template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}

}  // namespace

CtlConnection::CtlConnection(const std::string& addresses, absl::Duration timeout,
                             std::shared_ptr<grpc::ChannelCredentials> credentials, bool tls)
    : addresses_(absl::StrSplit(addresses, ',', absl::SkipEmpty())), timeout_(timeout), tls_(tls) {
  if (addresses_.empty()) addresses_.push_back(addresses);  // its calls fail, naming it
  for (const std::string& address : addresses_) {
    channels_.push_back(NewChannel(address, credentials));
    stubs_.push_back(rpc::Coordinator::NewStub(channels_.back()));
  }
}

std::string CtlConnection::address() const {
  absl::MutexLock lock(&mu_);
  return addresses_[current_];
}

absl::Status CtlConnection::Named(size_t at, const absl::Status& status) const {
  return absl::Status(status.code(),
                      absl::StrCat("coordinator ", addresses_[at], ": ",
                                   absl::StatusCodeToString(status.code()), ": ", status.message(),
                                   absl::IsUnavailable(status)
                                       ? absl::StrCat(" (", grpc_util::UnreachableHint(tls_), ")")
                                       : ""));
}

template <typename Fn>
auto CtlConnection::OnLeader(absl::Time deadline, Fn fn) -> decltype(fn(nullptr, nullptr)) {
  std::vector<bool> tried(addresses_.size(), false);
  size_t at;
  {
    absl::MutexLock lock(&mu_);
    at = current_;
  }
  while (true) {
    tried[at] = true;
    grpc::ClientContext context;
    if (deadline != absl::InfiniteFuture()) context.set_deadline(absl::ToChronoTime(deadline));
    auto result = fn(stubs_[at].get(), &context);
    const absl::Status status = StatusOf(result);
    if (status.ok()) return result;
    if (!absl::IsUnavailable(status)) {
      absl::MutexLock lock(&mu_);
      current_ = at;
      return Named(at, status);
    }
    std::optional<size_t> next = NextCoordinator(addresses_, at, status.message(), tried);
    {
      absl::MutexLock lock(&mu_);
      if (current_ == at) current_ = SuggestedCoordinator(addresses_, at, status.message());
    }
    if (!next.has_value() || absl::Now() >= deadline) return Named(at, status);
    at = *next;
  }
}

absl::StatusOr<rpc::ClusterStatus> CtlConnection::ClusterStatus() {
  return OnLeader(DeadlineIn(timeout_),
                  [](rpc::Coordinator::Stub* stub,
                     grpc::ClientContext* context) -> absl::StatusOr<rpc::ClusterStatus> {
                    rpc::ClusterStatus response;
                    const absl::Status status =
                        FromGrpcStatus(stub->GetStatus(context, rpc::StatusRequest(), &response));
                    if (!status.ok()) return status;
                    return response;
                  });
}

absl::StatusOr<rpc::ServerStatuses> CtlConnection::ServerStatuses(
    const rpc::ServerStatusRequest& request) {
  rpc::ServerStatusesRequest wrapped;
  *wrapped.mutable_request() = request;
  return OnLeader(DeadlineIn(timeout_),
                  [&](rpc::Coordinator::Stub* stub,
                      grpc::ClientContext* context) -> absl::StatusOr<rpc::ServerStatuses> {
                    rpc::ServerStatuses response;
                    const absl::Status status =
                        FromGrpcStatus(stub->GetServerStatuses(context, wrapped, &response));
                    if (!status.ok()) return status;
                    return response;
                  });
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
  const std::optional<size_t> up = WaitForAnyConnected(channels_, absl::Now() + timeout_);
  if (!up.has_value()) {
    absl::MutexLock lock(&mu_);
    return Named(current_, absl::UnavailableError(absl::StrCat("not reachable within ",
                                                               absl::FormatDuration(timeout_))));
  }
  {
    absl::MutexLock lock(&mu_);
    // The current one, if it is up; else the first one up.
    if (channels_[current_]->GetState(false) != GRPC_CHANNEL_READY) current_ = *up;
  }
  rpc::CheckpointRequest request;
  request.set_step(step);
  return OnLeader(absl::InfiniteFuture(),
                  [&](rpc::Coordinator::Stub* stub,
                      grpc::ClientContext* context) -> absl::StatusOr<rpc::CheckpointResponse> {
                    rpc::CheckpointResponse response;
                    const absl::Status status =
                        FromGrpcStatus(stub->StartCheckpoint(context, request, &response));
                    if (!status.ok()) return status;
                    return response;
                  });
}

}  // namespace client_internal
}  // namespace ps

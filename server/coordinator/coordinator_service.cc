#include "server/coordinator/coordinator_service.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/grpc/auth.h"
#include "common/grpc_status.h"
#include "common/net_address.h"

namespace ps {
namespace coordinator {
namespace {

// Finishes a call at once with `status`.
grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// When a waiting call should give up, on the coordinator's clock: the call's deadline less the
// reply margin, and at most `limit` from now.
absl::Time WaitDeadline(const grpc::CallbackServerContext& context, absl::Time coordinator_now,
                        absl::Duration limit = absl::InfiniteDuration()) {
  absl::Duration remaining = absl::InfiniteDuration();
  const auto deadline = context.deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    remaining = absl::FromChrono(deadline) - absl::Now();
    if (remaining > absl::ZeroDuration()) {
      remaining -= std::min(remaining / 10, CoordinatorService::kReplyMargin);
    }
  }
  return coordinator_now + std::min(remaining, limit);
}

// A call answered by a coordinator waiter. If the client cancels first, the waiter is cancelled,
// which finishes the call.
class WaitReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit WaitReactor(Coordinator* coordinator) : coordinator_(coordinator) {}

  // Called by the method handler once the waiter exists (0: it was answered at once).
  void SetWaitId(WaitId id) {
    bool cancel = false;
    {
      absl::MutexLock lock(&mu_);
      id_ = id;
      cancel = cancelled_;
    }
    if (cancel && id != 0) coordinator_->CancelWait(id);
  }

  void OnCancel() override {
    WaitId id = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      id = id_;
    }
    if (id != 0) coordinator_->CancelWait(id);
  }

  void OnDone() override { delete this; }

 private:
  Coordinator* const coordinator_;
  absl::Mutex mu_;
  WaitId id_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* CoordinatorService::Register(grpc::CallbackServerContext* context,
                                                       const rpc::RegisterRequest* request,
                                                       rpc::RegisterResponse* response) {
  if (request->role() == rpc::SERVER) {
    if (absl::Status allowed = grpc_util::RequireAdmin(*context, "registering a server");
        !allowed.ok()) {
      return Done(context, Gate(allowed));
    }
  }
  absl::StatusOr<rpc::RegisterResponse> registered =
      coordinator_->Register(request->role(), request->address(), request->rank());
  if (registered.ok()) *response = std::move(*registered);
  return Done(context, Gate(registered.status()));
}

grpc::ServerUnaryReactor* CoordinatorService::GetMemberIds(grpc::CallbackServerContext* context,
                                                           const rpc::MemberIdsRequest* request,
                                                           rpc::MemberIds* response) {
  *response = coordinator_->MemberIds();
  return Done(context, Gate(absl::OkStatus()));
}

namespace {

// Opens (and closes) a TCP connection to host:port within CoordinatorService::kReachableTimeout.
bool TcpReachable(const std::string& address) {
  const absl::StatusOr<HostPort> parsed = ParseHostPort(address, AddressUse::kDial);
  if (!parsed.ok()) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(parsed->host.c_str(), std::to_string(parsed->port).c_str(), &hints, &found) !=
      0) {
    return false;
  }
  bool reachable = false;
  for (addrinfo* ai = found; ai != nullptr && !reachable; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      reachable = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int timeout_ms =
          static_cast<int>(absl::ToInt64Milliseconds(CoordinatorService::kReachableTimeout));
      if (poll(&p, 1, timeout_ms) == 1) {
        int error = 0;
        socklen_t len = sizeof(error);
        reachable = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  return reachable;
}

}  // namespace

CoordinatorService::CoordinatorService(Coordinator* coordinator, ReachableFn reachable,
                                       std::shared_ptr<grpc::ChannelCredentials> server_credentials)
    : coordinator_(coordinator),
      reachable_(reachable != nullptr ? std::move(reachable) : ReachableFn(TcpReachable)),
      fanout_(nullptr, server_credentials),
      checkpointer_(coordinator, nullptr, absl::Minutes(30), server_credentials),
      scheduler_(coordinator, &checkpointer_) {
  checker_ = std::thread([this] { CheckLoop(); });
}

CoordinatorService::~CoordinatorService() {
  {
    absl::MutexLock lock(&check_mu_);
    stop_checks_ = true;
  }
  checker_.join();
  scheduler_.Stop();
  std::thread restorer;
  {
    // Not joined under the lock: the restorer takes it to say it is done.
    absl::MutexLock lock(&restore_mu_);
    restorer = std::move(restorer_);
  }
  if (restorer.joinable()) restorer.join();
}

void CoordinatorService::CheckLoop() {
  absl::MutexLock lock(&check_mu_);
  while (true) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(check_mu_) {
      return stop_checks_ || !to_check_.empty();
    };
    check_mu_.Await(absl::Condition(&ready));
    if (stop_checks_) return;
    const uint32_t server = *to_check_.begin();
    to_check_.erase(to_check_.begin());
    check_mu_.Unlock();
    const std::optional<std::string> address = coordinator_->AddressToCheck(server);
    if (address.has_value() && !reachable_(*address)) coordinator_->DeclareDead(server);
    check_mu_.Lock();
  }
}

grpc::ServerUnaryReactor* CoordinatorService::ReportFailure(
    grpc::CallbackServerContext* context, const rpc::ReportFailureRequest* request,
    rpc::ReportFailureResponse* response) {
  if (request->reporter_failed()) {
    const absl::Status reported =
        coordinator_->ReportWorkerFailure(request->reporter(), request->reason());
    response->set_map_version(coordinator_->Status().shard_map().version());
    return Done(context, Gate(reported));
  }
  {
    absl::MutexLock lock(&check_mu_);
    to_check_.insert(request->server_id());
  }
  response->set_map_version(coordinator_->Status().shard_map().version());
  return Done(context, Gate(absl::OkStatus()));
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* context,
                                                        const rpc::HeartbeatRequest* request,
                                                        rpc::HeartbeatResponse* response) {
  const std::vector<rpc::ShardProgress> shards(request->shards().begin(), request->shards().end());
  std::optional<rpc::JobFailure> failure;
  const absl::StatusOr<uint64_t> version = coordinator_->Heartbeat(
      request->member_id(), shards, &failure,
      request->has_clock() ? std::optional<int64_t>(request->clock()) : std::nullopt);
  if (version.ok()) response->set_map_version(*version);
  if (failure.has_value()) *response->mutable_job_failure() = std::move(*failure);
  return Done(context, Gate(version.status()));
}

grpc::ServerUnaryReactor* CoordinatorService::Leave(grpc::CallbackServerContext* context,
                                                    const rpc::LeaveRequest* request,
                                                    rpc::LeaveResponse* response) {
  return Done(context, Gate(coordinator_->Leave(request->member_id())));
}

grpc::ServerUnaryReactor* CoordinatorService::GetShardMap(grpc::CallbackServerContext* context,
                                                          const rpc::GetShardMapRequest* request,
                                                          rpc::ShardMap* response) {
  auto* reactor = new WaitReactor(coordinator_);
  reactor->SetWaitId(coordinator_->AsyncGetShardMap(
      request->min_version(), WaitDeadline(*context, coordinator_->Now()),
      [this, reactor, response](absl::StatusOr<rpc::ShardMap> map) {
        if (map.ok()) *response = std::move(*map);
        reactor->Finish(ToGrpcStatus(Gate(map.status())));
      }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::ReportClock(grpc::CallbackServerContext* context,
                                                          const rpc::ReportClockRequest* request,
                                                          rpc::ClockState* response) {
  absl::StatusOr<rpc::ClockState> state =
      coordinator_->ReportClock(request->member_id(), request->clock());
  if (state.ok()) *response = std::move(*state);
  return Done(context, Gate(state.status()));
}

grpc::ServerUnaryReactor* CoordinatorService::WaitClock(grpc::CallbackServerContext* context,
                                                        const rpc::WaitClockRequest* request,
                                                        rpc::ClockState* response) {
  auto* reactor = new WaitReactor(coordinator_);
  reactor->SetWaitId(coordinator_->AsyncWaitClock(
      request->clock(), WaitDeadline(*context, coordinator_->Now()),
      [this, reactor, response](absl::StatusOr<rpc::ClockState> state) {
        if (state.ok()) *response = std::move(*state);
        reactor->Finish(ToGrpcStatus(Gate(state.status())));
      }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::KvSet(grpc::CallbackServerContext* context,
                                                    const rpc::KvSetRequest* request,
                                                    rpc::KvSetResponse* response) {
  return Done(context, Gate(coordinator_->KvSet(request->key(), request->value())));
}

grpc::ServerUnaryReactor* CoordinatorService::KvGet(grpc::CallbackServerContext* context,
                                                    const rpc::KvGetRequest* request,
                                                    rpc::KvGetResponse* response) {
  const std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  absl::StatusOr<std::vector<std::string>> values = coordinator_->KvGet(keys);
  if (values.ok()) {
    for (std::string& value : *values) response->add_values(std::move(value));
  }
  return Done(context, Gate(values.status()));
}

grpc::ServerUnaryReactor* CoordinatorService::KvWait(grpc::CallbackServerContext* context,
                                                     const rpc::KvGetRequest* request,
                                                     rpc::KvGetResponse* response) {
  const absl::Duration limit = request->timeout_ms() > 0 ? absl::Milliseconds(request->timeout_ms())
                                                         : absl::InfiniteDuration();
  auto* reactor = new WaitReactor(coordinator_);
  reactor->SetWaitId(coordinator_->AsyncKvWait(
      std::vector<std::string>(request->keys().begin(), request->keys().end()),
      WaitDeadline(*context, coordinator_->Now(), limit),
      [this, reactor, response](absl::StatusOr<std::vector<std::string>> values) {
        if (values.ok()) {
          for (std::string& value : *values) response->add_values(std::move(value));
        }
        reactor->Finish(ToGrpcStatus(Gate(values.status())));
      }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::StartCheckpoint(grpc::CallbackServerContext* context,
                                                              const rpc::CheckpointRequest* request,
                                                              rpc::CheckpointResponse* response) {
  // Worker 0 takes the end-of-training checkpoint the job asks for, and early stopping's of the
  // best model; any other needs an admin.
  const config::Training& training = coordinator_->job().training();
  if (!coordinator_->job().cluster().checkpoint_at_end() &&
      !(training.has_early_stopping() && training.early_stopping().restore_best())) {
    if (absl::Status allowed = grpc_util::RequireAdmin(
            *context,
            "a checkpoint (other than the end-of-training one of a job with "
            "checkpoint_at_end)");
        !allowed.ok()) {
      return Done(context, Gate(allowed));
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  scheduler_.Request(*request,
                     [this, response, reactor](absl::StatusOr<rpc::CheckpointResponse> taken) {
                       if (taken.ok()) *response = *std::move(taken);
                       reactor->Finish(ToGrpcStatus(Gate(taken.status())));
                     });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::RestoreCheckpoint(
    grpc::CallbackServerContext* context, const rpc::RestoreCheckpointRequest* request,
    rpc::RestoreCheckpointResponse* response) {
  // Worker 0 puts early stopping's best model back; any other restore needs an admin.
  const config::Training& training = coordinator_->job().training();
  if (!(training.has_early_stopping() && training.early_stopping().restore_best())) {
    if (absl::Status allowed =
            grpc_util::RequireAdmin(*context, "restoring a checkpoint into the running cluster");
        !allowed.ok()) {
      return Done(context, Gate(allowed));
    }
  }
  absl::MutexLock lock(&restore_mu_);
  if (restoring_) {
    return Done(context, Gate(absl::FailedPreconditionError("a checkpoint is being restored")));
  }
  if (restorer_.joinable()) restorer_.join();
  restoring_ = true;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Seconds of the servers' reading hold no gRPC thread.
  restorer_ = std::thread([this, request, response, reactor] {
    absl::StatusOr<rpc::RestoreCheckpointResponse> restored =
        checkpointer_.Restore(request->path(), kRestoreWait);
    if (restored.ok()) {
      *response = *std::move(restored);
      std::fprintf(stderr, "ps_coordinator: restored checkpoint %s into the cluster in %.2f s\n",
                   request->path().c_str(), response->seconds());
    } else {
      std::fprintf(stderr, "ps_coordinator: restoring checkpoint %s failed: %s\n",
                   request->path().c_str(), restored.status().ToString().c_str());
    }
    {
      absl::MutexLock lock(&restore_mu_);
      restoring_ = false;
    }
    reactor->Finish(ToGrpcStatus(Gate(restored.status())));
  });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::GetStatus(grpc::CallbackServerContext* context,
                                                        const rpc::StatusRequest* request,
                                                        rpc::ClusterStatus* response) {
  *response = coordinator_->Status();
  if (status_extra_) status_extra_(response);
  return Done(context, Gate(absl::OkStatus()));
}

grpc::ServerUnaryReactor* CoordinatorService::GetServerStatuses(
    grpc::CallbackServerContext* context, const rpc::ServerStatusesRequest* request,
    rpc::ServerStatuses* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const auto caller = context->deadline();
  const absl::Time caller_deadline = caller == std::chrono::system_clock::time_point::max()
                                         ? absl::InfiniteFuture()
                                         : absl::FromChrono(caller);
  const absl::Status asked =
      fanout_.Gather(coordinator_->job(), coordinator_->Status().shard_map(), *request,
                     StatusFanout::Deadline(absl::Now(), caller_deadline),
                     [this, response, reactor](rpc::ServerStatuses statuses) {
                       *response = std::move(statuses);
                       reactor->Finish(ToGrpcStatus(Gate(absl::OkStatus())));
                     });
  if (!asked.ok()) reactor->Finish(ToGrpcStatus(Gate(asked)));
  return reactor;
}

}  // namespace coordinator
}  // namespace ps

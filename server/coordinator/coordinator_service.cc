#include "server/coordinator/coordinator_service.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"

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
  absl::StatusOr<rpc::RegisterResponse> registered =
      coordinator_->Register(request->role(), request->address(), request->rank());
  if (registered.ok()) *response = std::move(*registered);
  return Done(context, registered.status());
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* context,
                                                        const rpc::HeartbeatRequest* request,
                                                        rpc::HeartbeatResponse* response) {
  const absl::StatusOr<uint64_t> version = coordinator_->Heartbeat(request->member_id());
  if (version.ok()) response->set_map_version(*version);
  return Done(context, version.status());
}

grpc::ServerUnaryReactor* CoordinatorService::GetShardMap(grpc::CallbackServerContext* context,
                                                          const rpc::GetShardMapRequest* request,
                                                          rpc::ShardMap* response) {
  auto* reactor = new WaitReactor(coordinator_);
  reactor->SetWaitId(coordinator_->AsyncGetShardMap(
      request->min_version(), WaitDeadline(*context, coordinator_->Now()),
      [reactor, response](absl::StatusOr<rpc::ShardMap> map) {
        if (map.ok()) *response = std::move(*map);
        reactor->Finish(ToGrpcStatus(map.status()));
      }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::ReportClock(grpc::CallbackServerContext* context,
                                                          const rpc::ReportClockRequest* request,
                                                          rpc::ClockState* response) {
  absl::StatusOr<rpc::ClockState> state =
      coordinator_->ReportClock(request->member_id(), request->clock());
  if (state.ok()) *response = std::move(*state);
  return Done(context, state.status());
}

grpc::ServerUnaryReactor* CoordinatorService::WaitClock(grpc::CallbackServerContext* context,
                                                        const rpc::WaitClockRequest* request,
                                                        rpc::ClockState* response) {
  auto* reactor = new WaitReactor(coordinator_);
  reactor->SetWaitId(
      coordinator_->AsyncWaitClock(request->clock(), WaitDeadline(*context, coordinator_->Now()),
                                   [reactor, response](absl::StatusOr<rpc::ClockState> state) {
                                     if (state.ok()) *response = std::move(*state);
                                     reactor->Finish(ToGrpcStatus(state.status()));
                                   }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::KvSet(grpc::CallbackServerContext* context,
                                                    const rpc::KvSetRequest* request,
                                                    rpc::KvSetResponse* response) {
  return Done(context, coordinator_->KvSet(request->key(), request->value()));
}

grpc::ServerUnaryReactor* CoordinatorService::KvGet(grpc::CallbackServerContext* context,
                                                    const rpc::KvGetRequest* request,
                                                    rpc::KvGetResponse* response) {
  const std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  absl::StatusOr<std::vector<std::string>> values = coordinator_->KvGet(keys);
  if (values.ok()) {
    for (std::string& value : *values) response->add_values(std::move(value));
  }
  return Done(context, values.status());
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
      [reactor, response](absl::StatusOr<std::vector<std::string>> values) {
        if (values.ok()) {
          for (std::string& value : *values) response->add_values(std::move(value));
        }
        reactor->Finish(ToGrpcStatus(values.status()));
      }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::StartCheckpoint(grpc::CallbackServerContext* context,
                                                              const rpc::CheckpointRequest* request,
                                                              rpc::CheckpointResponse* response) {
  absl::StatusOr<rpc::CheckpointResponse> started = coordinator_->StartCheckpoint(request->step());
  if (started.ok()) *response = std::move(*started);
  return Done(context, started.status());
}

grpc::ServerUnaryReactor* CoordinatorService::GetStatus(grpc::CallbackServerContext* context,
                                                        const rpc::StatusRequest* request,
                                                        rpc::ClusterStatus* response) {
  *response = coordinator_->Status();
  return Done(context, absl::OkStatus());
}

}  // namespace coordinator
}  // namespace ps

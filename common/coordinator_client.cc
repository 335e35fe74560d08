#include "common/coordinator_client.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/security.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// How much longer than its own timeout_ms a KvWait call may take, so that the coordinator's
// answer (naming the missing keys) arrives before gRPC's deadline.
constexpr absl::Duration kWaitGrace = absl::Seconds(1);

// Sets the deadline `timeout` from now; an infinite timeout sets none.
void SetTimeout(grpc::ClientContext* context, absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return;
  context->set_deadline(absl::ToChronoTime(absl::Now() + std::max(timeout, absl::ZeroDuration())));
}

const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& address, absl::Duration timeout,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  // kMaxMessageBytes both ways; a coordinator that restarts is back within seconds: reconnect
  // soon, not after gRPC's default backoff of up to two minutes.
  grpc_util::ChannelOptions options = grpc_util::CoordinatorChannelOptions();
  const bool plaintext = credentials == nullptr;
  options.credentials = std::move(credentials);
  std::shared_ptr<grpc::Channel> channel = grpc_util::NewChannel(address, options);
  const auto deadline = timeout == absl::InfiniteDuration()
                            ? std::chrono::system_clock::time_point::max()
                            : absl::ToChronoTime(absl::Now() + timeout);
  if (!channel->WaitForConnected(deadline)) {
    // A TLS handshake that fails looks the same from here as nobody listening: say which
    // security this side used, the likeliest mismatch.
    return absl::UnavailableError(absl::StrCat("coordinator at ", address,
                                               " not reachable within ",
                                               absl::FormatDuration(timeout), " (",
                                               grpc_util::UnreachableHint(!plaintext), ")"));
  }
  return std::unique_ptr<CoordinatorClient>(
      new CoordinatorClient(address, rpc::Coordinator::NewStub(channel)));
}

CoordinatorClient::~CoordinatorClient() {
  StopHeartbeats();
  // The calls sent without waiting end before the stub and this go.
  absl::MutexLock lock(&async_mu_);
  async_mu_.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &async_in_flight_));
}

template <typename Response, typename Request, typename Send>
void CoordinatorClient::SendWithoutWaiting(Request request, Send send) {
  struct Call {
    grpc::ClientContext context;
    Request request;
    Response response;
  };
  auto* call = new Call;
  call->request = std::move(request);
  SetTimeout(&call->context, absl::Seconds(5));
  {
    absl::MutexLock lock(&async_mu_);
    ++async_in_flight_;
  }
  send(&call->context, &call->request, &call->response, [this, call](grpc::Status) {
    delete call;
    absl::MutexLock lock(&async_mu_);
    --async_in_flight_;
  });
}

void CoordinatorClient::SetRetryWindow(absl::Duration window) {
  absl::MutexLock lock(&mu_);
  retry_window_ = window;
}

template <typename Fn>
auto CoordinatorClient::Retrying(Fn fn) -> decltype(fn()) {
  absl::Duration window;
  {
    absl::MutexLock lock(&mu_);
    window = retry_window_;
  }
  const absl::Time until = absl::Now() + window;
  absl::Duration pause = absl::Milliseconds(50);
  while (true) {
    auto result = fn();
    if (!absl::IsUnavailable(StatusOf(result)) || absl::Now() + pause > until) return result;
    absl::SleepFor(pause);  // the coordinator is away: it may be restarting
    pause = std::min(2 * pause, absl::Seconds(1));
  }
}

absl::StatusOr<rpc::RegisterResponse> CoordinatorClient::Register(rpc::Role role,
                                                                  const std::string& address,
                                                                  int32_t rank) {
  rpc::RegisterRequest request;
  request.set_role(role);
  request.set_address(address);
  request.set_rank(rank);
  rpc::RegisterResponse response;
  grpc::ClientContext context;
  SetTimeout(&context, kRpcTimeout);
  PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->Register(&context, request, &response)));
  return response;
}

void CoordinatorClient::GetMemberIdsAsync(
    absl::Duration timeout, std::function<void(absl::StatusOr<rpc::MemberIds>)> done) {
  struct Call {
    grpc::ClientContext context;
    rpc::MemberIdsRequest request;
    rpc::MemberIds response;
    std::function<void(absl::StatusOr<rpc::MemberIds>)> done;
  };
  auto* call = new Call;
  call->done = std::move(done);
  SetTimeout(&call->context, timeout);
  {
    absl::MutexLock lock(&async_mu_);
    ++async_in_flight_;
  }
  stub_->async()->GetMemberIds(
      &call->context, &call->request, &call->response, [this, call](grpc::Status status) {
        absl::StatusOr<rpc::MemberIds> result = std::move(call->response);
        if (!status.ok()) result = FromGrpcStatus(status);
        std::function<void(absl::StatusOr<rpc::MemberIds>)> done = std::move(call->done);
        delete call;
        done(std::move(result));
        // Counted until `done` returned: the destructor waits for it.
        absl::MutexLock lock(&async_mu_);
        --async_in_flight_;
      });
}

absl::StatusOr<uint64_t> CoordinatorClient::Heartbeat(uint32_t member_id) {
  rpc::HeartbeatRequest request;
  request.set_member_id(member_id);
  rpc::HeartbeatResponse response;
  grpc::ClientContext context;
  SetTimeout(&context, kRpcTimeout);
  PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->Heartbeat(&context, request, &response)));
  return response.map_version();
}

absl::Status CoordinatorClient::StartHeartbeats(uint32_t member_id, absl::Duration interval) {
  if (interval <= absl::ZeroDuration() || interval == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat interval must be finite and > 0, got ", absl::FormatDuration(interval)));
  }
  absl::MutexLock thread_lock(&thread_mu_);
  if (heartbeat_thread_.joinable()) {
    return absl::FailedPreconditionError("heartbeats are already running");
  }
  {
    absl::MutexLock lock(&mu_);
    stop_heartbeats_ = false;
  }
  heartbeat_thread_ =
      std::thread([this, member_id, interval] { HeartbeatLoop(member_id, interval); });
  return absl::OkStatus();
}

void CoordinatorClient::StopHeartbeats() {
  absl::MutexLock thread_lock(&thread_mu_);
  if (!heartbeat_thread_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stop_heartbeats_ = true;
    if (heartbeat_call_ != nullptr) heartbeat_call_->TryCancel();
  }
  heartbeat_thread_.join();
}

void CoordinatorClient::HeartbeatSoon() {
  absl::MutexLock lock(&mu_);
  heartbeat_soon_ = true;
}

void CoordinatorClient::SetShardProgressSource(
    std::function<std::vector<rpc::ShardProgress>()> source) {
  absl::MutexLock lock(&mu_);
  progress_source_ = std::move(source);
}

void CoordinatorClient::ReportFailureAsync(uint32_t reporter, uint32_t server_id,
                                           const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    absl::Time& last = last_report_[server_id];
    const absl::Time now = absl::Now();
    if (now - last < kReportInterval) return;
    last = now;
  }
  rpc::ReportFailureRequest request;
  request.set_reporter(reporter);
  request.set_server_id(server_id);
  request.set_reason(reason);
  SendWithoutWaiting<rpc::ReportFailureResponse>(
      std::move(request), [this](auto* context, auto* request, auto* response, auto done) {
        stub_->async()->ReportFailure(context, request, response, std::move(done));
      });
}

void CoordinatorClient::ReportClockAsync(uint32_t member_id, int64_t clock) {
  rpc::ReportClockRequest request;
  request.set_member_id(member_id);
  request.set_clock(clock);
  SendWithoutWaiting<rpc::ClockState>(
      std::move(request), [this](auto* context, auto* request, auto* response, auto done) {
        stub_->async()->ReportClock(context, request, response, std::move(done));
      });
}

void CoordinatorClient::SetOnJobFailed(std::function<void(const rpc::JobFailure&)> failed) {
  absl::MutexLock lock(&mu_);
  on_job_failed_ = std::move(failed);
}

absl::Status CoordinatorClient::Leave(uint32_t member_id, absl::Duration timeout) {
  rpc::LeaveRequest request;
  request.set_member_id(member_id);
  rpc::LeaveResponse response;
  grpc::ClientContext context;
  SetTimeout(&context, timeout);
  return FromGrpcStatus(stub_->Leave(&context, request, &response));
}

absl::Status CoordinatorClient::ReportWorkerFailure(uint32_t member_id, const std::string& reason) {
  return Retrying([&]() -> absl::Status {
    rpc::ReportFailureRequest request;
    request.set_reporter(member_id);
    request.set_reporter_failed(true);
    request.set_reason(reason);
    rpc::ReportFailureResponse response;
    grpc::ClientContext context;
    SetTimeout(&context, kRpcTimeout);
    return FromGrpcStatus(stub_->ReportFailure(&context, request, &response));
  });
}

void CoordinatorClient::SetOnCoordinatorLost(absl::Duration after,
                                             std::function<void(const absl::Status&)> lost) {
  absl::MutexLock lock(&mu_);
  lost_after_ = after;
  on_lost_ = std::move(lost);
}

void CoordinatorClient::HeartbeatLoop(uint32_t member_id, absl::Duration interval) {
  rpc::HeartbeatRequest request;
  request.set_member_id(member_id);
  absl::MutexLock lock(&mu_);
  absl::Time last_success = absl::Now();
  while (!stop_heartbeats_) {
    if (progress_source_) {
      std::function<std::vector<rpc::ShardProgress>()> source = progress_source_;
      mu_.Unlock();
      std::vector<rpc::ShardProgress> progress = source();
      mu_.Lock();
      request.clear_shards();
      for (rpc::ShardProgress& p : progress) *request.add_shards() = std::move(p);
    }
    grpc::ClientContext context;
    // A slow answer is still worth having for up to a second even with shorter intervals.
    SetTimeout(&context, std::min(std::max(interval, absl::Seconds(1)), kRpcTimeout));
    heartbeat_call_ = &context;
    rpc::HeartbeatResponse response;
    mu_.Unlock();
    const grpc::Status status = stub_->Heartbeat(&context, request, &response);
    mu_.Lock();
    heartbeat_call_ = nullptr;
    if (stop_heartbeats_) break;
    last_heartbeat_status_ = FromGrpcStatus(status);
    if (status.ok()) {
      last_map_version_ = response.map_version();
      last_success = absl::Now();
      if (response.has_job_failure() && on_job_failed_) {
        std::function<void(const rpc::JobFailure&)> failed = std::move(on_job_failed_);
        on_job_failed_ = nullptr;
        mu_.Unlock();
        failed(response.job_failure());
        mu_.Lock();
      }
    } else if (on_lost_ && absl::Now() - last_success >= lost_after_) {
      std::function<void(const absl::Status&)> lost = std::move(on_lost_);
      on_lost_ = nullptr;
      const absl::Status error = last_heartbeat_status_;
      mu_.Unlock();
      lost(error);
      mu_.Lock();
    }
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_heartbeats_ || heartbeat_soon_; };
    mu_.AwaitWithTimeout(absl::Condition(&wake), interval);
    heartbeat_soon_ = false;
  }
}

std::string DescribeJobFailure(const rpc::JobFailure& failure) {
  std::string text = failure.failures_size() > 0
                         ? failure.failures(0)
                         : absl::StrCat("worker ", failure.rank(), " (member ", failure.member_id(),
                                        "): ", failure.reason());
  for (int i = 1; i < failure.failures_size(); ++i) {
    absl::StrAppend(&text, i == 1 ? " (then " : "; ", failure.failures(i),
                    i + 1 == failure.failures_size() ? ")" : "");
  }
  return text;
}

uint64_t CoordinatorClient::last_map_version() const {
  absl::MutexLock lock(&mu_);
  return last_map_version_;
}

absl::Status CoordinatorClient::last_heartbeat_status() const {
  absl::MutexLock lock(&mu_);
  return last_heartbeat_status_;
}

absl::StatusOr<rpc::ShardMap> CoordinatorClient::GetShardMap(uint64_t min_version,
                                                             absl::Duration timeout) {
  rpc::GetShardMapRequest request;
  request.set_min_version(min_version);
  rpc::ShardMap response;
  grpc::ClientContext context;
  SetTimeout(&context, timeout);
  PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->GetShardMap(&context, request, &response)));
  return response;
}

absl::Status CoordinatorClient::KvSet(const std::string& key, const std::string& value) {
  return Retrying([&]() -> absl::Status {
    rpc::KvSetRequest request;
    request.set_key(key);
    request.set_value(value);
    rpc::KvSetResponse response;
    grpc::ClientContext context;
    SetTimeout(&context, kRpcTimeout);
    return FromGrpcStatus(stub_->KvSet(&context, request, &response));
  });
}

absl::StatusOr<std::vector<std::string>> CoordinatorClient::KvGet(
    const std::vector<std::string>& keys) {
  return Retrying([&]() -> absl::StatusOr<std::vector<std::string>> {
    rpc::KvGetRequest request;
    for (const std::string& key : keys) request.add_keys(key);
    rpc::KvGetResponse response;
    grpc::ClientContext context;
    SetTimeout(&context, kRpcTimeout);
    PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->KvGet(&context, request, &response)));
    return std::vector<std::string>(response.values().begin(), response.values().end());
  });
}

absl::StatusOr<std::vector<std::string>> CoordinatorClient::KvWait(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  return Retrying([&]() -> absl::StatusOr<std::vector<std::string>> {
    rpc::KvGetRequest request;
    for (const std::string& key : keys) request.add_keys(key);
    grpc::ClientContext context;
    if (timeout != absl::InfiniteDuration()) {
      // timeout_ms 0 means "no limit" to the coordinator: ask for at least 1 ms.
      const int64_t ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 1,
                                             std::numeric_limits<uint32_t>::max());
      request.set_timeout_ms(static_cast<uint32_t>(ms));
      SetTimeout(&context, timeout + kWaitGrace);
    }
    rpc::KvGetResponse response;
    PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->KvWait(&context, request, &response)));
    return std::vector<std::string>(response.values().begin(), response.values().end());
  });
}

absl::StatusOr<rpc::ClockState> CoordinatorClient::ReportClock(uint32_t member_id, int64_t clock) {
  return Retrying([&]() -> absl::StatusOr<rpc::ClockState> {
    rpc::ReportClockRequest request;
    request.set_member_id(member_id);
    request.set_clock(clock);
    rpc::ClockState response;
    grpc::ClientContext context;
    SetTimeout(&context, kRpcTimeout);
    PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->ReportClock(&context, request, &response)));
    return response;
  });
}

absl::StatusOr<rpc::ClockState> CoordinatorClient::WaitClock(int64_t clock,
                                                             absl::Duration timeout) {
  return Retrying([&]() -> absl::StatusOr<rpc::ClockState> {
    rpc::WaitClockRequest request;
    request.set_clock(clock);
    rpc::ClockState response;
    grpc::ClientContext context;
    SetTimeout(&context, timeout);
    PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->WaitClock(&context, request, &response)));
    return response;
  });
}

absl::StatusOr<rpc::ClusterStatus> CoordinatorClient::GetStatus() {
  return Retrying([&]() -> absl::StatusOr<rpc::ClusterStatus> {
    rpc::StatusRequest request;
    rpc::ClusterStatus response;
    grpc::ClientContext context;
    SetTimeout(&context, kRpcTimeout);
    PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->GetStatus(&context, request, &response)));
    return response;
  });
}

absl::StatusOr<rpc::CheckpointResponse> CoordinatorClient::Checkpoint(
    int64_t step, std::vector<rpc::CheckpointWorkerState> workers, absl::Duration timeout) {
  rpc::CheckpointRequest request;
  request.set_step(step);
  for (rpc::CheckpointWorkerState& w : workers) *request.add_workers() = std::move(w);
  rpc::CheckpointResponse response;
  grpc::ClientContext context;
  SetTimeout(&context, timeout);
  PS_RETURN_IF_ERROR(FromGrpcStatus(stub_->StartCheckpoint(&context, request, &response)));
  return response;
}

}  // namespace ps

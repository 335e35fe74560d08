#include "common/coordinator_client.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/security.h"
#include "common/grpc_status.h"
#include "common/net_address.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// How much longer than its own timeout_ms a KvWait call may take, so that the coordinator's
// answer (naming the missing keys) arrives before gRPC's deadline.
constexpr absl::Duration kWaitGrace = absl::Seconds(1);

// The deadline of the calls sent without waiting for their answer.
constexpr absl::Duration kAsyncTimeout = absl::Seconds(5);

// Sets the deadline `timeout` from now; an infinite timeout sets none.
void SetTimeout(grpc::ClientContext* context, absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return;
  context->set_deadline(absl::ToChronoTime(absl::Now() + std::max(timeout, absl::ZeroDuration())));
}

// Sets `deadline`; absl::InfiniteFuture() sets none.
void SetDeadline(grpc::ClientContext* context, absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return;
  context->set_deadline(absl::ToChronoTime(deadline));
}

absl::Time DeadlineIn(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration()
             ? absl::InfiniteFuture()
             : absl::Now() + std::max(timeout, absl::ZeroDuration());
}

// How a standby names the leader in its UNAVAILABLE message.
constexpr absl::string_view kLeaderIs = "; the leader is ";

const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseCoordinatorAddresses(absl::string_view list) {
  std::vector<std::string> addresses;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator addresses \"", list, "\": empty entry ", addresses.size() + 1,
                       " (expected HOST:PORT, or several comma-separated)"));
    }
    if (const absl::StatusOr<HostPort> parsed = ParseHostPort(entry, AddressUse::kDial);
        !parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator addresses: ", parsed.status().message()));
    }
    if (std::find(addresses.begin(), addresses.end(), entry) != addresses.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator addresses: \"", entry, "\" is listed twice"));
    }
    addresses.emplace_back(entry);
  }
  return addresses;
}

std::string LeaderNamedIn(absl::string_view message) {
  const size_t at = message.find(kLeaderIs);
  if (at == absl::string_view::npos) return "";
  absl::string_view leader = message.substr(at + kLeaderIs.size());
  // The address ends the message (or a word of gRPC's after it).
  leader = leader.substr(0, leader.find_first_of(" ;,)"));
  return std::string(leader);
}

namespace {

// The index of leader named in `message` in `addresses`, unless it is `at`.
std::optional<size_t> NamedLeader(const std::vector<std::string>& addresses, size_t at,
                                  absl::string_view message) {
  const std::string leader = LeaderNamedIn(message);
  if (leader.empty()) return std::nullopt;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i] == leader && i != at) return i;
  }
  return std::nullopt;
}

}  // namespace

std::optional<size_t> NextCoordinator(const std::vector<std::string>& addresses, size_t at,
                                      absl::string_view message, const std::vector<bool>& tried) {
  if (const std::optional<size_t> named = NamedLeader(addresses, at, message);
      named.has_value() && !tried[*named]) {
    return named;
  }
  for (size_t step = 1; step < addresses.size(); ++step) {
    const size_t i = (at + step) % addresses.size();
    if (!tried[i]) return i;
  }
  return std::nullopt;
}

size_t SuggestedCoordinator(const std::vector<std::string>& addresses, size_t at,
                            absl::string_view message) {
  return NamedLeader(addresses, at, message).value_or((at + 1) % addresses.size());
}

std::optional<size_t> WaitForAnyConnected(
    const std::vector<std::shared_ptr<grpc::Channel>>& channels, absl::Time deadline) {
  if (channels.size() == 1) {
    const auto until = deadline == absl::InfiniteFuture()
                           ? std::chrono::system_clock::time_point::max()
                           : absl::ToChronoTime(deadline);
    if (channels[0]->WaitForConnected(until)) return 0;
    return std::nullopt;
  }
  // Every channel tries to connect; the first one up (in list order when several are) wins.
  for (size_t round = 0;; ++round) {
    for (size_t i = 0; i < channels.size(); ++i) {
      if (channels[i]->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) return i;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return std::nullopt;
    // Waits a little for a change of one of them, in turn.
    const std::shared_ptr<grpc::Channel>& watched = channels[round % channels.size()];
    watched->WaitForStateChange(
        watched->GetState(false),
        absl::ToChronoTime(std::min(deadline, now + absl::Milliseconds(10))));
  }
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& addresses, absl::Duration timeout,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  PS_ASSIGN_OR_RETURN(std::vector<std::string> list, ParseCoordinatorAddresses(addresses));
  // kMaxMessageBytes both ways; a coordinator that restarts is back within seconds: reconnect
  // soon, not after gRPC's default backoff of up to two minutes.
  grpc_util::ChannelOptions options = grpc_util::CoordinatorChannelOptions();
  const bool plaintext = credentials == nullptr;
  options.credentials = std::move(credentials);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& address : list) {
    channels.push_back(grpc_util::NewChannel(address, options));
  }
  const std::optional<size_t> up = WaitForAnyConnected(channels, DeadlineIn(timeout));
  if (!up.has_value()) {
    // A TLS handshake that fails looks the same from here as nobody listening: say which
    // security this side used, the likeliest mismatch.
    return absl::UnavailableError(absl::StrCat(
        list.size() == 1 ? "coordinator at " : "no coordinator of ", addresses,
        list.size() == 1 ? " not" : "", " reachable within ", absl::FormatDuration(timeout), " (",
        grpc_util::UnreachableHint(!plaintext), ")"));
  }
  std::vector<std::unique_ptr<Stub>> stubs;
  for (const std::shared_ptr<grpc::Channel>& channel : channels) {
    stubs.push_back(rpc::Coordinator::NewStub(channel));
  }
  auto client = std::unique_ptr<CoordinatorClient>(
      new CoordinatorClient(std::move(list), std::move(stubs), *up));
  client->register_wait_ = timeout;
  return client;
}

std::string CoordinatorClient::address() const { return addresses_[current()]; }

size_t CoordinatorClient::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

bool CoordinatorClient::MovesOn(const absl::Status& status, bool heartbeat) {
  if (heartbeat && absl::IsDeadlineExceeded(status)) return true;
  return absl::IsUnavailable(status) && !absl::StartsWith(status.message(), "shard map not ready");
}

std::optional<size_t> CoordinatorClient::Next(size_t at, const absl::Status& status,
                                              const std::vector<bool>& tried) {
  {
    absl::MutexLock lock(&mu_);
    if (current_ == at) current_ = SuggestedCoordinator(addresses_, at, status.message());
  }
  return NextCoordinator(addresses_, at, status.message(), tried);
}

void CoordinatorClient::Answered(size_t at) {
  absl::MutexLock lock(&mu_);
  current_ = at;
}

void CoordinatorClient::RecordClock(uint32_t member_id, int64_t clock) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = clocks_.try_emplace(member_id, clock);
  if (!inserted) it->second = std::max(it->second, clock);
}

template <typename Fn>
auto CoordinatorClient::OnLeader(absl::Time deadline, Fn fn) -> decltype(fn(nullptr, nullptr)) {
  std::vector<bool> tried(addresses_.size(), false);
  size_t at = current();
  // A call that does not wait gives each address it tries a share of its deadline, so that a
  // coordinator whose host is cut off (its packets dropped, no refusal) cannot take all of it.
  const bool share = addresses_.size() > 1 && deadline - absl::Now() <= kRpcTimeout;
  while (true) {
    tried[at] = true;
    grpc::ClientContext context;
    if (share) {
      const int untried = static_cast<int>(std::count(tried.begin(), tried.end(), false)) + 1;
      SetDeadline(&context, absl::Now() + (deadline - absl::Now()) / untried);
    } else {
      SetDeadline(&context, deadline);
    }
    auto result = fn(stubs_[at].get(), &context);
    if (share && absl::IsDeadlineExceeded(StatusOf(result)) && absl::Now() < deadline) {
      // Its share ran out, not the call's deadline: the next address gets what is left.
      result = absl::UnavailableError(absl::StrCat("coordinator ", addresses_[at],
                                                   " did not answer in its share of the call's "
                                                   "deadline (",
                                                   StatusOf(result).message(), ")"));
    }
    if (absl::IsCancelled(StatusOf(result))) {
      // This client cancels none of these calls: the coordinator did, as it stopped serving (it
      // shut down, or stopped leading). Another coordinator, or this one later, may answer.
      result = absl::UnavailableError(absl::StrCat("coordinator ", addresses_[at],
                                                   " stopped serving during the call (",
                                                   StatusOf(result).message(), ")"));
    }
    if (!MovesOn(StatusOf(result))) {
      if (addresses_.size() > 1) Answered(at);
      return result;
    }
    if (addresses_.size() == 1) return result;
    const std::optional<size_t> next = Next(at, StatusOf(result), tried);
    if (!next.has_value() || absl::Now() >= deadline) return result;
    at = *next;
  }
}

CoordinatorClient::~CoordinatorClient() {
  StopHeartbeats();
  // The calls sent without waiting end before the stub and this go.
  absl::MutexLock lock(&async_mu_);
  async_mu_.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &async_in_flight_));
}

template <typename Response, typename Request>
struct CoordinatorClient::AsyncCall {
  Request request;
  Response response;
  std::unique_ptr<grpc::ClientContext> context;
  absl::Time deadline;
  std::vector<bool> tried;
  size_t at = 0;
  std::function<void(Stub*, grpc::ClientContext*, const Request*, Response*,
                     std::function<void(grpc::Status)>)>
      send;
  std::function<void(const grpc::Status&, Response*)> done;
};

template <typename Response, typename Request, typename Send>
void CoordinatorClient::CallAsync(Request request, absl::Duration timeout, Send send,
                                  std::function<void(const grpc::Status&, Response*)> done) {
  auto* call = new AsyncCall<Response, Request>;
  call->request = std::move(request);
  call->deadline = DeadlineIn(timeout);
  call->tried.assign(addresses_.size(), false);
  call->at = current();
  call->send = std::move(send);
  call->done = std::move(done);
  {
    absl::MutexLock lock(&async_mu_);
    ++async_in_flight_;
  }
  StartAttempt(call);
}

template <typename Response, typename Request>
void CoordinatorClient::StartAttempt(AsyncCall<Response, Request>* call) {
  call->tried[call->at] = true;
  call->context = std::make_unique<grpc::ClientContext>();
  SetDeadline(call->context.get(), call->deadline);
  call->response.Clear();
  call->send(stubs_[call->at].get(), call->context.get(), &call->request, &call->response,
             [this, call](grpc::Status status) {
               const absl::Status result = FromGrpcStatus(status);
               if (addresses_.size() > 1) {
                 if (!MovesOn(result)) {
                   Answered(call->at);
                 } else if (const std::optional<size_t> next = Next(call->at, result, call->tried);
                            next.has_value() && absl::Now() < call->deadline) {
                   call->at = *next;
                   StartAttempt(call);  // on to the next coordinator
                   return;
                 }
               }
               call->done(status, &call->response);
               delete call;
               // Counted until `done` returned: the destructor waits for it.
               absl::MutexLock lock(&async_mu_);
               --async_in_flight_;
             });
}

void CoordinatorClient::SetRetryWindow(absl::Duration window) {
  absl::MutexLock lock(&mu_);
  retry_window_ = window;
}

absl::Duration CoordinatorClient::retry_window() const {
  absl::MutexLock lock(&mu_);
  return retry_window_;
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

namespace {

// An answer that says the call never reached a leader, so that it changed nothing: a standby's or
// a former leader's, or a connection that could not be made.
bool NeverReachedALeader(const absl::Status& status) {
  if (!absl::IsUnavailable(status)) return false;
  const absl::string_view message = status.message();
  return absl::StrContains(message, "is a standby") ||
         absl::StrContains(message, "no longer the leader") ||
         absl::StrContains(message, "coordinator is starting") ||
         absl::StrContains(message, "failed to connect") ||
         absl::StrContains(message, "Connection refused");
}

}  // namespace

absl::StatusOr<rpc::RegisterResponse> CoordinatorClient::Register(rpc::Role role,
                                                                  const std::string& address,
                                                                  int32_t rank) {
  rpc::RegisterRequest request;
  request.set_role(role);
  request.set_address(address);
  request.set_rank(rank);
  // While no coordinator leads (they are starting, or one is taking over) the registration is
  // tried again: it reached none, so it cannot register twice. Any other answer is final.
  const absl::Time until = absl::Now() + std::max(register_wait_, retry_window());
  absl::Duration pause = absl::Milliseconds(20);
  while (true) {
    absl::StatusOr<rpc::RegisterResponse> registered = OnLeader(
        DeadlineIn(kRpcTimeout),
        [&](Stub* stub, grpc::ClientContext* context) -> absl::StatusOr<rpc::RegisterResponse> {
          rpc::RegisterResponse response;
          PS_RETURN_IF_ERROR(FromGrpcStatus(stub->Register(context, request, &response)));
          return response;
        });
    if (!NeverReachedALeader(registered.status()) || absl::Now() + pause > until) {
      return registered;
    }
    absl::SleepFor(pause);
    pause = std::min(2 * pause, absl::Milliseconds(500));
  }
}

void CoordinatorClient::GetMemberIdsAsync(
    absl::Duration timeout, std::function<void(absl::StatusOr<rpc::MemberIds>)> done) {
  CallAsync<rpc::MemberIds>(
      rpc::MemberIdsRequest(), timeout,
      [](Stub* stub, auto* context, auto* request, auto* response, auto sent) {
        stub->async()->GetMemberIds(context, request, response, std::move(sent));
      },
      [done = std::move(done)](const grpc::Status& status, rpc::MemberIds* response) {
        absl::StatusOr<rpc::MemberIds> result = std::move(*response);
        if (!status.ok()) result = FromGrpcStatus(status);
        done(std::move(result));
      });
}

absl::StatusOr<uint64_t> CoordinatorClient::Heartbeat(uint32_t member_id) {
  rpc::HeartbeatRequest request;
  request.set_member_id(member_id);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = clocks_.find(member_id); it != clocks_.end()) request.set_clock(it->second);
  }
  return OnLeader(
      DeadlineIn(kRpcTimeout),
      [&](Stub* stub, grpc::ClientContext* context) -> absl::StatusOr<uint64_t> {
        rpc::HeartbeatResponse response;
        PS_RETURN_IF_ERROR(FromGrpcStatus(stub->Heartbeat(context, request, &response)));
        return response.map_version();
      });
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
  CallAsync<rpc::ReportFailureResponse>(
      std::move(request), kAsyncTimeout,
      [](Stub* stub, auto* context, auto* request, auto* response, auto sent) {
        stub->async()->ReportFailure(context, request, response, std::move(sent));
      },
      [](const grpc::Status&, rpc::ReportFailureResponse*) {});
}

void CoordinatorClient::ReportClockAsync(uint32_t member_id, int64_t clock) {
  RecordClock(member_id, clock);
  rpc::ReportClockRequest request;
  request.set_member_id(member_id);
  request.set_clock(clock);
  CallAsync<rpc::ClockState>(
      std::move(request), kAsyncTimeout,
      [](Stub* stub, auto* context, auto* request, auto* response, auto sent) {
        stub->async()->ReportClock(context, request, response, std::move(sent));
      },
      [](const grpc::Status&, rpc::ClockState*) {});
}

void CoordinatorClient::SetOnJobFailed(std::function<void(const rpc::JobFailure&)> failed) {
  absl::MutexLock lock(&mu_);
  on_job_failed_ = std::move(failed);
}

absl::Status CoordinatorClient::Leave(uint32_t member_id, absl::Duration timeout) {
  rpc::LeaveRequest request;
  request.set_member_id(member_id);
  return OnLeader(DeadlineIn(timeout), [&](Stub* stub, grpc::ClientContext* context) {
    rpc::LeaveResponse response;
    return FromGrpcStatus(stub->Leave(context, request, &response));
  });
}

absl::Status CoordinatorClient::ReportWorkerFailure(uint32_t member_id, const std::string& reason) {
  rpc::ReportFailureRequest request;
  request.set_reporter(member_id);
  request.set_reporter_failed(true);
  request.set_reason(reason);
  return Retrying([&] {
    return OnLeader(DeadlineIn(kRpcTimeout), [&](Stub* stub, grpc::ClientContext* context) {
      rpc::ReportFailureResponse response;
      return FromGrpcStatus(stub->ReportFailure(context, request, &response));
    });
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
  // A slow answer is still worth having for up to a second even with shorter intervals.
  const absl::Duration timeout = std::min(std::max(interval, absl::Seconds(1)), kRpcTimeout);
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
    if (auto it = clocks_.find(member_id); it != clocks_.end()) request.set_clock(it->second);
    // The current coordinator, then at once the next candidates while they fail.
    std::vector<bool> tried(addresses_.size(), false);
    size_t at = current_;
    grpc::Status status;
    rpc::HeartbeatResponse response;
    while (true) {
      tried[at] = true;
      grpc::ClientContext context;
      SetTimeout(&context, timeout);
      // Waits for the channel within the deadline rather than failing at once while it is down:
      // this call then drives the reconnection. Otherwise a coordinator back at its address is
      // found only when gRPC's backup poller (every 5 s) happens to read the connection's events,
      // and members could miss heartbeats for tens of seconds meanwhile (found with
      // GRPC_TRACE=subchannel in coordinator_restart_test under load).
      context.set_wait_for_ready(true);
      heartbeat_call_ = &context;
      response.Clear();
      mu_.Unlock();
      status = stubs_[at]->Heartbeat(&context, request, &response);
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        // Waiting for the channel, the heartbeat ends at its deadline when no coordinator is
        // there to connect to: that is the coordinator being unavailable.
        status = grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            absl::StrCat("coordinator ", addresses_[at], " did not answer a heartbeat within ",
                         absl::FormatDuration(timeout),
                         " (no connection, or too busy): ", status.error_message()));
      }
      mu_.Lock();
      heartbeat_call_ = nullptr;
      if (stop_heartbeats_ || addresses_.size() == 1) break;
      const absl::Status result = FromGrpcStatus(status);
      if (!MovesOn(result, /*heartbeat=*/true)) {
        current_ = at;
        break;
      }
      mu_.Unlock();
      const std::optional<size_t> next = Next(at, result, tried);
      mu_.Lock();
      if (!next.has_value() || stop_heartbeats_) break;
      at = *next;
    }
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
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_heartbeats_ || heartbeat_soon_;
    };
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
  return OnLeader(
      DeadlineIn(timeout),
      [&](Stub* stub, grpc::ClientContext* context) -> absl::StatusOr<rpc::ShardMap> {
        rpc::ShardMap response;
        PS_RETURN_IF_ERROR(FromGrpcStatus(stub->GetShardMap(context, request, &response)));
        return response;
      });
}

absl::Status CoordinatorClient::KvSet(const std::string& key, const std::string& value) {
  rpc::KvSetRequest request;
  request.set_key(key);
  request.set_value(value);
  return Retrying([&] {
    return OnLeader(DeadlineIn(kRpcTimeout), [&](Stub* stub, grpc::ClientContext* context) {
      rpc::KvSetResponse response;
      return FromGrpcStatus(stub->KvSet(context, request, &response));
    });
  });
}

absl::StatusOr<std::vector<std::string>> CoordinatorClient::KvGet(
    const std::vector<std::string>& keys) {
  rpc::KvGetRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  return Retrying([&] {
    return OnLeader(
        DeadlineIn(kRpcTimeout),
        [&](Stub* stub, grpc::ClientContext* context) -> absl::StatusOr<std::vector<std::string>> {
          rpc::KvGetResponse response;
          PS_RETURN_IF_ERROR(FromGrpcStatus(stub->KvGet(context, request, &response)));
          return std::vector<std::string>(response.values().begin(), response.values().end());
        });
  });
}

absl::StatusOr<std::vector<std::string>> CoordinatorClient::KvWait(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  return Retrying([&] {
    // The attempts on the several coordinators share the wait.
    const absl::Time until = DeadlineIn(timeout);
    return OnLeader(
        until == absl::InfiniteFuture() ? until : until + kWaitGrace,
        [&](Stub* stub, grpc::ClientContext* context) -> absl::StatusOr<std::vector<std::string>> {
          rpc::KvGetRequest request;
          for (const std::string& key : keys) request.add_keys(key);
          if (until != absl::InfiniteFuture()) {
            // timeout_ms 0 means "no limit" to the coordinator: ask for at least 1 ms.
            const int64_t ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(until - absl::Now()),
                                                   1, std::numeric_limits<uint32_t>::max());
            request.set_timeout_ms(static_cast<uint32_t>(ms));
          }
          rpc::KvGetResponse response;
          PS_RETURN_IF_ERROR(FromGrpcStatus(stub->KvWait(context, request, &response)));
          return std::vector<std::string>(response.values().begin(), response.values().end());
        });
  });
}

absl::StatusOr<rpc::ClockState> CoordinatorClient::ReportClock(uint32_t member_id, int64_t clock) {
  RecordClock(member_id, clock);
  rpc::ReportClockRequest request;
  request.set_member_id(member_id);
  request.set_clock(clock);
  return Retrying([&] {
    return OnLeader(
        DeadlineIn(kRpcTimeout),
        [&](Stub* stub, grpc::ClientContext* context) -> absl::StatusOr<rpc::ClockState> {
          rpc::ClockState response;
          PS_RETURN_IF_ERROR(FromGrpcStatus(stub->ReportClock(context, request, &response)));
          return response;
        });
  });
}

absl::StatusOr<rpc::ClockState> CoordinatorClient::WaitClock(int64_t clock,
                                                             absl::Duration timeout) {
  rpc::WaitClockRequest request;
  request.set_clock(clock);
  return Retrying([&] {
    return OnLeader(
        DeadlineIn(timeout),
        [&](Stub* stub, grpc::ClientContext* context) -> absl::StatusOr<rpc::ClockState> {
          rpc::ClockState response;
          PS_RETURN_IF_ERROR(FromGrpcStatus(stub->WaitClock(context, request, &response)));
          return response;
        });
  });
}

absl::StatusOr<rpc::ClusterStatus> CoordinatorClient::GetStatus() {
  return Retrying([&] {
    return OnLeader(
        DeadlineIn(kRpcTimeout),
        [&](Stub* stub, grpc::ClientContext* context) -> absl::StatusOr<rpc::ClusterStatus> {
          rpc::ClusterStatus response;
          PS_RETURN_IF_ERROR(
              FromGrpcStatus(stub->GetStatus(context, rpc::StatusRequest(), &response)));
          return response;
        });
  });
}

absl::StatusOr<rpc::CheckpointResponse> CoordinatorClient::Checkpoint(
    int64_t step, std::vector<rpc::CheckpointWorkerState> workers, absl::Duration timeout) {
  rpc::CheckpointRequest request;
  request.set_step(step);
  for (rpc::CheckpointWorkerState& w : workers) *request.add_workers() = std::move(w);
  return OnLeader(
      DeadlineIn(timeout),
      [&](Stub* stub, grpc::ClientContext* context) -> absl::StatusOr<rpc::CheckpointResponse> {
        rpc::CheckpointResponse response;
        PS_RETURN_IF_ERROR(FromGrpcStatus(stub->StartCheckpoint(context, request, &response)));
        return response;
      });
}

absl::StatusOr<rpc::RestoreCheckpointResponse> CoordinatorClient::RestoreCheckpoint(
    const std::string& path, absl::Duration timeout) {
  rpc::RestoreCheckpointRequest request;
  request.set_path(path);
  return OnLeader(
      DeadlineIn(timeout),
      [&](Stub* stub,
          grpc::ClientContext* context) -> absl::StatusOr<rpc::RestoreCheckpointResponse> {
        rpc::RestoreCheckpointResponse response;
        PS_RETURN_IF_ERROR(FromGrpcStatus(stub->RestoreCheckpoint(context, request, &response)));
        return response;
      });
}

}  // namespace ps

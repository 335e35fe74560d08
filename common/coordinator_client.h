// The client side of the coordinator service (proto/coordinator.proto), used by servers, workers,
// the client library and ps_ctl.
#ifndef PS_COMMON_COORDINATOR_CLIENT_H_
#define PS_COMMON_COORDINATOR_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.grpc.pb.h"

namespace ps {

// A CoordinatorClient is a connection to a job's coordinators, with an optional background thread
// that heartbeats for one member. Thread-safe.
//
// A job may run several coordinators: one leads, the others stand by and answer every call
// UNAVAILABLE "coordinator HOST:PORT is a standby; the leader is LEADER_HOST:PORT" (without the
// leader when they do not know it), a deposed leader UNAVAILABLE "coordinator HOST:PORT is no
// longer the leader", and one that is down refuses connections (UNAVAILABLE from gRPC). The client
// is given all their addresses and keeps a channel to each and a current one, where every call
// goes first. A call that fails UNAVAILABLE there (but for the leader's own "shard map not ready")
// is made again at once, within the same deadline, on another address: the leader the answer
// names when it is in the list and this call has not tried it yet, else the next address in list
// order that it has not tried; it fails with the last answer once every address was tried (or its
// deadline passed). The current address follows: it becomes the one that answered other than
// UNAVAILABLE, and after a failure the one suggested (the leader named, else the next in order), so
// that the next call starts there. A single address is a list of one: nothing moves. A call the
// coordinator cancelled (it stopped serving: it shut down or stopped leading) counts as
// UNAVAILABLE, since this client cancels none.
//
// Every call has a deadline: `timeout` for the calls that wait (absl::InfiniteDuration() waits
// without one), kRpcTimeout for the others, shared by its attempts on the several addresses: a
// call of kRpcTimeout or less gives each attempt an equal share of what is left (a coordinator
// whose host is cut off, dropping packets, would otherwise take it all), a longer one gives the
// first attempt all of it.
// Errors are the coordinator's (see server/coordinator/coordinator.h) or gRPC's: UNAVAILABLE when
// no coordinator can be reached or none leads, DEADLINE_EXCEEDED when it does not answer in time.
class CoordinatorClient {
 public:
  // The deadline of the calls that do not wait.
  static constexpr absl::Duration kRpcTimeout = absl::Seconds(10);
  // The largest message sent or received; the rendezvous store's values reach 16 MiB.
  static constexpr int kMaxMessageBytes = 256 << 20;

  // Connects to the coordinators at `addresses`: "host:port", or several comma-separated
  // ("a:1,b:2,c:3", ParseCoordinatorAddresses), the job's coordinators, with `credentials` (null:
  // plaintext; see grpc_util::Security). Succeeds once a connection to any of them is up (the
  // first in list order that is up becomes the current address; it need not lead: the first
  // call follows). INVALID_ARGUMENT naming the entry for a bad list; UNAVAILABLE naming the
  // address(es) if no connection is up within `timeout`.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& addresses, absl::Duration timeout,
      std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  // Stops the heartbeat thread, if any.
  ~CoordinatorClient();

  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  // The current coordinator's host:port (where the next call goes first; it moves as the class
  // comment says).
  std::string address() const;
  // Every coordinator's host:port, in the order given to Connect.
  const std::vector<std::string>& addresses() const { return addresses_; }

  // Registers a member: `address` is the host:port a server serves on (optional for others),
  // `rank` a worker's requested rank or -1. Returns the member_id, rank, job and heartbeat
  // interval. While no coordinator leads (every one answers that it stands by, or cannot be
  // reached) it is tried again, for up to Connect's timeout or the retry window, whichever is
  // longer: such a call reached no leader, so it registers once.
  absl::StatusOr<rpc::RegisterResponse> Register(rpc::Role role, const std::string& address,
                                                 int32_t rank);

  // The member ids the coordinator has handed out (MemberIds: [first_member_id, next_member_id)),
  // asked without blocking (following the leader in the background): `done` is called once, on a
  // gRPC thread, with them or the call's error (UNAVAILABLE, DEADLINE_EXCEEDED after `timeout`).
  // The destructor waits for `done`.
  void GetMemberIdsAsync(absl::Duration timeout,
                         std::function<void(absl::StatusOr<rpc::MemberIds>)> done);

  // One heartbeat for `member_id` (carrying its clock, as the heartbeat thread's do); returns the
  // shard map's version (0 before it exists). NOT_FOUND for an unknown member.
  absl::StatusOr<uint64_t> Heartbeat(uint32_t member_id);

  // Starts a thread that heartbeats for `member_id` every `interval` (> 0) until StopHeartbeats or
  // destruction. FAILED_PRECONDITION if heartbeats are already running; INVALID_ARGUMENT for an
  // interval <= 0. A heartbeat that fails UNAVAILABLE or DEADLINE_EXCEEDED (its own deadline:
  // the interval, at least 1 s, at most kRpcTimeout) on the current address is sent again at
  // once to the next candidate, as the class comment says, each try with its own deadline, until
  // one answers otherwise or every address was tried in this interval: after a takeover the
  // member finds the new leader within about one interval. The outcome of the interval's last try
  // is recorded (last_heartbeat_status); a failed interval is retried at the next. Every
  // heartbeat carries the member's clock: the largest one reported through this client
  // (ReportClock, ReportClockAsync), none before any, so that a new leader rebuilds the clocks.
  absl::Status StartHeartbeats(uint32_t member_id, absl::Duration interval);

  // Stops the heartbeat thread (cancelling a heartbeat in flight) and joins it. Does nothing when
  // none runs.
  void StopHeartbeats();

  // Makes the heartbeat thread send its next heartbeat now rather than at the end of its
  // interval (a server whose copies just caught up says so at once). Does nothing without the
  // thread.
  void HeartbeatSoon();

  // Servers: called by the heartbeat thread before each heartbeat (without any lock of this
  // client); what it returns goes with the heartbeat (HeartbeatRequest.shards). Set it before
  // StartHeartbeats.
  void SetShardProgressSource(std::function<std::vector<rpc::ShardProgress>()> source);

  // Has the heartbeat thread call `lost`, once, with the latest error, when its heartbeats have
  // failed for `after` (> 0) with no success in between (since StartHeartbeats when none ever
  // succeeded): the coordinator is gone, and a daemon should say so and exit rather than wait
  // forever. `lost` runs on the heartbeat thread without any lock of this client; it must not
  // call StopHeartbeats. Set it before StartHeartbeats. Default: heartbeats are retried forever.
  void SetOnCoordinatorLost(absl::Duration after, std::function<void(const absl::Status&)> lost);

  // Has the heartbeat thread call `failed`, once, when a heartbeat's answer says that the job
  // failed (HeartbeatResponse.job_failure): a daemon should say why (DescribeJobFailure) and exit
  // with an error. `failed` runs on the heartbeat thread without any lock of this client; it must
  // not call StopHeartbeats. Set it before StartHeartbeats. Default: the failure is ignored.
  void SetOnJobFailed(std::function<void(const rpc::JobFailure&)> failed);

  // Worker `member_id` is done with the job: its silence from now on is not a failure. Waits up
  // to `timeout` for the answer. The coordinator's error (NOT_FOUND for an unknown member), or
  // gRPC's.
  absl::Status Leave(uint32_t member_id, absl::Duration timeout);

  // Worker `member_id` cannot go on, for `reason`, and is about to exit: the job fails. Retried
  // within the retry window while the coordinator is away. The coordinator's error (NOT_FOUND,
  // FAILED_PRECONDITION for a member that is not a worker), or gRPC's.
  absl::Status ReportWorkerFailure(uint32_t member_id, const std::string& reason);

  // Tells the coordinator that `reporter` could not reach server `server_id`, so that it checks
  // the server at once rather than wait for its heartbeats to stop. Returns at once (the report
  // follows the leader in the background, for up to 5 s); the outcome is not reported (the map
  // follows). At most one report per server every kReportInterval.
  void ReportFailureAsync(uint32_t reporter, uint32_t server_id, const std::string& reason);
  static constexpr absl::Duration kReportInterval = absl::Milliseconds(50);

  // The map version from the latest successful heartbeat of the thread (0 before any).
  uint64_t last_map_version() const;
  // The outcome of the thread's latest heartbeat (OK before any).
  absl::Status last_heartbeat_status() const;

  // Waits up to `timeout` for the shard map with version >= min_version. UNAVAILABLE "shard map
  // not ready: K of N servers registered" when it does not come.
  absl::StatusOr<rpc::ShardMap> GetShardMap(uint64_t min_version, absl::Duration timeout);

  // The rendezvous store: values are bytes. KvSet: INVALID_ARGUMENT for an empty key,
  // RESOURCE_EXHAUSTED over 1 KiB keys or 16 MiB values. KvGet: values in order, NOT_FOUND naming
  // the first missing key. KvWait: waits up to `timeout` for every key, DEADLINE_EXCEEDED naming
  // the missing keys.
  absl::Status KvSet(const std::string& key, const std::string& value);
  absl::StatusOr<std::vector<std::string>> KvGet(const std::vector<std::string>& keys);
  absl::StatusOr<std::vector<std::string>> KvWait(const std::vector<std::string>& keys,
                                                  absl::Duration timeout);

  // Reports that worker `member_id` finished step `clock`; returns the clocks after it.
  // FAILED_PRECONDITION if the member is not a worker, NOT_FOUND if unknown. Whatever the outcome,
  // the member's heartbeats carry the largest clock reported through this client from now on.
  absl::StatusOr<rpc::ClockState> ReportClock(uint32_t member_id, int64_t clock);
  // ReportClock without waiting for the answer (which is dropped, as are errors): for workers
  // whose own progress does not wait on the clocks, so that the coordinator can time periodic
  // checkpoints. The coordinator keeps the largest clock, so reports may arrive in any order. The
  // report follows the leader as every call does, and the heartbeats carry the clock (ReportClock).
  void ReportClockAsync(uint32_t member_id, int64_t clock);
  // Waits up to `timeout` until every worker finished step `clock`; DEADLINE_EXCEEDED otherwise.
  absl::StatusOr<rpc::ClockState> WaitClock(int64_t clock, absl::Duration timeout);

  // Calls to the rendezvous store, the clocks and the status (KvSet, KvGet, KvWait,
  // ReportClock, WaitClock, GetStatus) and ReportWorkerFailure that fail UNAVAILABLE on every
  // address (the coordinator is away, maybe restarting from its data_dir, or a takeover is under
  // way and none leads) are tried again from the current address, with pauses growing to 1 s, for
  // up to `window` (default 0: not tried again). Daemons set it; tests of failures leave it.
  void SetRetryWindow(absl::Duration window);

  // Members, shard map, clocks and job name.
  absl::StatusOr<rpc::ClusterStatus> GetStatus();

  // Has the coordinator take a checkpoint (CheckpointRequest: sync jobs' step boundary, or -1,
  // and the workers' state, if given) and waits up to `timeout` for it. The coordinator's error
  // (FAILED_PRECONDITION without a checkpoint_dir or while another checkpoint is taken; a server's
  // error), DEADLINE_EXCEEDED.
  absl::StatusOr<rpc::CheckpointResponse> Checkpoint(
      int64_t step, std::vector<rpc::CheckpointWorkerState> workers, absl::Duration timeout);

  // Has the coordinator put the checkpoint in folder `path` back into the running cluster (its
  // servers' tables; Coordinator.RestoreCheckpoint) and waits up to `timeout` for it. The
  // coordinator's error (FAILED_PRECONDITION for a checkpoint that does not fit the job, with a
  // lost shard, or while another restore is under way; a server's error), DEADLINE_EXCEEDED.
  absl::StatusOr<rpc::RestoreCheckpointResponse> RestoreCheckpoint(const std::string& path,
                                                                   absl::Duration timeout);

 private:
  CoordinatorClient(std::vector<std::string> addresses,
                    std::vector<std::unique_ptr<rpc::Coordinator::Stub>> stubs, size_t current)
      : addresses_(std::move(addresses)), stubs_(std::move(stubs)), current_(current) {}

  // The retry window (SetRetryWindow).
  absl::Duration retry_window() const;

  template <typename Response, typename Request>
  struct AsyncCall;
  using Stub = rpc::Coordinator::Stub;

  void HeartbeatLoop(uint32_t member_id, absl::Duration interval);
  // Sends `request` with `send(stub, context, request, response, done)` (a stub's callback call)
  // to the current coordinator, then, while it fails UNAVAILABLE, to the others (the class
  // comment's rule), each attempt with the deadline `timeout` from now; calls `done(status,
  // response)` with the last attempt's outcome, on a gRPC thread. Counted in flight until `done`
  // returned: the destructor waits for it.
  template <typename Response, typename Request, typename Send>
  void CallAsync(Request request, absl::Duration timeout, Send send,
                 std::function<void(const grpc::Status&, Response*)> done);
  template <typename Response, typename Request>
  void StartAttempt(AsyncCall<Response, Request>* call);
  // Calls `fn(stub, context)` on the current coordinator, then, while it fails UNAVAILABLE, on the
  // others (the class comment's rule), each attempt's context with `deadline`
  // (absl::InfiniteFuture(): none). Returns the last attempt's result.
  template <typename Fn>
  auto OnLeader(absl::Time deadline, Fn fn) -> decltype(fn(nullptr, nullptr));
  // Calls `fn` until it returns other than UNAVAILABLE or the retry window has passed.
  template <typename Fn>
  auto Retrying(Fn fn) -> decltype(fn());
  // Whether an answer sends a call on to another coordinator: UNAVAILABLE but for the leader's
  // own "shard map not ready"; for the heartbeat thread (`heartbeat`) also DEADLINE_EXCEEDED.
  static bool MovesOn(const absl::Status& status, bool heartbeat = false);
  // Coordinator `at` answered `status` (MovesOn): moves the current address from `at` (if still
  // there) to the leader the answer names if listed, else the next in order; returns the address
  // this call tries next, the class comment's rule over the addresses not in `tried`, or nullopt
  // when every one was tried.
  std::optional<size_t> Next(size_t at, const absl::Status& status, const std::vector<bool>& tried);
  // Coordinator `at` answered a call (the leader): it becomes current.
  void Answered(size_t at);
  size_t current() const;
  // Records `clock` for `member_id` when it is the largest yet.
  void RecordClock(uint32_t member_id, int64_t clock);

  // Constant after construction.
  const std::vector<std::string> addresses_;
  // How long Register waits for a leader: Connect's timeout (set once, by Connect).
  absl::Duration register_wait_ = absl::ZeroDuration();
  const std::vector<std::unique_ptr<Stub>> stubs_;  // one per address; thread-safe

  // Serialises starting and stopping the heartbeat thread; never taken under mu_.
  absl::Mutex thread_mu_;
  std::thread heartbeat_thread_ ABSL_GUARDED_BY(thread_mu_);

  absl::Mutex async_mu_;
  int async_in_flight_ ABSL_GUARDED_BY(async_mu_) = 0;
  mutable absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_);  // index into addresses_
  // Per member, the largest clock reported through this client: its heartbeats carry it.
  absl::flat_hash_map<uint32_t, int64_t> clocks_ ABSL_GUARDED_BY(mu_);
  std::function<std::vector<rpc::ShardProgress>()> progress_source_ ABSL_GUARDED_BY(mu_);
  absl::Duration retry_window_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::flat_hash_map<uint32_t, absl::Time> last_report_ ABSL_GUARDED_BY(mu_);
  bool stop_heartbeats_ ABSL_GUARDED_BY(mu_) = false;
  bool heartbeat_soon_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration lost_after_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();
  std::function<void(const absl::Status&)> on_lost_ ABSL_GUARDED_BY(mu_);
  std::function<void(const rpc::JobFailure&)> on_job_failed_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* heartbeat_call_ ABSL_GUARDED_BY(mu_) = nullptr;  // in flight, or null
  uint64_t last_map_version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_heartbeat_status_ ABSL_GUARDED_BY(mu_);
};

// Parses a list of coordinator addresses: "host:port", or several comma-separated ("a:1,b:2").
// INVALID_ARGUMENT naming the entry for an empty list or entry, a bad host:port (ParseHostPort,
// a host and a port in 1..65535), or an address listed twice.
absl::StatusOr<std::vector<std::string>> ParseCoordinatorAddresses(absl::string_view list);

// The leader's host:port that a standby coordinator's UNAVAILABLE message names
// ("coordinator H:P is a standby; the leader is LEADER"), or empty when it names none.
std::string LeaderNamedIn(absl::string_view message);

// Where a call to the coordinators `addresses` goes after addresses[at] answered UNAVAILABLE with
// `message`: the leader the message names (LeaderNamedIn) when it is listed and not `tried`
// (tried[i]: addresses[i] was tried by this call), else the next address after `at` in list
// order that is not `tried`; nullopt when every one was tried.
std::optional<size_t> NextCoordinator(const std::vector<std::string>& addresses, size_t at,
                                      absl::string_view message, const std::vector<bool>& tried);

// Where the next call to `addresses` starts after addresses[at] answered UNAVAILABLE with
// `message`: the leader it names when listed (and not `at`), else the next address in order.
size_t SuggestedCoordinator(const std::vector<std::string>& addresses, size_t at,
                            absl::string_view message);

// The index of the first of `channels` (in order) whose connection is up, trying to connect
// each, by `deadline` (absl::InfiniteFuture(): none); nullopt when none is up by then.
std::optional<size_t> WaitForAnyConnected(
    const std::vector<std::shared_ptr<grpc::Channel>>& channels, absl::Time deadline);

// "worker 1 (member 6): its heartbeats stopped: ..." and the other failures known then, for the
// message of a member that exits because the job failed.
std::string DescribeJobFailure(const rpc::JobFailure& failure);

}  // namespace ps

#endif  // PS_COMMON_COORDINATOR_CLIENT_H_

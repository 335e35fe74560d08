// The client side of the coordinator service (proto/coordinator.proto), used by servers, workers,
// the client library and ps_ctl.
#ifndef PS_COMMON_COORDINATOR_CLIENT_H_
#define PS_COMMON_COORDINATOR_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.grpc.pb.h"

namespace ps {

// A CoordinatorClient is a connection to a job's coordinator, with an optional background thread
// that heartbeats for one member. Thread-safe.
//
// Every call has a deadline: `timeout` for the calls that wait (absl::InfiniteDuration() waits
// without one), kRpcTimeout for the others. Errors
// are the coordinator's (see server/coordinator/coordinator.h) or gRPC's: UNAVAILABLE when the
// coordinator cannot be reached, DEADLINE_EXCEEDED when it does not answer in time.
class CoordinatorClient {
 public:
  // The deadline of the calls that do not wait.
  static constexpr absl::Duration kRpcTimeout = absl::Seconds(10);
  // The largest message sent or received; the rendezvous store's values reach 16 MiB.
  static constexpr int kMaxMessageBytes = 256 << 20;

  // Connects to the coordinator at `address` (host:port) with `credentials` (null: plaintext;
  // see grpc_util::Security). UNAVAILABLE naming the address if the connection is not up within
  // `timeout`.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& address, absl::Duration timeout,
      std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  // Stops the heartbeat thread, if any.
  ~CoordinatorClient();

  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  // The coordinator's host:port.
  const std::string& address() const { return address_; }

  // Registers a member: `address` is the host:port a server serves on (optional for others),
  // `rank` a worker's requested rank or -1. Returns the member_id, rank, job and heartbeat
  // interval.
  absl::StatusOr<rpc::RegisterResponse> Register(rpc::Role role, const std::string& address,
                                                 int32_t rank);

  // The member ids the coordinator has handed out (MemberIds: [first_member_id, next_member_id)),
  // asked without blocking: `done` is called once, on a gRPC thread, with them or the call's
  // error (UNAVAILABLE, DEADLINE_EXCEEDED after `timeout`). The destructor waits for `done`.
  void GetMemberIdsAsync(absl::Duration timeout,
                         std::function<void(absl::StatusOr<rpc::MemberIds>)> done);

  // One heartbeat for `member_id`; returns the shard map's version (0 before it exists).
  // NOT_FOUND for an unknown member.
  absl::StatusOr<uint64_t> Heartbeat(uint32_t member_id);

  // Starts a thread that heartbeats for `member_id` every `interval` (> 0) until StopHeartbeats or
  // destruction. FAILED_PRECONDITION if heartbeats are already running; INVALID_ARGUMENT for an
  // interval <= 0. A failed heartbeat is recorded (last_heartbeat_status) and retried next
  // interval.
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
  // the server at once rather than wait for its heartbeats to stop. Returns at once; the
  // outcome is not reported (the map follows). At most one report per server every
  // kReportInterval.
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
  // FAILED_PRECONDITION if the member is not a worker, NOT_FOUND if unknown.
  absl::StatusOr<rpc::ClockState> ReportClock(uint32_t member_id, int64_t clock);
  // ReportClock without waiting for the answer (which is dropped, as are errors): for workers
  // whose own progress does not wait on the clocks, so that the coordinator can time periodic
  // checkpoints. The coordinator keeps the largest clock, so reports may arrive in any order.
  void ReportClockAsync(uint32_t member_id, int64_t clock);
  // Waits up to `timeout` until every worker finished step `clock`; DEADLINE_EXCEEDED otherwise.
  absl::StatusOr<rpc::ClockState> WaitClock(int64_t clock, absl::Duration timeout);

  // Calls to the rendezvous store, the clocks and the status (KvSet, KvGet, KvWait,
  // ReportClock, WaitClock, GetStatus) and ReportWorkerFailure that fail UNAVAILABLE (the
  // coordinator is away, maybe restarting from its data_dir) are tried again, with pauses growing
  // to 1 s, for up to `window` (default 0: not tried again). Daemons set it; tests of failures
  // leave it.
  void SetRetryWindow(absl::Duration window);

  // Members, shard map, clocks and job name.
  absl::StatusOr<rpc::ClusterStatus> GetStatus();

  // Has the coordinator take a checkpoint (CheckpointRequest: sync jobs' step boundary, or -1,
  // and the workers' state, if given) and waits up to `timeout` for it. The coordinator's error
  // (FAILED_PRECONDITION without a checkpoint_dir or while another checkpoint is taken; a server's
  // error), DEADLINE_EXCEEDED.
  absl::StatusOr<rpc::CheckpointResponse> Checkpoint(
      int64_t step, std::vector<rpc::CheckpointWorkerState> workers, absl::Duration timeout);

 private:
  CoordinatorClient(std::string address, std::unique_ptr<rpc::Coordinator::Stub> stub)
      : address_(std::move(address)), stub_(std::move(stub)) {}

  void HeartbeatLoop(uint32_t member_id, absl::Duration interval);
  // Sends `request` with `send(context, request, response, done)` (a stub's callback call),
  // drops the answer, and counts the call in flight until it ends: the destructor waits for it.
  template <typename Response, typename Request, typename Send>
  void SendWithoutWaiting(Request request, Send send);
  // Calls `fn` until it returns other than UNAVAILABLE or the retry window has passed.
  template <typename Fn>
  auto Retrying(Fn fn) -> decltype(fn());

  // Constant after construction.
  const std::string address_;
  const std::unique_ptr<rpc::Coordinator::Stub> stub_;  // thread-safe

  // Serialises starting and stopping the heartbeat thread; never taken under mu_.
  absl::Mutex thread_mu_;
  std::thread heartbeat_thread_ ABSL_GUARDED_BY(thread_mu_);

  absl::Mutex async_mu_;
  int async_in_flight_ ABSL_GUARDED_BY(async_mu_) = 0;
  mutable absl::Mutex mu_;
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

// "worker 1 (member 6): its heartbeats stopped: ..." and the other failures known then, for the
// message of a member that exits because the job failed.
std::string DescribeJobFailure(const rpc::JobFailure& failure);

}  // namespace ps

#endif  // PS_COMMON_COORDINATOR_CLIENT_H_

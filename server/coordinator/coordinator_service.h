// The coordinator's gRPC service (proto/coordinator.proto) on the callback API.
#ifndef PS_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_
#define PS_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator/checkpoint_scheduler.h"
#include "server/coordinator/checkpointer.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/status_fanout.h"

namespace ps {
namespace coordinator {

// CoordinatorService puts a Coordinator on the wire: it decodes requests, calls the coordinator
// and converts its statuses. Thread-safe.
//
// The waiting calls (GetShardMap, WaitClock, KvWait) hold no gRPC thread: they register a waiter
// with the coordinator and the call is finished by whichever thread completes it. They wait until
// the call's deadline less a margin (a tenth of the time left, at most kReplyMargin), so that the
// coordinator's own answer, which says what is missing, reaches the caller rather than gRPC's bare
// DEADLINE_EXCEEDED; KvWait also stops after the request's timeout_ms when that is > 0. The time
// left is carried over to the coordinator's clock (with a fake clock, it passes only as the fake
// advances). A call
// cancelled by its client cancels its waiter. Before its server shuts down, call
// Coordinator::Shutdown() so that pending waits end (UNAVAILABLE) and the server's Shutdown does
// not have to wait for their deadlines.
class CoordinatorService final : public rpc::Coordinator::CallbackService {
 public:
  static constexpr absl::Duration kReplyMargin = absl::Milliseconds(100);

  // Whether a server at host:port can be reached now; must return within about
  // kReachableTimeout.
  using ReachableFn = std::function<bool(const std::string& address)>;
  static constexpr absl::Duration kReachableTimeout = absl::Milliseconds(200);

  // `coordinator` is not owned and must outlive every call of the service. `reachable` checks a
  // server reported unreachable (ReportFailure); the default opens a TCP connection to it.
  // `server_credentials` are those of the channels to the servers (checkpoints, statuses); null:
  // plaintext.
  //
  // With tokens (grpc_util::TokenAuthProcessor), a worker token may register only workers and
  // clients, and start only the job's end-of-training checkpoint (a job with
  // checkpoint_at_end); other calls of those methods get PERMISSION_DENIED.
  explicit CoordinatorService(
      Coordinator* coordinator, ReachableFn reachable = nullptr,
      std::shared_ptr<grpc::ChannelCredentials> server_credentials = nullptr);
  // Stops the thread that checks reported servers.
  ~CoordinatorService() override;

  CoordinatorService(const CoordinatorService&) = delete;
  CoordinatorService& operator=(const CoordinatorService&) = delete;

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const rpc::RegisterRequest* request,
                                     rpc::RegisterResponse* response) override;
  grpc::ServerUnaryReactor* GetMemberIds(grpc::CallbackServerContext* context,
                                         const rpc::MemberIdsRequest* request,
                                         rpc::MemberIds* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const rpc::HeartbeatRequest* request,
                                      rpc::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const rpc::LeaveRequest* request,
                                  rpc::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* GetShardMap(grpc::CallbackServerContext* context,
                                        const rpc::GetShardMapRequest* request,
                                        rpc::ShardMap* response) override;
  grpc::ServerUnaryReactor* ReportClock(grpc::CallbackServerContext* context,
                                        const rpc::ReportClockRequest* request,
                                        rpc::ClockState* response) override;
  grpc::ServerUnaryReactor* WaitClock(grpc::CallbackServerContext* context,
                                      const rpc::WaitClockRequest* request,
                                      rpc::ClockState* response) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context,
                                  const rpc::KvSetRequest* request,
                                  rpc::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const rpc::KvGetRequest* request,
                                  rpc::KvGetResponse* response) override;
  grpc::ServerUnaryReactor* KvWait(grpc::CallbackServerContext* context,
                                   const rpc::KvGetRequest* request,
                                   rpc::KvGetResponse* response) override;
  // Answers at once with the current map version; the reported server is checked on the
  // service's own thread and failed over when it cannot be reached. A worker's report of its own
  // failure (reporter_failed) goes to Coordinator::ReportWorkerFailure, whose error it answers.
  grpc::ServerUnaryReactor* ReportFailure(grpc::CallbackServerContext* context,
                                          const rpc::ReportFailureRequest* request,
                                          rpc::ReportFailureResponse* response) override;
  // Takes the checkpoint (Checkpointer::Take) on the scheduler's thread, answering when its
  // manifest is written; FAILED_PRECONDITION at once while one is being taken.
  grpc::ServerUnaryReactor* StartCheckpoint(grpc::CallbackServerContext* context,
                                            const rpc::CheckpointRequest* request,
                                            rpc::CheckpointResponse* response) override;
  // Restores the checkpoint into the running cluster (Checkpointer::Restore, waiting up to
  // kRestoreWait for a checkpoint being taken) on a thread of the service's, answering when every
  // server has; FAILED_PRECONDITION at once while another restore is under way. An admin's call,
  // or a worker's in a job whose early stopping keeps the best model.
  grpc::ServerUnaryReactor* RestoreCheckpoint(grpc::CallbackServerContext* context,
                                              const rpc::RestoreCheckpointRequest* request,
                                              rpc::RestoreCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const rpc::StatusRequest* request,
                                      rpc::ClusterStatus* response) override;
  // Asks the servers of the current shard map (StatusFanout::Gather) and answers once they all
  // have answered or failed, holding no gRPC thread meanwhile. NOT_FOUND or INVALID_ARGUMENT at
  // once for a bad hot-keys request.
  grpc::ServerUnaryReactor* GetServerStatuses(grpc::CallbackServerContext* context,
                                              const rpc::ServerStatusesRequest* request,
                                              rpc::ServerStatuses* response) override;

  // How long RestoreCheckpoint waits for a checkpoint being taken.
  static constexpr absl::Duration kRestoreWait = absl::Minutes(5);

  // Counts the checkpoints taken in `registry` (Checkpointer::SetMetrics). Before serving.
  void SetMetrics(metrics::Registry* registry) { checkpointer_.SetMetrics(registry); }

  // Whether this coordinator may answer: with several coordinators (etcd), OK only while it
  // surely leads (LeaderElection::CheckLeading). Checked as each call is answered, whatever the
  // coordinator decided, so that a coordinator that stopped leading answers nothing more, not
  // even a call it took before: that call gets this check's UNAVAILABLE. Before serving. Default
  // none: every call is answered.
  void SetLeadershipCheck(std::function<absl::Status()> check) { leading_ = std::move(check); }

  // Adds to every GetStatus answer what `extra` fills in (the election's view: who leads, the
  // standbys, etcd's health). Before serving; it must not block. Default none.
  void SetStatusExtra(std::function<void(rpc::ClusterStatus*)> extra) {
    status_extra_ = std::move(extra);
  }

 private:
  // `status`, or the leadership check's error when this coordinator may no longer answer.
  absl::Status Gate(absl::Status status) const {
    if (leading_) {
      absl::Status leading = leading_();
      if (!leading.ok()) return leading;
    }
    return status;
  }

  // Checks the servers reported unreachable, one at a time, until the service is destroyed.
  void CheckLoop();

  Coordinator* const coordinator_;
  const ReachableFn reachable_;
  std::function<absl::Status()> leading_;                  // set before serving
  std::function<void(rpc::ClusterStatus*)> status_extra_;  // set before serving

  absl::Mutex check_mu_;
  bool stop_checks_ ABSL_GUARDED_BY(check_mu_) = false;
  std::set<uint32_t> to_check_ ABSL_GUARDED_BY(check_mu_);  // server_ids
  std::thread checker_;

  StatusFanout fanout_;
  Checkpointer checkpointer_;
  // The restore under way or done last (RestoreCheckpoint), joined by the next and on destruction.
  absl::Mutex restore_mu_;
  std::thread restorer_ ABSL_GUARDED_BY(restore_mu_);
  bool restoring_ ABSL_GUARDED_BY(restore_mu_) = false;
  // Takes the requested checkpoints and the periodic ones, on its own thread.
  CheckpointScheduler scheduler_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_

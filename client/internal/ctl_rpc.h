// ps_ctl's calls to a job's coordinator (proto/coordinator.proto), for the commands that look at a
// running cluster or act on it.
#ifndef PS_CLIENT_INTERNAL_CTL_RPC_H_
#define PS_CLIENT_INTERNAL_CTL_RPC_H_

#include <grpcpp/security/credentials.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/internal/ctl_format.h"
#include "proto/coordinator.grpc.pb.h"

namespace ps {
namespace client_internal {

// A CtlConnection calls a job's coordinator, following the leader among several. Thread-safe.
//
// Given several coordinators, a call goes to the current one first and, while it fails
// UNAVAILABLE (a standby, a deposed leader, nobody listening), at once to another, within the
// same deadline, as CoordinatorClient's calls do (NextCoordinator: the leader a standby names when
// listed, else the next address in order); the current address follows (SuggestedCoordinator,
// or the one that answered).
//
// Errors keep the call's code (UNAVAILABLE when nobody answers at the address, DEADLINE_EXCEEDED
// when the coordinator does not answer in time, the coordinator's own otherwise) and name the
// coordinator that gave the last answer: "coordinator 127.0.0.1:7000: UNAVAILABLE: failed to
// connect to all addresses; ...".
class CtlConnection {
 public:
  // `addresses`: host:port, or several comma-separated (checked by the caller with
  // ParseCoordinatorAddresses; empty entries are skipped here). Nothing is sent yet. Every call
  // but Checkpoint has a deadline of `timeout`; a call to an address where nobody listens fails
  // at once. `credentials` null: plaintext; `tls` says whether they are TLS's, for the hint that
  // UNAVAILABLE errors carry (grpc_util::UnreachableHint).
  CtlConnection(const std::string& addresses, absl::Duration timeout,
                std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr, bool tls = false);

  // The current coordinator's host:port (the one that answered last).
  std::string address() const;

  // Coordinator.GetStatus: members, shard map, clocks.
  absl::StatusOr<rpc::ClusterStatus> ClusterStatus();

  // Coordinator.GetServerStatuses with `request` passed on to every server (its hot keys).
  // The coordinator's NOT_FOUND (unknown table) and INVALID_ARGUMENT (k above 256).
  absl::StatusOr<rpc::ServerStatuses> ServerStatuses(const rpc::ServerStatusRequest& request);

  // ClusterStatus, then ServerStatuses; `taken` is when the servers' statuses arrived.
  absl::StatusOr<ClusterSample> Sample(const rpc::ServerStatusRequest& request);

  // Coordinator.StartCheckpoint at `step` (-1: the coordinator picks). Waits up to `timeout` for
  // a coordinator to be reachable (UNAVAILABLE otherwise), then for the checkpoint, however
  // long it takes. The coordinator's errors (FAILED_PRECONDITION without a checkpoint_dir or
  // while another checkpoint is taken).
  absl::StatusOr<rpc::CheckpointResponse> Checkpoint(int64_t step);

 private:
  // `status` (not OK) with coordinator `at` named.
  absl::Status Named(size_t at, const absl::Status& status) const;
  // Calls `fn(stub, context)` on the current coordinator, then on the others while it fails
  // UNAVAILABLE, each context with `deadline` (absl::InfiniteFuture(): none); the last answer,
  // named.
  template <typename Fn>
  auto OnLeader(absl::Time deadline, Fn fn) -> decltype(fn(nullptr, nullptr));

  // Constant after construction.
  std::vector<std::string> addresses_;
  const absl::Duration timeout_;
  const bool tls_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<rpc::Coordinator::Stub>> stubs_;

  mutable absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_CTL_RPC_H_

// ps_ctl's calls to a job's coordinator (proto/coordinator.proto), for the commands that look at a
// running cluster or act on it.
#ifndef PS_CLIENT_INTERNAL_CTL_RPC_H_
#define PS_CLIENT_INTERNAL_CTL_RPC_H_

#include <grpcpp/security/credentials.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/internal/ctl_format.h"
#include "proto/coordinator.grpc.pb.h"

namespace ps {
namespace client_internal {

// A CtlConnection calls one coordinator. Thread-safe.
//
// Errors keep the call's code (UNAVAILABLE when nobody answers at the address, DEADLINE_EXCEEDED
// when the coordinator does not answer in time, the coordinator's own otherwise) and name the
// coordinator: "coordinator 127.0.0.1:7000: UNAVAILABLE: failed to connect to all addresses; ...".
class CtlConnection {
 public:
  // Nothing is sent yet. Every call but Checkpoint has a deadline of `timeout`; a call to an
  // address where nobody listens fails at once. `credentials` null: plaintext; `tls` says
  // whether they are TLS's, for the hint that UNAVAILABLE errors carry
  // (grpc_util::UnreachableHint).
  CtlConnection(std::string address, absl::Duration timeout,
                std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr, bool tls = false);

  const std::string& address() const { return address_; }

  // Coordinator.GetStatus: members, shard map, clocks.
  absl::StatusOr<rpc::ClusterStatus> ClusterStatus();

  // Coordinator.GetServerStatuses with `request` passed on to every server (its hot keys).
  // The coordinator's NOT_FOUND (unknown table) and INVALID_ARGUMENT (k above 256).
  absl::StatusOr<rpc::ServerStatuses> ServerStatuses(const rpc::ServerStatusRequest& request);

  // ClusterStatus, then ServerStatuses; `taken` is when the servers' statuses arrived.
  absl::StatusOr<ClusterSample> Sample(const rpc::ServerStatusRequest& request);

  // Coordinator.StartCheckpoint at `step` (-1: the coordinator picks). Waits up to `timeout` for
  // the coordinator to be reachable (UNAVAILABLE otherwise), then for the checkpoint, however
  // long it takes. The coordinator's errors (FAILED_PRECONDITION without a checkpoint_dir or
  // while another checkpoint is taken).
  absl::StatusOr<rpc::CheckpointResponse> Checkpoint(int64_t step);

 private:
  // `status` (not OK) with the coordinator named.
  absl::Status Named(const absl::Status& status) const;

  const std::string address_;
  const absl::Duration timeout_;
  const bool tls_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<rpc::Coordinator::Stub> stub_;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_CTL_RPC_H_

// The coordinator's side of Coordinator.GetServerStatuses: every live server of the shard map asked
// for its status (ParameterServer.GetStatus) at once, and the answers gathered for an operator.
#ifndef PS_SERVER_COORDINATOR_STATUS_FANOUT_H_
#define PS_SERVER_COORDINATOR_STATUS_FANOUT_H_

#include <grpcpp/security/credentials.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace coordinator {

// A StatusFanout gathers the servers' statuses. Thread-safe. It keeps one gRPC channel per server
// address it has asked (a server that comes back at its address is reached on the same channel).
class StatusFanout {
 public:
  // The longest a gathering waits for the servers, when the caller allows more.
  static constexpr absl::Duration kTimeout = absl::Seconds(2);

  // Asks the server at `address` for its status, giving up at `deadline`; calls `done` exactly
  // once, on any thread (possibly before returning), with the status or the call's error.
  using AskFn = std::function<void(const std::string& address,
                                   const rpc::ServerStatusRequest& request, absl::Time deadline,
                                   std::function<void(absl::StatusOr<rpc::ServerStatus>)> done)>;

  // `ask` defaults to ParameterServer.GetStatus over gRPC, on channels with `credentials` (null:
  // plaintext).
  explicit StatusFanout(AskFn ask = nullptr,
                        std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  StatusFanout(const StatusFanout&) = delete;
  StatusFanout& operator=(const StatusFanout&) = delete;

  // When a gathering for a call whose own deadline is `caller_deadline` (absl::InfiniteFuture()
  // for none) should give up: kTimeout from `now`, or the caller's deadline less a margin for the
  // reply (a tenth of the time left, at most 100 ms) when that is sooner.
  static absl::Time Deadline(absl::Time now, absl::Time caller_deadline);

  // Checks `request` against `job`: NOT_FOUND for a hot_keys_table not in the job,
  // INVALID_ARGUMENT for hot_keys_k above HotKeys::kDefaultCapacity (256). Then asks every alive
  // server of `map` at once with request.request(), until `deadline`, and calls `done` exactly
  // once (on the last answer's thread, or on this one) with ServerStatuses: the map's version
  // and every server of the map in server_id order, each with its status or its error (the call's,
  // "UNAVAILABLE: ..."; for a server the map marks dead, that it was not asked). Returns OK once
  // the servers are asked; on an error `done` is never called.
  absl::Status Gather(const config::Job& job, const rpc::ShardMap& map,
                      const rpc::ServerStatusesRequest& request, absl::Time deadline,
                      std::function<void(rpc::ServerStatuses)> done);

 private:
  // ParameterServer.GetStatus over the channel kept for `address`.
  void AskOverGrpc(const std::string& address, const rpc::ServerStatusRequest& request,
                   absl::Time deadline, std::function<void(absl::StatusOr<rpc::ServerStatus>)> done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const AskFn ask_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<rpc::ParameterServer::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_STATUS_FANOUT_H_

// Takes checkpoints of the cluster: picks the cut, has the server of every primary write its
// shards (WriteCheckpoint), then writes the manifest, last, and keeps the newest checkpoints.
#ifndef PS_SERVER_COORDINATOR_CHECKPOINTER_H_
#define PS_SERVER_COORDINATOR_CHECKPOINTER_H_

#include <grpcpp/security/credentials.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/registry.h"
#include "proto/checkpoint.pb.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"
#include "server/coordinator/coordinator.h"

namespace ps {
namespace coordinator {

// A Checkpointer takes one checkpoint at a time. Thread-safe.
class Checkpointer {
 public:
  // Asks the server at `address` to write its part (ParameterServer.WriteCheckpoint).
  using WriteFn = std::function<absl::StatusOr<rpc::WriteCheckpointResponse>(
      const std::string& address, const rpc::WriteCheckpointRequest& request)>;

  // Asks the server at `address` to replace its shards (ParameterServer.RestoreShards).
  using RestoreFn = std::function<absl::StatusOr<rpc::RestoreShardsResponse>(
      const std::string& address, const rpc::RestoreShardsRequest& request)>;

  // `coordinator` is not owned and must outlive the Checkpointer; `write` and `restore` default
  // to gRPC calls with a deadline of `timeout`, over channels with `credentials` (null:
  // plaintext).
  Checkpointer(Coordinator* coordinator, WriteFn write = nullptr,
               absl::Duration timeout = absl::Minutes(30),
               std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
               RestoreFn restore = nullptr);

  // Takes a checkpoint (see CheckpointRequest for `step` and `workers`) into the job's
  // checkpoint_dir, as folder <id> (one above the newest there), and removes complete
  // checkpoints beyond checkpoint_keep (except those a kept one builds on, directly or through
  // its chain) and partial folders older than the new one.
  //
  // Sync jobs with workers: their state at the boundary goes in too (worker-NNNNN.pb files), the
  // given `workers` or, without them, those every worker rank puts in the rendezvous store when
  // its clock report shows the checkpoint (ClockState.checkpoint), waited for up to
  // worker_wait.
  //
  // With checkpoint_full_every K > 1 the servers are asked to build on the newest complete
  // checkpoint (WriteCheckpointRequest.base_id) while its chain holds fewer than K - 1
  // increments and it is of this job (digest) and num_shards; each server writes incrementally
  // the shards it cut for that checkpoint itself, the others in full. The manifest names the
  // base when a file is incremental (base_id), else the checkpoint is full (base_id 0).
  //
  // Errors: FAILED_PRECONDITION without checkpoint_dir, before the shard map exists, with a lost
  // shard, while another checkpoint is being taken (or one restored: Restore), when a server
  // refuses (its message says why), when a worker rank is not alive or reports that it cannot
  // give its state at the boundary;
  // INVALID_ARGUMENT for given states of another step; DEADLINE_EXCEEDED when a worker's state
  // does not come; what a server's write returned otherwise. A failed checkpoint's folder is
  // removed; it never has a manifest.
  absl::StatusOr<rpc::CheckpointResponse> Take(
      int64_t step, std::vector<rpc::CheckpointWorkerState> workers = {});

  // Puts the checkpoint in `path` (a complete checkpoint's folder) back into the running
  // cluster: every server of the shard map replaces the shards it is primary of with the
  // checkpoint's (RestoreShards), all at once. Waits up to `wait` for a checkpoint being taken
  // (none is taken meanwhile). For a cluster at rest: the job's workers are not pushing. Errors:
  // FAILED_PRECONDITION before the shard map exists, with a lost shard, or when a checkpoint is
  // still being taken after `wait`; CheckRestorable's (the checkpoint does not fit the job); a
  // server's error (shards already replaced on other servers stay replaced).
  absl::StatusOr<rpc::RestoreCheckpointResponse> Restore(const std::string& path,
                                                         absl::Duration wait);

  // Counts every Take in `registry` (not owned; outlives the Checkpointer):
  // ps_coordinator_checkpoints_total{outcome="ok"|"failed"} and, for those taken,
  // ps_coordinator_checkpoint_duration_seconds. Call it before the first Take.
  void SetMetrics(metrics::Registry* registry);

  // How long Take waits for the workers' states after the servers wrote their shards.
  static constexpr absl::Duration kWorkerWait = absl::Minutes(2);

 private:
  absl::StatusOr<rpc::CheckpointResponse> TakeUnmeasured(
      int64_t step, std::vector<rpc::CheckpointWorkerState> workers);

  Coordinator* const coordinator_;
  const WriteFn write_;
  const RestoreFn restore_;
  metrics::Counter* taken_ = nullptr;
  metrics::Counter* failed_ = nullptr;
  metrics::Histogram* durations_ = nullptr;
  // Name each attempt's rendezvous key for the workers' states (see TakeUnmeasured): a random
  // number drawn once, so that a restarted coordinator's keys differ from its predecessor's, and
  // a count of attempts.
  const uint64_t incarnation_ = absl::Uniform<uint64_t>(absl::BitGen());
  std::atomic<uint64_t> attempts_{0};

  absl::Mutex mu_;
  bool taking_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_CHECKPOINTER_H_

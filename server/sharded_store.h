// The state of one parameter server: for every shard it serves, every table's rows, the dense
// chunks and the exactly-once window of pushes. Requests arrive as decoded protobuf messages; this
// class validates them completely before changing anything and knows nothing of gRPC. The sync
// step barrier (step_barrier.h), the workers' step clocks (step_clocks.h) and the checkpoint's
// cuts (checkpoint/checkpoint_cuts.h) are components of their own that it holds.
#ifndef PS_SERVER_SHARDED_STORE_H_
#define PS_SERVER_SHARDED_STORE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/optimizer.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/checkpoint/checkpoint_cuts.h"
#include "server/dense_requests.h"
#include "server/memory_keeper.h"
#include "server/replication/replicate_wire.h"
#include "server/replication/replicator.h"
#include "server/shard/shard.h"
#include "server/step_barrier.h"
#include "server/step_clocks.h"
#include "server/storage/embedding_table.h"
#include "server/storage/row_tier.h"
#include "server/store_stats.h"
#include "server/table_traffic.h"
#include "server/task_pool.h"

namespace ps {
namespace server {

// A ShardedStore holds everything one server serves. Thread-safe: each shard has its own lock, so
// requests on different shards proceed in parallel.
class ShardedStore {
 public:
  struct Options {
    // Serve requests without touching storage: pulls answer zeros, pushes are validated and
    // dropped. Only for measuring the transport's ceiling (ps_bench --empty_handler).
    bool empty_handler = false;
    // Carries the records of the shards this server is primary of to their copies when the job's
    // replication_factor is above 1. Not owned; must outlive the store. Required then
    // (INVALID_ARGUMENT from Create without it).
    ReplicationTransport* replication_transport = nullptr;
    // This server's id, sent with its records.
    uint32_t server_id = 0;
    // Called when a copy cannot be reached (see Replicator::Options::on_unreachable).
    std::function<void(uint32_t server_id, const absl::Status& error)> on_unreachable;
    // Called when a copy catching up of one of its shards has caught up
    // (see Replicator::Options::on_caught_up).
    std::function<void()> on_caught_up;
    // The hot keys' sampling: one key of a request in this many goes into the table's hot-keys
    // sketches (server/hot_keys.h); 0: none (the traffic counters still count). Default
    // HotKeys::kDefaultSampleEvery (128).
    uint32_t hot_keys_sample_every = HotKeys::kDefaultSampleEvery;
    // Threads that serve the shards of one large pull or push side by side (the caller's thread
    // works too); 0: every request is served on its caller's thread. Default 0; >= 0.
    int lookup_threads = 0;
    // A request is spread over the lookup threads only from this many keys, in parts of at least
    // this many keys, whole shards each. Default 16384; >= 1.
    uint32_t parallel_min_keys = 16384;
    // The server's memory budget in bytes (ps_server --memory_budget_mb; MemoryKeeper); 0:
    // none. >= 0.
    int64_t memory_budget_bytes = 0;
    // The memory keeper's clock (MemoryKeeper::Options::now); default absl::Now.
    std::function<absl::Time()> now;
    // The disk tier's directory (ps_server --tier_dir; server/storage/row_tier.h): empty for
    // none. Needs a memory budget.
    std::string tier_dir;
    // The most bytes the tier's directory may hold (--tier_max_disk_gb); > 0 with a tier_dir,
    // else 0.
    int64_t tier_max_disk_bytes = 0;
  };

  // INVALID_ARGUMENT if the job fails validation (tables, optimizers), or its fixed part does
  // not fit the memory budget, or it sets bounds the budget-less server cannot honour
  // (MemoryKeeper::Create), or a tier_dir comes without a budget or a tier cap without a
  // tier_dir; RowTier::Open's errors for a tier that cannot be opened (naming --tier_dir).
  static absl::StatusOr<std::unique_ptr<ShardedStore>> Create(const config::Job& job,
                                                              const Options& options);

  ShardedStore(const ShardedStore&) = delete;
  ShardedStore& operator=(const ShardedStore&) = delete;

  // Installs the shard map: this server (`server_id`) serves the shards whose primary it is and
  // keeps the copies the map gives it (replicas, copies catching up), which apply their
  // primary's records and serve nothing. Maps older than the installed one are ignored.
  //  - A shard it becomes primary of in the job's first map is created empty (presized from the
  //    tables' capacity hints); a copy it newly holds waits for its primary's snapshot.
  //  - A replica promoted to primary carries on from its state; in sync mode it applies the
  //    pending step itself if its old primary died before sending the step's result.
  //  - A lost shard (no copy left) answers DATA_LOSS; shards it no longer holds are dropped.
  // Calls are serialised. New copies' snapshots are cut once the new map is installed, each
  // holding back only its own shard's pushes meanwhile.
  void SetShardMap(const rpc::ShardMap& map, uint32_t server_id)
      ABSL_LOCKS_EXCLUDED(set_map_mu_, map_mu_);

  // A shard with this store's tables and settings, presized for `rows` rows over its tables, on
  // which a restore in pieces has begun (Shard::BeginRestore: then Shard::RestoreRows and
  // Shard::FinishRestore), for Restored. Thread-safe. INVALID_ARGUMENT for a shard outside the
  // job's.
  absl::StatusOr<std::unique_ptr<Shard>> NewRestoringShard(uint32_t shard, uint64_t rows) const;

  // What a restored job's server starts its new primaries from (ShardMap.restore_from).
  struct Restored {
    // Sync: the checkpoint's step boundary t (its shards hold exactly steps < t), so that step t
    // is the next this store applies; -1 when the checkpoint has none (or the job is not sync).
    int64_t step = -1;
    // One shard (NewRestoringShard, its restore finished) for each of NewPrimaries(map), in any
    // order.
    std::vector<std::unique_ptr<Shard>> shards;
  };

  // The shards `map` makes this server a new primary of term 0 (placed when the job's map was
  // built, not promoted from a copy): the ones a restored job loads from its checkpoint before
  // installing the map. Empty for a map no newer than the installed one.
  std::vector<uint32_t> NewPrimaries(const rpc::ShardMap& map, uint32_t server_id) const
      ABSL_LOCKS_EXCLUDED(map_mu_);

  // SetShardMap for a restored job: the new primaries are `restored.shards` instead of empty
  // ones, and (sync) the store goes on from step restored.step. INVALID_ARGUMENT, with nothing
  // installed, when the shards are not exactly one for each of NewPrimaries(map); OK and nothing
  // changed for a map no newer than the installed one.
  absl::Status SetShardMap(const rpc::ShardMap& map, uint32_t server_id, Restored restored)
      ABSL_LOCKS_EXCLUDED(set_map_mu_, map_mu_);

  // Replaces the shards this server is primary of in map `map_version` (the installed one) by
  // `restored.shards` (NewRestoringShard, their restore finished), in place: a checkpoint put back
  // into the running cluster (RestoreServerShards). The new shards carry on at the store's
  // applied step (sync), their copies get a snapshot of them, and a checkpoint's cut or read of
  // a replaced shard under way is abandoned. For a store at rest: pushes in flight meanwhile are
  // applied to the old shard or the new one. Errors, with nothing replaced: FAILED_PRECONDITION
  // when the map version is not the installed one, a shard is not this server's primary (or is
  // given twice), or (sync) a step is under way in a shard (it has pending sums) or the
  // checkpoint's step is ahead of the store's; UNAVAILABLE before a map is installed.
  absl::Status ReplacePrimaries(uint64_t map_version, Restored restored)
      ABSL_LOCKS_EXCLUDED(set_map_mu_, map_mu_);

  // The job's shards (cluster.num_shards).
  uint32_t num_shards() const { return num_shards_; }

  // The job's tables, by table index.
  const std::vector<std::unique_ptr<TableSpec>>& tables() const { return tables_; }

  // Whether the server has a memory budget.
  bool bounded() const { return keeper_->budget_bytes() > 0; }

  // Version of the installed shard map; 0 before the first.
  uint64_t map_version() const { return map_version_.load(std::memory_order_acquire); }

  // Writes the rows of the request's keys (dim floats each, in request order) and the table's dim
  // into `response`,
  // creating missing rows with the table's initializer. Errors, with nothing written:
  // UNAVAILABLE before a shard map is installed; NOT_FOUND for an unknown table;
  // INVALID_ARGUMENT for keys whose length is not a multiple of 8, runs that do not add up to the
  // keys, a shard out of range or a key in the wrong shard's run; RESOURCE_EXHAUSTED for more
  // keys than one response may carry; FAILED_PRECONDITION (naming the current map version) for a
  // shard this server does not serve; sync mode: ABORTED for a pull whose step (header.clock) is
  // already applied, as CheckPullStep, checked under the same lock as the rows are read with, so
  // a quorum cannot apply the step between the check and the read.
  absl::Status Pull(const rpc::PullRequest& request, rpc::PullResponse* response);

  // Pull without a response message, for callers that frame the rows themselves: once the request
  // is validated, calls `allocate(num_keys, dim)` exactly once and writes the rows (dim floats per
  // key, in request order) to the memory it returns, which must hold num_keys * dim floats and
  // may be uninitialised (empty_handler writes zeros). Errors as Pull, with `allocate` not called.
  absl::Status Pull(const rpc::PullRequest& request,
                    absl::FunctionRef<float*(size_t num_keys, uint32_t dim)> allocate);

  // Applies the request's gradients with the table's optimizer, duplicates within the request
  // summed, exactly once per (worker_id, sequence) and shard (the worker_id is not checked here:
  // the service checks it with RegisteredWorkers). `duplicate_keys` counts keys of shards that
  // had already applied this sequence (a retry). Errors as Pull, plus INVALID_ARGUMENT for
  // gradients whose length disagrees with keys x dim, a NaN or Inf gradient, or sequence 0
  // (nothing of the push is applied); INVALID_ARGUMENT if a shard cannot tell whether the
  // sequence was applied: more than ApplyWindow::kWindow below the newest it admitted from the
  // worker (that shard's part was not applied; each shard decides on its own part).
  //
  // Sync mode: the push belongs to step header.clock (INVALID_ARGUMENT if negative). It is summed
  // with the other workers' pushes of that step and applied with them when the step ends
  // (EndStep). A push for a step already applied (a straggler outside the quorum) is dropped and
  // counted in `late_keys`; one for a step after the pending one is UNAVAILABLE (retryable: this
  // server has not yet seen the previous step end, which it will).
  //
  // Replication: `replicated_at` (if not null) receives, per shard of the push, the sequence
  // that must reach the shard's copies before the push may be acknowledged (see WhenReplicated);
  // a retry waits for the shard's newest, since its first try may not be there yet.
  absl::Status Push(const rpc::PushRequest& request, uint32_t* duplicate_keys,
                    uint32_t* late_keys = nullptr,
                    std::vector<std::pair<uint32_t, uint64_t>>* replicated_at = nullptr);

  // Calls done(OK) once the copies hold the given (shard, sequence)s as the job's replication
  // mode requires (at once without replication or in ASYNC mode); done(UNAVAILABLE) when a shard
  // moved first or the store shuts down. See Replicator::WhenReplicated.
  void WhenReplicated(std::vector<std::pair<uint32_t, uint64_t>> sequences,
                      std::function<void(absl::Status)> done);

  // Applies a primary's records, as the caller read them from a Replicate call
  // (ReplicateRequestReader), to the copies this server holds, and adds one ShardAck per shard of
  // the records to `response` (ApplyReplicatedRecords: NOT_HELD for a shard this server holds no
  // copy of).
  void ApplyReplicated(absl::Span<const ReplicatedRecord> records, rpc::ReplicateResponse* response)
      ABSL_LOCKS_EXCLUDED(map_mu_);

  // Every copy of a shard this server holds, for its heartbeats: applied sequence and (sync
  // training) step, whether a copy catching up is complete, and (primaries) the lag of each
  // replica.
  std::vector<rpc::ShardProgress> Progress() const;

  // Sync mode: `worker_id` has pushed all of `step`. When sync_quorum of the job's workers have
  // ended the pending step (or, with a quorum below 1, sync_timeout_ms after the first did), its
  // summed gradients are applied at once in every primary shard (the quorum is the nearest whole
  // number of workers to sync_quorum x workers, at least 1: 0.67 of 3 is 2). Returns the newest
  // applied step. UNAVAILABLE (retryable) for a step after the pending one; ending an applied
  // step is a no-op; INVALID_ARGUMENT for worker_id 0. Other modes: a no-op returning -1.
  // (StepBarrier::EndStep.)
  absl::StatusOr<int64_t> EndStep(uint32_t worker_id, int64_t step) {
    return barrier_.EndStep(worker_id, step);
  }

  // Sync mode: ABORTED if `step` was already applied (a straggler outside the quorum pulling for a
  // step the cluster finished without it: its rows would include that step's pushes). OK
  // otherwise, and in the other modes.
  absl::Status CheckPullStep(int64_t step) { return barrier_.CheckPullStep(step); }

  // Runs `fn(OK)` once step `step` is applied (at once if it is, or if the mode is not sync), on
  // the thread that applies it; `fn(UNAVAILABLE)` if the store shuts down first. Sync pulls for
  // step t wait with this for step t - 1.
  void RunWhenApplied(int64_t step, std::function<void(absl::Status)> fn) {
    barrier_.RunWhenApplied(step, std::move(fn));
  }

  // Ends every wait with UNAVAILABLE (steps' and checkpoint cuts'), stops the quorum timer and
  // the replicator. Idempotent; the destructor calls it.
  void Shutdown();

  ~ShardedStore();

  // Reads the requested chunks of a dense tensor (PullDenseChunks, dense_requests.h). NOT_FOUND if
  // the tensor or a chunk does not exist; RESOURCE_EXHAUSTED above the message limit; errors of
  // routing as Pull.
  absl::Status PullDense(const rpc::PullDenseRequest& request, rpc::PullDenseResponse* response);

  // Assigns or applies gradients to chunks of a dense tensor (created by its first push;
  // PushDenseChunks, dense_requests.h). A
  // gradient's chunk c is applied once per (worker_id, sequence + c) and shard. Every chunk is
  // checked before any is written: INVALID_ARGUMENT, with nothing applied, for a length that
  // disagrees with the chunking or total, NaN or Inf values, a chunk given twice, or a gradient
  // without a sequence (0); errors of routing as Pull. INVALID_ARGUMENT if a chunk's sequence is
  // more than ApplyWindow::kWindow below the newest its shard admitted from the worker (that chunk
  // and the later ones of the request are not applied). `replicated_at` as for Push.
  absl::Status PushDense(const rpc::PushDenseRequest& request,
                         std::vector<std::pair<uint32_t, uint64_t>>* replicated_at = nullptr);

  // Shards served; per table its optimizer, rows and bytes (of every copy, and of the primaries),
  // and its traffic since the store was created (keys and requests pulled and pushed: every
  // request that passed validation, counted per table); every copy's rows and bytes
  // (shard_sizes) and progress (with its replicas' lag); and, when request.hot_keys_table names
  // a table, its hottest pulled and pushed keys (request.hot_keys_k of each, 10 when 0; see
  // server/hot_keys.h for what the counts estimate). Errors, with `status` left unchanged:
  // NOT_FOUND for an unknown hot_keys_table, INVALID_ARGUMENT for hot_keys_k above
  // HotKeys::kDefaultCapacity.
  absl::Status FillStatus(const rpc::ServerStatusRequest& request, rpc::ServerStatus* status);
  // FillStatus without hot keys.
  void FillStatus(rpc::ServerStatus* status) {
    (void)FillStatus(rpc::ServerStatusRequest(), status);
  }

  // --- Checkpoints (CheckpointCuts, server/checkpoint/checkpoint_cuts.h) ---
  //
  // A checkpoint cuts each primary shard at one point: in sync mode at a step boundary t (the
  // shard holds exactly steps < t, no pending sums), otherwise at the shard's applied sequence of
  // the moment. A cut copies the shard's small state (dense chunks, window, counters) under its
  // lock; its rows are read afterwards, copy-on-write (ReadCheckpointRows), while pushes go on.
  // The caller writes the cut out. One checkpoint at a time.

  // Starts a checkpoint of `shards`, which must be this server's primaries in map `map_version`,
  // the installed one (else FAILED_PRECONDITION naming it). Sync mode: `step` is the boundary
  // t >= 0; FAILED_PRECONDITION when it has passed (step t's pushes have begun here). Other modes:
  // `step` must be -1 (else INVALID_ARGUMENT). FAILED_PRECONDITION while another checkpoint is
  // under way; UNAVAILABLE once the store shuts down. `request` says which checkpoint the cuts
  // are for and which it builds on: each shard's cut is incremental when that shard's previous
  // cut here was for request.base_id (Shard::CutRows), else full.
  absl::Status BeginCheckpoint(int64_t step, const std::vector<uint32_t>& shards,
                               uint64_t map_version, const CutRequest& request = {});

  // The cut of `shard` (one of BeginCheckpoint's). Sync mode: waits until the boundary is reached
  // (DEADLINE_EXCEEDED at `deadline`; UNAVAILABLE if the store shuts down). `*stall` receives how
  // long the shard's pushes were held back by the cut. NOT_FOUND for a shard not in the
  // checkpoint or already taken; FAILED_PRECONDITION if the shard moved to another server;
  // ABORTED if the checkpoint ended while waiting.
  absl::StatusOr<ShardCut> TakeCheckpointCut(uint32_t shard, absl::Time deadline,
                                             absl::Duration* stall) {
    return cuts_.Take(shard, deadline, stall);
  }

  // Reads the rows of a cut TakeCheckpointCut gave into it (Shard::ReadCutRows), a record at a
  // time. `*max_hold` receives the longest the shard's lock was held for one record.
  // FAILED_PRECONDITION if the shard moved to another server; ABORTED if its rows were replaced
  // or the checkpoint ended meanwhile.
  absl::Status ReadCheckpointRows(ShardCut* cut, absl::Duration* max_hold) {
    return cuts_.ReadRows(cut, max_hold);
  }

  // Ends the checkpoint begun last, dropping cuts not taken and abandoning the reads of cuts'
  // rows not finished. Idempotent.
  void EndCheckpoint() { cuts_.End(); }

 private:
  ShardedStore(const config::Job& job, const Options& options,
               std::vector<std::unique_ptr<TableSpec>> tables,
               std::unique_ptr<Optimizer> dense_optimizer, std::unique_ptr<MemoryKeeper> keeper,
               std::unique_ptr<RowTier> tier);

  // Caps the rows of every copy held by the memory budget, for the number of copies held now.
  void ApplyMemoryBudget() ABSL_EXCLUSIVE_LOCKS_REQUIRED(map_mu_);

  // SetShardMap's work under the map lock; the snapshots for new copies are added to `snapshots`.
  // New primaries found in `restored` (by shard) are adopted instead of created empty.
  void ApplyShardMap(const rpc::ShardMap& map, uint32_t server_id,
                     absl::flat_hash_map<uint32_t, std::unique_ptr<Shard>>* restored,
                     std::vector<std::function<void()>>* snapshots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(set_map_mu_);

  // The capacity hints of a new shard's tables.
  std::vector<size_t> ExpectedRows() const;

  // The table's index, or NOT_FOUND.
  absl::StatusOr<size_t> FindTable(const std::string& name) const;

  // Checks keys and runs of a sparse request against the table and the map; on success the keys
  // are a view of `keys` (8-byte aligned copy made if needed into `aligned`).
  // `read`: a pull, which a replica serves too when the job reads from replicas.
  absl::Status CheckKeys(const std::string& keys,
                         const google::protobuf::RepeatedPtrField<rpc::ShardRun>& runs,
                         const TableSpec& table, bool read, std::vector<uint64_t>* aligned,
                         const uint64_t** key_data, size_t* num_keys) const
      ABSL_SHARED_LOCKS_REQUIRED(map_mu_);

  // How this server holds a shard.
  enum class Role { kNone, kPrimary, kReplica, kCatchingUp };

  // Calls fn(first_run, end_run, first_key) on groups of consecutive runs covering all of `runs`
  // (first_key: the position of the group's first key in the request): one group on the calling
  // thread for a small request, several side by side on the lookup pool for a large one, in parts
  // of at least Options::parallel_min_keys keys (TaskPool::RunGroups).
  void ForEachRunGroup(const google::protobuf::RepeatedPtrField<rpc::ShardRun>& runs,
                       size_t num_keys,
                       absl::FunctionRef<void(int first_run, int end_run, size_t first_key)> fn) {
    lookup_pool_.RunGroups(
        runs.size(), [&runs](size_t r) -> uint64_t { return runs[r].count(); }, num_keys,
        std::max<uint32_t>(1, options_.parallel_min_keys),
        [&fn](size_t first, size_t end, uint64_t first_key) { fn(first, end, first_key); });
  }

  // OK if this server is the primary of `shard`, or (`read`, when the job reads from replicas)
  // holds a complete replica of it; DATA_LOSS for a lost shard; FAILED_PRECONDITION naming the
  // map version otherwise.
  absl::Status CheckServed(uint32_t shard, bool read = false) const
      ABSL_SHARED_LOCKS_REQUIRED(map_mu_);
  // The copy of `shard` this server is the primary of, or CheckServed's error (the dense
  // requests' ServedShard).
  absl::StatusOr<Shard*> ServedCopy(uint32_t shard) const ABSL_SHARED_LOCKS_REQUIRED(map_mu_);
  // The barrier's StepBarrier::ApplyFn: applies step `step`'s sums in every primary shard, the
  // checkpoint's cuts told before and after.
  void ApplyStep(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(barrier_.mu());

  // Shard `shard` as the installed map gives it to this server (CheckpointCuts::ShardLookup).
  CheckpointCuts::HeldShard Held(uint32_t shard) const ABSL_SHARED_LOCKS_REQUIRED(map_mu_);

  // Constant after construction.
  const config::Job job_;
  const Options options_;
  const uint32_t num_shards_;
  const uint64_t max_message_bytes_;
  const std::vector<std::unique_ptr<TableSpec>> tables_;
  const absl::flat_hash_map<std::string, size_t> table_index_;
  const std::unique_ptr<Optimizer> dense_optimizer_;
  // The disk tier, or null (declared before the shards, which it outlives).
  const std::unique_ptr<RowTier> tier_;
  // The memory budget and eviction: caps copies' rows and sweeps the primaries (its thread is
  // stopped by Shutdown, before the shards go).
  const std::unique_ptr<MemoryKeeper> keeper_;
  // Serves the parts of large requests (Options::lookup_threads).
  TaskPool lookup_pool_;
  const ShardConfig shard_config_;

  const bool sync_;                // job.training.mode == SYNC
  const bool read_from_replicas_;  // job.cluster.read_from_replicas

  // Per table what the data path was asked of it, the pulls answered from replicas and the
  // stragglers' pushes dropped; the sizes of the copies for FillStatus.
  StoreStats stats_;

  // Per worker, the newest step it has pushed to this server, and what pulls could miss.
  StepClocks clocks_;

  // Null without replication.
  std::unique_ptr<Replicator> replicator_;

  // Lock order: set_map_mu_, then barrier_.mu(), then cuts_'s lock, then map_mu_, then a
  // shard's lock (see StepBarrier and CheckpointCuts).
  //
  // Held through a SetShardMap, snapshots included: only it destroys shards.
  absl::Mutex set_map_mu_ ABSL_ACQUIRED_BEFORE(map_mu_);
  mutable absl::Mutex map_mu_;
  std::atomic<uint64_t> map_version_{0};
  // By shard; null for shards this server holds no copy of.
  std::vector<std::unique_ptr<Shard>> shards_ ABSL_GUARDED_BY(map_mu_);
  std::vector<Role> roles_ ABSL_GUARDED_BY(map_mu_);
  // By shard, the copies of the shards this server is primary of (ReplacePrimaries' snapshots).
  std::vector<std::vector<ReplicaTarget>> targets_ ABSL_GUARDED_BY(map_mu_);
  std::vector<bool> lost_ ABSL_GUARDED_BY(map_mu_);

  // The checkpoint under way; it reads the shards under map_mu_ (Held).
  CheckpointCuts cuts_;
  // The sync step barrier; it applies steps with ApplyStep. Declared last: its quorum timer's
  // thread, which calls ApplyStep, ends (at the latest, when it is destroyed) before the members
  // ApplyStep uses are destroyed.
  StepBarrier barrier_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_SHARDED_STORE_H_

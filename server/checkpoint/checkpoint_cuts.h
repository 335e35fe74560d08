// The cuts of the checkpoint under way on one server. A checkpoint cuts each of the server's
// primary shards at one point: in sync training at a step boundary t (the shard holds exactly
// steps < t, no pending sums), otherwise at the shard's applied sequence of the moment. A cut
// copies the shard's small state (dense chunks, window, counters) under the shard's lock; its
// rows are read afterwards, copy-on-write (ReadRows), while pushes go on. The caller
// (server_checkpoint.h) writes the cuts out. One checkpoint at a time.
#ifndef PS_SERVER_CHECKPOINT_CHECKPOINT_CUTS_H_
#define PS_SERVER_CHECKPOINT_CHECKPOINT_CUTS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/shard/shard.h"

namespace ps {
namespace server {

// CheckpointCuts models the checkpoint under way on a server: its shards, its step boundary (sync)
// and the cuts not yet taken. Thread-safe.
//
// It reads the server's shards only through `with_shards` (see the constructor), and in sync
// training it learns of the steps from the server's step barrier (server/step_barrier.h), which
// calls BeforeStep and AfterStep around each step it applies.
//
// Lock order: the step barrier's lock, then this object's lock, then the shard map's lock (taken
// by `with_shards`), then a shard's lock. Begin, BeforeStep and AfterStep are called with the
// barrier's lock held (exclusively); no method takes the barrier's lock, and `with_shards` must
// not call back into this object.
class CheckpointCuts {
 public:
  // Checkpoint cuts hold rows in records of about this size.
  static constexpr size_t kRecordBytes = 1 << 20;

  // A shard as the installed shard map gives it to this server.
  struct HeldShard {
    Shard* shard = nullptr;  // the copy this server holds; null for none (or an unknown shard)
    bool primary = false;    // this server is its primary
  };
  // Looks a shard up; valid only during the `with_shards` call that gives it.
  using ShardLookup = absl::FunctionRef<HeldShard(uint32_t shard)>;
  // Calls `fn(map_version, lookup)` with the installed map's version and its shards, holding the
  // shard map still (its lock shared) for the duration of the call.
  using WithShards =
      std::function<void(absl::FunctionRef<void(uint64_t map_version, ShardLookup lookup)> fn)>;

  // `sync`: sync training (checkpoints cut at step boundaries).
  CheckpointCuts(bool sync, WithShards with_shards);

  CheckpointCuts(const CheckpointCuts&) = delete;
  CheckpointCuts& operator=(const CheckpointCuts&) = delete;

  // Starts a checkpoint of `shards`, which must be this server's primaries in map `map_version`,
  // the installed one (else FAILED_PRECONDITION naming it). Sync: `step` is the boundary t >= 0
  // (else INVALID_ARGUMENT) and `applied_step` the barrier's newest applied step, read under its
  // lock, which the caller holds exclusively (no step applied, no push admitted meanwhile);
  // FAILED_PRECONDITION when the boundary has passed (t <= applied_step, or step t's pushes have
  // reached one of the shards); at the boundary already (t == applied_step + 1), the shards'
  // state is cut at once. Other modes: `step` must be -1 (else INVALID_ARGUMENT) and
  // `applied_step` is ignored. FAILED_PRECONDITION while another checkpoint is under way;
  // UNAVAILABLE after Close. `request` says which checkpoint the cuts are for and which it
  // builds on: a shard's cut is incremental when its previous cut here was for request.base_id
  // (Shard::CutRows), else full. On error nothing changes.
  absl::Status Begin(int64_t step, int64_t applied_step, const std::vector<uint32_t>& shards,
                     uint64_t map_version, const CutRequest& request = {}) ABSL_LOCKS_EXCLUDED(mu_);

  // Sync: the barrier is about to apply step `step`. When that step is the checkpoint's
  // boundary, the rows of the shards not cut yet are cut first (they are still the boundary's).
  void BeforeStep(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // Sync: the barrier has applied step `step`. When step + 1 is the checkpoint's boundary, the
  // boundary is reached: the shards' state is cut, and the cuts' waits end.
  void AfterStep(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // The cut of `shard` (one of Begin's), which it hands over. Sync: waits until the boundary is
  // reached: DEADLINE_EXCEEDED at `deadline`; UNAVAILABLE if Close is called first; ABORTED if
  // End is. `*stall` receives how long the shard's pushes were held back by the cut (unchanged
  // on error). NOT_FOUND for a shard not in the checkpoint, or whose cut was already taken;
  // FAILED_PRECONDITION if the shard moved to another server (this server is not its primary).
  absl::StatusOr<ShardCut> Take(uint32_t shard, absl::Time deadline, absl::Duration* stall)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Reads the rows of a cut Take gave into it (Shard::ReadCutRows), a record at a time: OK once
  // every row is in cut->records. `*max_hold` receives the longest the shard's lock was held for
  // one record (zero if none was read). FAILED_PRECONDITION if the shard moved to another server;
  // ABORTED if its rows were replaced or the checkpoint ended meanwhile.
  absl::Status ReadRows(ShardCut* cut, absl::Duration* max_hold) ABSL_LOCKS_EXCLUDED(mu_);

  // Ends the checkpoint begun last, dropping cuts not taken and abandoning the reads of cuts'
  // rows not finished. Idempotent.
  void End() ABSL_LOCKS_EXCLUDED(mu_);

  // The server shuts down: the waits of Take end with UNAVAILABLE, and Begin fails from now on.
  // Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct PendingCut {
    ShardCut cut;
    bool state_cut = false;  // sync: CutState done at the boundary
    bool rows_cut = false;   // sync: CutRows done
    absl::Duration stall;
  };

  // Sync: cuts the state (window, dense chunks, sequence) of the checkpoint's shards at the
  // boundary, which is then reached; CutRowsLocked: the rows of those not yet cut.
  void CutStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CutRowsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const bool sync_;
  const WithShards with_shards_;

  absl::Mutex mu_;
  bool checkpointing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t step_ ABSL_GUARDED_BY(mu_) = -1;  // sync: the boundary
  CutRequest request_ ABSL_GUARDED_BY(mu_);
  bool boundary_reached_ ABSL_GUARDED_BY(mu_) = false;
  // By shard: the cuts not yet taken.
  absl::flat_hash_map<uint32_t, PendingCut> cuts_ ABSL_GUARDED_BY(mu_);
  // The shards of the checkpoint under way.
  std::vector<uint32_t> shards_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_CHECKPOINT_CUTS_H_

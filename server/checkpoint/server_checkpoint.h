// A server's part of a checkpoint: cut each of its primary shards (ShardedStore's checkpoint
// calls) and write it to its file in the checkpoint's folder.
#ifndef PS_SERVER_CHECKPOINT_SERVER_CHECKPOINT_H_
#define PS_SERVER_CHECKPOINT_SERVER_CHECKPOINT_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "server/sharded_store.h"

namespace ps {
namespace server {

// Writes `request.shards` of `store` into `request.path` (an existing folder), one file a shard
// named shard-NNNNN.sst, synced, then syncs the folder. Shards are cut one at a time, so memory
// grows by one shard's copy (sync mode: by those whose next step came before they were written).
// Errors: INVALID_ARGUMENT for a path that is not an absolute, existing folder; those of
// BeginCheckpoint and TakeCheckpointCut (DEADLINE_EXCEEDED at `deadline`); WriteShardFile's.
// Files written before an error are left for the coordinator to remove with the folder.
absl::StatusOr<rpc::WriteCheckpointResponse> WriteServerCheckpoint(
    ShardedStore* store, const rpc::WriteCheckpointRequest& request, absl::Time deadline);

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_SERVER_CHECKPOINT_H_

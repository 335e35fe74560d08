// A server's part of checkpoints: cut each of its primary shards (ShardedStore's checkpoint
// calls) and write it to its file in the checkpoint's folder; and, in a restored job, load its
// shards from the checkpoint before it serves them.
#ifndef PS_SERVER_CHECKPOINT_SERVER_CHECKPOINT_H_
#define PS_SERVER_CHECKPOINT_SERVER_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"
#include "server/sharded_store.h"

namespace ps {
namespace server {

// Writes `request.shards` of `store` into `request.path` (an existing folder), one file a shard
// named shard-NNNNN.sst, synced, then syncs the folder. A shard this server cut last for
// checkpoint request.base_id is written incrementally on it, the others in full (see
// ShardedStore::BeginCheckpoint). The calling thread cuts the shards, and W threads of lowered
// priority (nice 19) read their rows (copy-on-write) and write them, W being a quarter of the
// machine's cores, from 2 to 8 (CheckpointWriterThreads): memory grows by up to W shards' copies,
// plus the old values of rows changed before they were read (for at most 2W shards at a time;
// sync mode: for every shard whose next step came before it was read).
// The response's max_stall_ms is the longest a shard's lock was held by the cut or one read.
// Errors: INVALID_ARGUMENT for a path that is not an absolute, existing folder; those of
// BeginCheckpoint, TakeCheckpointCut (DEADLINE_EXCEEDED at `deadline`) and ReadCheckpointRows;
// WriteShardFile's.
// Files written before an error are left for the coordinator to remove with the folder.
absl::StatusOr<rpc::WriteCheckpointResponse> WriteServerCheckpoint(
    ShardedStore* store, const rpc::WriteCheckpointRequest& request, absl::Time deadline);

// Shards a server loaded for a restore while the coordinator still checked the checkpoint's files
// (ShardMap.restore_unchecked), held until a map says the files are intact.
struct HeldRestore {
  // The newest map version they were held for; 0 when none is held.
  uint64_t map_version = 0;
  // The checkpoint they come from, and the shards (the map's new primaries of this server).
  std::string folder;
  std::vector<uint32_t> shards;
  ShardedStore::Restored restored;
  // When they were loaded, and how long that took.
  absl::Time loaded_at;
  double load_seconds = 0;
};

// The threads WriteServerCheckpoint writes a server's shards with: a quarter of the machine's
// cores, at least 2 and at most 8, so that a large server writes as fast as its disk takes while
// the copies waiting to be written stay a few shards.
int CheckpointWriterThreads();

// Installs `map` in `store` (server `server_id`). When the map names a checkpoint to restore from
// (ShardMap.restore_from) and makes this server a new primary, those shards are first loaded
// from the checkpoint's files on up to `threads` threads (LoadCheckpointShards), and the store
// starts from them (ShardedStore::SetShardMap with Restored). Requests wait meanwhile (UNAVAILABLE:
// no shard map yet).
// A map that says the coordinator still checks the files (restore_unchecked) is not installed:
// its shards are loaded into `held` (unless it holds them already), and the first map without
// it installs them without reading the files again, when it gives this server the same new
// primaries from the same checkpoint (otherwise they are loaded again). So no server serves a
// restored shard before every file of the checkpoint was found intact.
// Errors, with the map not installed: ReadCheckpointManifest's; LoadCheckpointShards' (DATA_LOSS
// for a missing or damaged file, FAILED_PRECONDITION for tables that do not fit the job's);
// SetShardMap's.
absl::Status InstallShardMap(ShardedStore* store, const rpc::ShardMap& map, uint32_t server_id,
                             int threads, HeldRestore* held);

// Puts the checkpoint in `request.path` back into the running `store`: the shards
// `request.shards` (this server's primaries in map request.header.map_version) are loaded from its
// files on up to `threads` threads (as a restored job's are) and replace the store's
// (ShardedStore::ReplacePrimaries). Returns the rows restored. Errors, with nothing replaced:
// INVALID_ARGUMENT for a path that is not absolute; ReadCheckpointManifest's and
// LoadCheckpointShards' (DATA_LOSS for a missing or damaged file, FAILED_PRECONDITION for tables
// that do not fit the job's); ReplacePrimaries' (FAILED_PRECONDITION: another map, not this
// server's primaries, a sync step under way).
absl::StatusOr<rpc::RestoreShardsResponse> RestoreServerShards(
    ShardedStore* store, const rpc::RestoreShardsRequest& request, int threads);

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_SERVER_CHECKPOINT_H_

// What a coordinator checks before it starts a job from a checkpoint: that the checkpoint is
// complete and intact, and that the job can hold what it holds. A job is started from a checkpoint
// only when every check passes, so that no server ever loads half of one.
#ifndef PS_SERVER_COORDINATOR_RESTORE_CHECK_H_
#define PS_SERVER_COORDINATOR_RESTORE_CHECK_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "proto/job.pb.h"

namespace ps {
namespace coordinator {

// A checkpoint a job may start from.
struct RestorePoint {
  // The checkpoint's folder.
  std::string folder;
  rpc::CheckpointManifest manifest;
};

// Checks the checkpoint `path` names (a checkpoint's folder, or a checkpoint_dir: its newest
// complete checkpoint) against `job`:
//  - every table of the checkpoint is a table of the job with the same dim and optimizer type
//    (the rows' layout); the job may have more tables (they start empty) and other optimizer
//    hyperparameters, initializers, num_shards, num_servers or replication;
//  - an incremental checkpoint's chain is there: every base down to a full checkpoint
//    (ReadCheckpointChain);
//  - every shard file of every checkpoint of the chain exists with its manifest's size and
//    XXH3-64 (each file is read once).
// Returns the checkpoint. Errors: ResolveCheckpoint's (NOT_FOUND: nothing complete there;
// FAILED_PRECONDITION: a bad manifest); FAILED_PRECONDITION naming the table and what differs;
// DATA_LOSS naming a missing or unfitting base checkpoint (ReadCheckpointChain), or a missing,
// resized or damaged file (VerifyShardFile).
absl::StatusOr<RestorePoint> CheckRestorable(const std::string& path, const config::Job& job);

// The checkpoint a job starts from: `flag` (ps_coordinator --restore) if not empty, else the
// job's cluster.restore_from, else, with cluster.resume, checkpoint_dir's newest complete
// checkpoint if it has one. Returns an empty path when the job starts empty.
std::string RestorePathOf(const std::string& flag, const config::Job& job);

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_RESTORE_CHECK_H_

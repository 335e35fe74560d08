// What a coordinator checks before it starts a job from a checkpoint: that the checkpoint is
// complete and intact, and that the job can hold what it holds. The quick checks (manifests,
// tables, chain, file sizes) come before the job starts; the files' checksums are read while the
// servers load their shards, and no server serves a restored shard before every check passed.
#ifndef PS_SERVER_COORDINATOR_RESTORE_CHECK_H_
#define PS_SERVER_COORDINATOR_RESTORE_CHECK_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "proto/job.pb.h"

namespace ps {
namespace coordinator {

// A checkpoint a job may start from.
struct RestorePoint {
  // A shard file of the checkpoint or of a checkpoint it builds on.
  struct File {
    std::string path;
    // Its manifest's entry: size and XXH3-64.
    rpc::CheckpointShardFile expected;
  };

  // The checkpoint's folder.
  std::string folder;
  rpc::CheckpointManifest manifest;
  // Every shard file of its chain, the checkpoint's own first.
  std::vector<File> files;
};

// Checks the checkpoint `path` names (a checkpoint's folder, or a checkpoint_dir: its newest
// complete checkpoint) against `job`, without reading its shard files:
//  - every table of the checkpoint is a table of the job with the same dim and optimizer type
//    (the rows' layout); the job may have more tables (they start empty) and other optimizer
//    hyperparameters, initializers, num_shards, num_servers or replication;
//  - an incremental checkpoint's chain is there: every base down to a full checkpoint
//    (ReadCheckpointChain);
//  - every shard file of every checkpoint of the chain exists with its manifest's size.
// Returns the checkpoint. Errors: ResolveCheckpoint's (NOT_FOUND: nothing complete there;
// FAILED_PRECONDITION: a bad manifest); FAILED_PRECONDITION naming the table and what differs;
// DATA_LOSS naming a missing or unfitting base checkpoint (ReadCheckpointChain), or a missing or
// resized file (CheckShardFileSize).
absl::StatusOr<RestorePoint> CheckRestorable(const std::string& path, const config::Job& job);

// Reads every shard file of `point` (CheckRestorable's) once and checks its XXH3-64 against its
// manifest's, several files at once (CheckpointReadThreads). This is the long part of the check,
// which a coordinator runs while the servers already load their shards: they serve them only
// once it has passed (ShardMap.restore_unchecked). OK, or DATA_LOSS naming the first file that is
// missing, resized or damaged (VerifyShardFile); CANCELLED when `*cancelled` (if given) became
// true before every file was read: no new file is started then.
absl::Status VerifyRestoreFiles(const RestorePoint& point,
                                const std::atomic<bool>* cancelled = nullptr);

// The checkpoint a job starts from: `flag` (ps_coordinator --restore) if not empty, else the
// job's cluster.restore_from, else, with cluster.resume, checkpoint_dir's newest complete
// checkpoint if it has one. Returns an empty path when the job starts empty.
std::string RestorePathOf(const std::string& flag, const config::Job& job);

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_RESTORE_CHECK_H_

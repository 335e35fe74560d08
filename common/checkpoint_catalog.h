// The checkpoint folders of a checkpoint_dir, as the coordinator writes them and operators' tools
// read them: `<checkpoint_dir>/<id in 20 digits>/`, holding the shard files and, written last,
// MANIFEST (rpc::CheckpointManifest). A folder without a valid MANIFEST is not a checkpoint.
#ifndef PS_COMMON_CHECKPOINT_CATALOG_H_
#define PS_COMMON_CHECKPOINT_CATALOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"

namespace ps {

// What a worker puts under its key of a checkpoint's notice (rpc::CheckpointNotice) instead of its
// state when it cannot give its state at the boundary, followed by why.
inline constexpr char kWorkerStateError[] = "ERROR ";

// The manifest format this build writes and reads.
inline constexpr uint32_t kCheckpointFormat = 1;

// The name of checkpoint `id`'s folder within checkpoint_dir: its id in 20 digits.
std::string CheckpointFolderName(uint64_t id);

// The complete checkpoints in `dir` (a numbered folder whose MANIFEST parses, has this format and
// names the folder's id), oldest first. Other numbered folders are partial: listed, sorted, in
// `*partial` when given. NOT_FOUND if `dir` does not exist; INTERNAL if it cannot be listed.
absl::StatusOr<std::vector<rpc::CheckpointManifest>> ListCheckpoints(
    const std::string& dir, std::vector<std::string>* partial = nullptr);

// The manifest of the checkpoint in `folder` (a `<checkpoint_dir>/<id>/`, or a copy of one under
// any name). NOT_FOUND if `folder` does not exist; FAILED_PRECONDITION "FOLDER is not a complete
// checkpoint: ..." if its MANIFEST is missing, does not parse or has another format.
absl::StatusOr<rpc::CheckpointManifest> ReadCheckpointManifest(const std::string& folder);

// The checkpoint `path` names: a checkpoint's folder (one holding a MANIFEST), or a checkpoint_dir,
// meaning its newest complete checkpoint. Returns that checkpoint's folder and its manifest in
// `*manifest`. NOT_FOUND when `path` does not exist or is a checkpoint_dir without a complete
// checkpoint; ReadCheckpointManifest's errors (FAILED_PRECONDITION) for a folder whose manifest
// is bad.
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path,
                                              rpc::CheckpointManifest* manifest);

// A checkpoint of a chain (see ReadCheckpointChain): its folder and its manifest.
struct CheckpointLink {
  std::string folder;
  rpc::CheckpointManifest manifest;
};

// The chain an incremental checkpoint is restored from: the checkpoint in `folder` (whose
// manifest is `manifest`) first, then its base (CheckpointManifest.base_id), that one's base, and
// so on down to a full checkpoint (base_id 0), which ends it. A base is the folder named by its id
// beside `folder` (in the same checkpoint_dir). A full checkpoint's chain is itself alone.
// DATA_LOSS naming the base and its folder when a base is missing or not a complete checkpoint
// (an increment cannot be restored without it), names an id not below the checkpoint's own, or
// is of another job or number of shards (job_digest, shard_map.num_shards).
absl::StatusOr<std::vector<CheckpointLink>> ReadCheckpointChain(
    const std::string& folder, const rpc::CheckpointManifest& manifest);

// A file to read: its path and its manifest entry.
struct ShardFileRef {
  std::string path;
  rpc::CheckpointShardFile file;
};

// The files that rebuild shard `shard` of chain[0] (a chain from ReadCheckpointChain): its file
// there and, while a file is incremental, the same shard's file in the checkpoint the file builds
// on (its base_id), oldest first: a full file, then the increments over it. DATA_LOSS when a
// checkpoint of the chain lists no file for the shard (manifest.shards(shard)), or a file is
// incremental on another checkpoint than the chain's next.
absl::StatusOr<std::vector<ShardFileRef>> ShardFileChain(const std::vector<CheckpointLink>& chain,
                                                         uint32_t shard);

// Writes `manifest` as `folder`/MANIFEST: to a temporary name, synced, renamed, and the folder
// synced, so that the manifest is either whole on disk or absent. INTERNAL on a failure.
absl::Status WriteCheckpointManifest(const std::string& folder,
                                     const rpc::CheckpointManifest& manifest);

// fsync of a file, or of a folder (its entries) when `folder`. INTERNAL naming the path and the
// system's error.
absl::Status SyncPath(const std::string& path, bool folder);

// How many checkpoint files a process reads at once when it restores or checks a checkpoint: the
// machine's cores, so that a large server parses and fills its shards on all of them, but at least
// 4, so that a small one still overlaps reading the disk with parsing, and at most 64.
int CheckpointReadThreads();

}  // namespace ps

#endif  // PS_COMMON_CHECKPOINT_CATALOG_H_

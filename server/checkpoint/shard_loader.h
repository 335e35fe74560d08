// Loading a server's shards from a checkpoint, when a restored job starts: each shard from its own
// file when the job has the checkpoint's num_shards, or, when it has another, from the rows and
// dense chunks of every file that route to it now. An incremental checkpoint's shard is read from
// its chain of files (common/checkpoint_catalog.h: ShardFileChain).
#ifndef PS_SERVER_CHECKPOINT_SHARD_LOADER_H_
#define PS_SERVER_CHECKPOINT_SHARD_LOADER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "server/shard/shard.h"
#include "server/storage/embedding_table.h"

namespace ps {
namespace server {

// Reads shards `shards` of a job with `num_shards` shards and the tables `tables` from the
// checkpoint in `folder`, whose manifest is `manifest`. Returns one cut a shard, in `shards`'
// order, each ready for Shard::Restore:
//  - The checkpoint's num_shards: shard s is its file's content as written (rows with their
//    optimizer state, dense chunks, window; sequence and applied step). When the file is
//    incremental, its chain's files (the base checkpoints are the folders named by their ids
//    beside `folder`: ReadCheckpointChain) are read too: the cut holds their rows, oldest first,
//    so that an id's newest row comes last and wins (see ShardCut), then this file's rows, dense
//    chunks, window, sequence and step.
//  - Another num_shards: every file (with its chain) is read, and each row and dense chunk goes
//    to the shard its key hashes to now (common/hash.h), rows in the chain's order. The cuts have
//    sequence 0, the checkpoint's applied step (sync: its step - 1; otherwise -1) and no window:
//    exactly-once entries are kept per shard, and a restored job's workers have new ids anyway
//    (CheckpointManifest.next_member_id).
// Files are read on up to `threads` threads at once (at least 1).
// Errors, with nothing returned: DATA_LOSS for a file that is missing, whose size disagrees with
// the manifest, or that is corrupt (ReadShardFile), and for a base checkpoint that is missing,
// incomplete or does not fit (ReadCheckpointChain, ShardFileChain); FAILED_PRECONDITION when the
// files' tables do not fit `tables` (ReadShardFile) or a shard is outside [0, num_shards);
// INVALID_ARGUMENT for a manifest that lists no file for one of its shards.
absl::StatusOr<std::vector<ShardCut>> LoadCheckpointShards(
    const std::string& folder, const rpc::CheckpointManifest& manifest,
    const std::vector<std::unique_ptr<TableSpec>>& tables, uint32_t num_shards,
    const std::vector<uint32_t>& shards, int threads);

// The same, handing each cut to `consume` as soon as it is read (with the checkpoint's
// num_shards, one file at a time on each thread, so that only about `threads` cuts are in memory
// at once), from any of the reading threads, concurrently. The first error of reading or of
// `consume` is returned; no cut is consumed after it.
absl::Status LoadCheckpointShards(const std::string& folder,
                                  const rpc::CheckpointManifest& manifest,
                                  const std::vector<std::unique_ptr<TableSpec>>& tables,
                                  uint32_t num_shards, const std::vector<uint32_t>& shards,
                                  int threads,
                                  const std::function<absl::Status(ShardCut cut)>& consume);

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_SHARD_LOADER_H_

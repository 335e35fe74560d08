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

// What LoadCheckpointShards builds each shard with. The calls for one shard come from one thread,
// in order: Begin, AddRows any number of times, Finish; those of different shards from several
// threads at once. An error returned by any call stops the load and is its result.
class ShardBuilder {
 public:
  virtual ~ShardBuilder() = default;
  // Starts shard `shard`, which is about to receive about `rows` rows (over all tables).
  virtual absl::Status Begin(uint32_t shard, uint64_t rows) = 0;
  // Adds `n` whole rows (row_floats floats each, in ids order) of table `table` (an index in the
  // loading job's tables) to shard `shard`; an id's later row replaces its earlier one.
  virtual absl::Status AddRows(uint32_t shard, uint32_t table, const uint64_t* ids,
                               const float* rows, size_t n) = 0;
  // Ends shard `cut.shard` with `cut`, ready for Shard::FinishRestore: its records (dense
  // chunks, window; and rows, after those of AddRows), its sequence and its step.
  virtual absl::Status Finish(ShardCut cut) = 0;
};

// Loads shards `shards` of a job with `num_shards` shards and the tables `tables` from the
// checkpoint in `folder`, whose manifest is `manifest`, into `builder`:
//  - The checkpoint's num_shards: shard s is its file's content as written (rows with their
//    optimizer state, dense chunks, window; sequence and applied step). Its rows go to AddRows as
//    the file is read, so that only a batch of them is held at a time. When the file is
//    incremental, its chain's files (the base checkpoints are the folders named by their ids
//    beside `folder`: ReadCheckpointChain) are read too, oldest first, so that an id's newest row
//    comes last and wins; the cut then has this file's dense chunks, window, sequence and step.
//  - Another num_shards: every file (with its chain) is read, and each row and dense chunk goes
//    to the shard its key hashes to now (common/hash.h), rows in the chain's order, in the cut's
//    records. The cuts have sequence 0, the checkpoint's applied step (sync: its step - 1;
//    otherwise -1) and no window: exactly-once entries are kept per shard, and a restored job's
//    workers have new ids anyway (CheckpointManifest.next_member_id).
// Files are read on up to `threads` threads at once (at least 1), through memory mappings when
// `map_files` (ReadShardFile's map_file: a server with a memory budget reads them instead).
// Errors, with the load stopped: DATA_LOSS for a file that is missing, whose size disagrees with
// the manifest, or that is corrupt (ReadShardFile), and for a base checkpoint that is missing,
// incomplete or does not fit (ReadCheckpointChain, ShardFileChain); FAILED_PRECONDITION when the
// files' tables do not fit `tables` (ReadShardFile) or a shard is outside [0, num_shards);
// INVALID_ARGUMENT for a manifest that lists no file for one of its shards; the builder's.
absl::Status LoadCheckpointShards(const std::string& folder,
                                  const rpc::CheckpointManifest& manifest,
                                  const std::vector<std::unique_ptr<TableSpec>>& tables,
                                  uint32_t num_shards, const std::vector<uint32_t>& shards,
                                  int threads, ShardBuilder* builder, bool map_files = true);

// The same, returning one cut a shard, in `shards`' order, with every row in its records, ready
// for Shard::Restore.
absl::StatusOr<std::vector<ShardCut>> LoadCheckpointShards(
    const std::string& folder, const rpc::CheckpointManifest& manifest,
    const std::vector<std::unique_ptr<TableSpec>>& tables, uint32_t num_shards,
    const std::vector<uint32_t>& shards, int threads);

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_SHARD_LOADER_H_

// One shard of a checkpoint on disk: a RocksDB SST file (written with rocksdb::SstFileWriter, read
// with rocksdb::SstFileReader) holding a ShardCut.
//
// Its keys and values, and the XXH3-64 of the whole file that goes in the checkpoint's manifest
// (written after the file is synced), are common/checkpoint_reader.h's, which offline tools read
// the file with.
#ifndef PS_SERVER_CHECKPOINT_SHARD_FILE_H_
#define PS_SERVER_CHECKPOINT_SHARD_FILE_H_

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

// Writes `cut` to a new file at `path` (an existing file is replaced), with the tables' names and
// layouts from `tables` (indexed as the cut's records' table indices), and syncs it to disk.
// Returns the file's description (file: the path's last component; its bytes and XXH3-64; the
// cut's shard, sequence, applied step, counts, and whether it is incremental on which base).
// INVALID_ARGUMENT if a record names a table outside `tables`, or its keys and values disagree with
// the table; INTERNAL (with RocksDB's or the system's message) if writing fails, in which case the
// file may be partial.
absl::StatusOr<rpc::CheckpointShardFile> WriteShardFile(
    const std::string& path, const ShardCut& cut,
    const std::vector<std::unique_ptr<TableSpec>>& tables);

// Receives rows as a file is read: `n` ids and their whole rows of table `table` (its index in
// the reading job's tables). An error stops the reading and is returned as it is.
using RowSink =
    std::function<absl::Status(uint32_t table, const uint64_t* ids, const float* rows, size_t n)>;

// Reads a file WriteShardFile wrote back into a ShardCut whose records name the tables by their
// index in `tables` (the restoring job's), with rows in records of at most about
// `max_record_bytes`; or, when `rows` is given, handing the rows to it in the file's order, in
// batches of at most about `max_record_bytes`, instead of holding them in the cut (a restore
// then writes them straight into its tables). Checks RocksDB's block checksums, and, when
// `expected` is given, the file's size and XXH3-64 against it (the manifest's entry). Every table
// of the file must be in `tables` with the same dim and row_floats. DATA_LOSS for a file that is
// missing, truncated, corrupt, or disagrees with `expected` or with itself (counts);
// FAILED_PRECONDITION, naming the table, when the file's tables do not fit `tables`.
// `map_file`: the file is read through a memory mapping (faster; its pages count in the
// process's resident set while it is read), else with reads.
absl::StatusOr<ShardCut> ReadShardFile(const std::string& path,
                                       const std::vector<std::unique_ptr<TableSpec>>& tables,
                                       const rpc::CheckpointShardFile* expected = nullptr,
                                       size_t max_record_bytes = 1 << 20,
                                       const RowSink* rows = nullptr, bool map_file = true);

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_SHARD_FILE_H_

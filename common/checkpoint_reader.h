// A checkpoint's shard files as both sides see them: the keys the server writes them with, the
// digest the manifest holds for each, and a reader for the tools that read a checkpoint without a
// server (ps_ctl checkpoint show, ps_ctl export).
//
// A shard file is a RocksDB SST file. Its keys, in the file's bytewise order (names never contain
// a NUL byte; numbers are big-endian so that they sort as numbers):
//   "d" name "\0" chunk(4)  -> rpc::DenseChange of the chunk (values and optimizer state)
//   "m"                     -> rpc::CheckpointShardFile: shard, sequence, applied step, counts
//   "r" table "\0" id(8)    -> the row: row_floats little-endian float32 (embedding, then the
//                              optimizer's state)
//   "t" table               -> rpc::CheckpointTableLayout: dim and row_floats of the table
//   "w" worker(4)           -> rpc::WindowEntry of the worker
#ifndef PS_COMMON_CHECKPOINT_READER_H_
#define PS_COMMON_CHECKPOINT_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/checkpoint.pb.h"

namespace rocksdb {
class Iterator;
class SstFileReader;
}  // namespace rocksdb

namespace ps {

// The first byte of a shard file's key: what the record is.
inline constexpr char kShardKeyDense = 'd';
inline constexpr char kShardKeyMeta = 'm';
inline constexpr char kShardKeyRow = 'r';
inline constexpr char kShardKeyTable = 't';
inline constexpr char kShardKeyWindow = 'w';

// "d" name "\0" chunk: a dense tensor's chunk.
std::string DenseChunkKey(absl::string_view name, uint32_t chunk);
// "m": the file's header.
std::string ShardMetaKey();
// "r" table "\0": the prefix of every row of `table`; AppendRowId completes a row's key.
std::string RowKeyPrefix(absl::string_view table);
// Appends `id` in 8 big-endian bytes to `key`, a RowKeyPrefix.
void AppendRowId(uint64_t id, std::string* key);
// "r" table "\0" id: a row's whole key.
std::string RowKey(absl::string_view table, uint64_t id);
// "t" table: a table's layout.
std::string TableLayoutKey(absl::string_view table);
// "w" worker: a worker's exactly-once window.
std::string WindowKey(uint32_t worker);

// Splits a row's key into its table and id (the table a view into `key`). False, leaving the
// out-parameters unspecified, if `key` is not a well-formed row key.
bool ParseRowKey(absl::string_view key, absl::string_view* table, uint64_t* id);

// XXH3-64 of a whole file. NOT_FOUND if it does not exist; INTERNAL if it cannot be read.
absl::StatusOr<uint64_t> FileXxh3(const std::string& path);

// Checks that the file at `path` has its manifest entry `expected`'s size (no read). DATA_LOSS
// naming the path if the file is missing or its size disagrees.
absl::Status CheckShardFileSize(const std::string& path, const rpc::CheckpointShardFile& expected);

// Checks the file at `path` against its manifest entry `expected`: its size (CheckShardFileSize),
// then its XXH3-64 (a full read). DATA_LOSS naming the path if the file is missing, cannot be
// read, or either disagrees.
absl::Status VerifyShardFile(const std::string& path, const rpc::CheckpointShardFile& expected);

// A ShardRowCursor walks the rows of one table of a shard file, in id order, one block of the
// file in memory at a time. It must not outlive the ShardFileReader that made it.
// Thread-compatible.
class ShardRowCursor {
 public:
  ~ShardRowCursor();

  ShardRowCursor(const ShardRowCursor&) = delete;
  ShardRowCursor& operator=(const ShardRowCursor&) = delete;

  // True while the cursor is at a row; false past the last one or after an error (status()).
  bool Valid() const { return valid_; }
  // Moves to the next row. Requires Valid().
  void Next();

  // The current row's id and floats: the table's dim floats of embedding, then its optimizer's
  // state (layout().row_floats() in all). Require Valid(); the span lives until Next().
  uint64_t id() const { return id_; }
  absl::Span<const float> row() const { return row_; }

  // OK once the cursor has walked past the last row without an error. DATA_LOSS naming the file
  // for a corrupt block (RocksDB's block checksums are verified) or a malformed row.
  const absl::Status& status() const { return status_; }

  const rpc::CheckpointTableLayout& layout() const { return layout_; }

 private:
  friend class ShardFileReader;
  ShardRowCursor(std::string path, rpc::CheckpointTableLayout layout,
                 std::unique_ptr<rocksdb::Iterator> it);

  // Decodes the iterator's entry, or ends the cursor when it is past the table's rows.
  void Load();

  const std::string path_;
  const rpc::CheckpointTableLayout layout_;
  const std::string prefix_;
  const std::unique_ptr<rocksdb::Iterator> it_;
  bool valid_ = false;
  uint64_t id_ = 0;
  std::vector<float> row_;
  absl::Status status_;
};

// A ShardFileReader reads one shard file of a checkpoint: its header and tables when opened,
// then any table's rows through a cursor. It checks RocksDB's block checksums of what it reads,
// not the whole file's digest (VerifyShardFile). Thread-compatible.
class ShardFileReader {
 public:
  // Opens the file at `path` and reads its header ("m") and its tables' layouts ("t").
  // DATA_LOSS naming the path if the file is missing, truncated or corrupt, has no header, or a
  // record that does not parse.
  static absl::StatusOr<std::unique_ptr<ShardFileReader>> Open(const std::string& path);

  ~ShardFileReader();

  ShardFileReader(const ShardFileReader&) = delete;
  ShardFileReader& operator=(const ShardFileReader&) = delete;

  const std::string& path() const { return path_; }
  // The file's header: shard, sequence, applied step, row and dense chunk counts (not the file's
  // name, size and digest, which only the manifest holds).
  const rpc::CheckpointShardFile& header() const { return header_; }
  // The tables the file describes, in name order (every table of the job, rows or not).
  const std::vector<rpc::CheckpointTableLayout>& tables() const { return tables_; }

  // A cursor at the first row of `table` (not Valid() if it has none). NOT_FOUND naming the
  // file's tables if the file does not describe `table`.
  absl::StatusOr<std::unique_ptr<ShardRowCursor>> Rows(absl::string_view table);

  // The number of rows of `table` in the file (a read of them all). NOT_FOUND as Rows; DATA_LOSS
  // as ShardRowCursor::status().
  absl::StatusOr<uint64_t> CountRows(absl::string_view table);

 private:
  ShardFileReader(std::string path, std::unique_ptr<rocksdb::SstFileReader> reader);

  const std::string path_;
  const std::unique_ptr<rocksdb::SstFileReader> reader_;
  rpc::CheckpointShardFile header_;
  std::vector<rpc::CheckpointTableLayout> tables_;
};

// A ShardChainCursor walks the rows of one table of one shard over the files that rebuild it in
// an incremental checkpoint (common/checkpoint_catalog.h: ShardFileChain gives them, a full file
// and the increments over it), in id order, each id once, with the row of the newest file that
// holds it: the rows a restore gives the shard. One file is a chain too. Thread-compatible.
class ShardChainCursor {
 public:
  // Opens each file of `paths` (oldest first; at least one) and a cursor of `table` in each.
  // Errors: ShardFileReader::Open's (DATA_LOSS); NOT_FOUND as ShardFileReader::Rows (in the
  // newest file); DATA_LOSS naming the file when an older file has no such table or another
  // layout of it.
  static absl::StatusOr<std::unique_ptr<ShardChainCursor>> Open(
      const std::vector<std::string>& paths, absl::string_view table);

  ~ShardChainCursor();

  ShardChainCursor(const ShardChainCursor&) = delete;
  ShardChainCursor& operator=(const ShardChainCursor&) = delete;

  // As ShardRowCursor's: Valid() while at a row; status() OK once past the last row without an
  // error, else the first file's error (DATA_LOSS).
  bool Valid() const { return current_ != nullptr; }
  void Next();
  uint64_t id() const { return current_->id(); }
  absl::Span<const float> row() const { return current_->row(); }
  const absl::Status& status() const { return status_; }

  // The table's layout (the newest file's; every file's is the same).
  const rpc::CheckpointTableLayout& layout() const { return cursors_.back()->layout(); }

 private:
  ShardChainCursor() = default;

  // Points current_ at the newest of the cursors at the smallest id, or ends the walk.
  void Settle();

  std::vector<std::unique_ptr<ShardFileReader>> readers_;  // oldest first
  std::vector<std::unique_ptr<ShardRowCursor>> cursors_;   // one per reader
  ShardRowCursor* current_ = nullptr;
  absl::Status status_;
};

}  // namespace ps

#endif  // PS_COMMON_CHECKPOINT_READER_H_

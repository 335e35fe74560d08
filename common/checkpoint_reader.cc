#include "common/checkpoint_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "xxhash.h"

#include "common/byte_order.h"

static_assert(ps::kHostIsLittleEndian,
              "shard files hold little-endian floats, which this reader copies as they are");

namespace ps {
namespace {

absl::Status DataLoss(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("checkpoint file ", path, ": ", what));
}

void AppendBigEndian32(uint32_t v, std::string* out) {
  const uint32_t be = BigEndian32(v);
  out->append(reinterpret_cast<const char*>(&be), sizeof(be));
}

rocksdb::ReadOptions ScanOptions() {
  rocksdb::ReadOptions options;
  options.verify_checksums = true;
  // Rows are read in file order: read ahead in large pieces.
  options.readahead_size = 2 << 20;
  return options;
}

}  // namespace

std::string DenseChunkKey(absl::string_view name, uint32_t chunk) {
  std::string key(1, kShardKeyDense);
  key.append(name.data(), name.size());
  key.push_back('\0');
  AppendBigEndian32(chunk, &key);
  return key;
}

std::string ShardMetaKey() { return std::string(1, kShardKeyMeta); }

std::string RowKeyPrefix(absl::string_view table) {
  std::string key(1, kShardKeyRow);
  key.append(table.data(), table.size());
  key.push_back('\0');
  return key;
}

void AppendRowId(uint64_t id, std::string* key) {
  const uint64_t be = absl::ghtonll(id);
  key->append(reinterpret_cast<const char*>(&be), sizeof(be));
}

std::string RowKey(absl::string_view table, uint64_t id) {
  std::string key = RowKeyPrefix(table);
  AppendRowId(id, &key);
  return key;
}

std::string TableLayoutKey(absl::string_view table) {
  return absl::StrCat(absl::string_view(&kShardKeyTable, 1), table);
}

std::string WindowKey(uint32_t worker) {
  std::string key(1, kShardKeyWindow);
  AppendBigEndian32(worker, &key);
  return key;
}

bool ParseRowKey(absl::string_view key, absl::string_view* table, uint64_t* id) {
  if (key.empty() || key[0] != kShardKeyRow) return false;
  const absl::string_view rest = key.substr(1);
  const size_t nul = rest.find('\0');
  if (nul == absl::string_view::npos || rest.size() != nul + 1 + sizeof(uint64_t)) return false;
  *table = rest.substr(0, nul);
  uint64_t be;
  std::memcpy(&be, rest.data() + nul + 1, sizeof(be));
  *id = absl::gntohll(be);
  return true;
}

absl::StatusOr<uint64_t> FileXxh3(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buffer(1 << 20);
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) {
    XXH3_64bits_update(state, buffer.data(), n);
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (failed) return absl::InternalError(absl::StrCat("read ", path, " failed"));
  return digest;
}

absl::Status CheckShardFileSize(const std::string& path, const rpc::CheckpointShardFile& expected) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return DataLoss(path, "is missing");
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec || bytes != expected.bytes()) {
    return DataLoss(path, absl::StrFormat("has %d bytes, the manifest says %d", ec ? 0 : bytes,
                                          expected.bytes()));
  }
  return absl::OkStatus();
}

absl::Status VerifyShardFile(const std::string& path, const rpc::CheckpointShardFile& expected) {
  absl::Status size = CheckShardFileSize(path, expected);
  if (!size.ok()) return size;
  absl::StatusOr<uint64_t> digest = FileXxh3(path);
  if (!digest.ok()) return DataLoss(path, digest.status().message());
  if (*digest != expected.xxh3()) {
    return DataLoss(
        path, absl::StrFormat("checksum %016x, the manifest says %016x", *digest, expected.xxh3()));
  }
  return absl::OkStatus();
}

ShardRowCursor::ShardRowCursor(std::string path, rpc::CheckpointTableLayout layout,
                               std::unique_ptr<rocksdb::Iterator> it)
    : path_(std::move(path)),
      layout_(std::move(layout)),
      prefix_(RowKeyPrefix(layout_.name())),
      it_(std::move(it)),
      row_(layout_.row_floats()) {
  it_->Seek(prefix_);
  Load();
}

ShardRowCursor::~ShardRowCursor() = default;

void ShardRowCursor::Next() {
  it_->Next();
  Load();
}

void ShardRowCursor::Load() {
  valid_ = false;
  if (!it_->Valid()) {
    if (!it_->status().ok()) status_ = DataLoss(path_, it_->status().ToString());
    return;
  }
  const absl::string_view key(it_->key().data(), it_->key().size());
  if (!absl::StartsWith(key, prefix_)) return;  // past the table's rows
  absl::string_view table;
  if (!ParseRowKey(key, &table, &id_)) {
    status_ =
        DataLoss(path_, absl::StrCat("a row key of table \"", layout_.name(), "\" is malformed"));
    return;
  }
  const rocksdb::Slice value = it_->value();
  if (value.size() != row_.size() * sizeof(float)) {
    status_ =
        DataLoss(path_, absl::StrFormat("row %d of table \"%s\" has %d bytes, not %d", id_,
                                        layout_.name(), value.size(), row_.size() * sizeof(float)));
    return;
  }
  std::memcpy(row_.data(), value.data(), value.size());
  valid_ = true;
}

absl::StatusOr<std::unique_ptr<ShardFileReader>> ShardFileReader::Open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return DataLoss(path, "is missing");
  auto sst = std::make_unique<rocksdb::SstFileReader>(rocksdb::Options());
  rocksdb::Status s = sst->Open(path);
  if (!s.ok()) return DataLoss(path, s.ToString());
  std::unique_ptr<ShardFileReader> reader(new ShardFileReader(path, std::move(sst)));

  std::unique_ptr<rocksdb::Iterator> it(reader->reader_->NewIterator(ScanOptions()));
  it->Seek(ShardMetaKey());
  if (!it->Valid() || it->key() != ShardMetaKey()) {
    if (!it->status().ok()) return DataLoss(path, it->status().ToString());
    return DataLoss(path, "has no header (key \"m\")");
  }
  if (!reader->header_.ParseFromArray(it->value().data(), it->value().size())) {
    return DataLoss(path, "its header does not parse");
  }
  for (it->Seek(std::string(1, kShardKeyTable)); it->Valid() && it->key()[0] == kShardKeyTable;
       it->Next()) {
    rpc::CheckpointTableLayout layout;
    if (!layout.ParseFromArray(it->value().data(), it->value().size()) ||
        it->key() != TableLayoutKey(layout.name()) || layout.row_floats() < layout.dim()) {
      return DataLoss(path, "a table layout is malformed");
    }
    reader->tables_.push_back(std::move(layout));
  }
  if (!it->status().ok()) return DataLoss(path, it->status().ToString());
  return reader;
}

ShardFileReader::ShardFileReader(std::string path, std::unique_ptr<rocksdb::SstFileReader> reader)
    : path_(std::move(path)), reader_(std::move(reader)) {}

ShardFileReader::~ShardFileReader() = default;

absl::StatusOr<std::unique_ptr<ShardRowCursor>> ShardFileReader::Rows(absl::string_view table) {
  for (const rpc::CheckpointTableLayout& layout : tables_) {
    if (layout.name() != table) continue;
    std::unique_ptr<rocksdb::Iterator> it(reader_->NewIterator(ScanOptions()));
    return std::unique_ptr<ShardRowCursor>(new ShardRowCursor(path_, layout, std::move(it)));
  }
  std::vector<std::string> names;
  for (const rpc::CheckpointTableLayout& layout : tables_) names.push_back(layout.name());
  return absl::NotFoundError(absl::StrFormat("checkpoint file %s has no table \"%s\" (it has: %s)",
                                             path_, table, absl::StrJoin(names, ", ")));
}

absl::StatusOr<uint64_t> ShardFileReader::CountRows(absl::string_view table) {
  absl::StatusOr<std::unique_ptr<ShardRowCursor>> cursor = Rows(table);
  if (!cursor.ok()) return cursor.status();
  uint64_t n = 0;
  for (; (*cursor)->Valid(); (*cursor)->Next()) ++n;
  if (!(*cursor)->status().ok()) return (*cursor)->status();
  return n;
}

absl::StatusOr<std::unique_ptr<ShardChainCursor>> ShardChainCursor::Open(
    const std::vector<std::string>& paths, absl::string_view table) {
  if (paths.empty()) return absl::InvalidArgumentError("a chain of no shard files");
  std::unique_ptr<ShardChainCursor> chain(new ShardChainCursor());
  for (size_t i = paths.size(); i-- > 0;) {  // the newest first: its table decides
    absl::StatusOr<std::unique_ptr<ShardFileReader>> reader = ShardFileReader::Open(paths[i]);
    if (!reader.ok()) return reader.status();
    absl::StatusOr<std::unique_ptr<ShardRowCursor>> cursor = (*reader)->Rows(table);
    if (!cursor.ok()) {
      if (chain->cursors_.empty()) return cursor.status();
      return DataLoss(paths[i], cursor.status().message());
    }
    if (!chain->cursors_.empty() &&
        ((*cursor)->layout().dim() != chain->layout().dim() ||
         (*cursor)->layout().row_floats() != chain->layout().row_floats())) {
      return DataLoss(paths[i], absl::StrFormat("table \"%s\" has another layout than in %s", table,
                                                paths.back()));
    }
    chain->readers_.insert(chain->readers_.begin(), *std::move(reader));
    chain->cursors_.insert(chain->cursors_.begin(), *std::move(cursor));
  }
  chain->Settle();
  return chain;
}

ShardChainCursor::~ShardChainCursor() = default;

void ShardChainCursor::Next() {
  const uint64_t id = current_->id();
  for (const std::unique_ptr<ShardRowCursor>& cursor : cursors_) {
    if (cursor->Valid() && cursor->id() == id) cursor->Next();
  }
  Settle();
}

void ShardChainCursor::Settle() {
  current_ = nullptr;
  for (const std::unique_ptr<ShardRowCursor>& cursor : cursors_) {
    if (!cursor->status().ok()) {
      status_ = cursor->status();
      current_ = nullptr;
      return;
    }
    // Newer files come later: at an equal id, the newer one wins.
    if (cursor->Valid() && (current_ == nullptr || cursor->id() <= current_->id())) {
      current_ = cursor.get();
    }
  }
}

}  // namespace ps

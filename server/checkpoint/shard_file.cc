#include "server/checkpoint/shard_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/base/internal/endian.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_catalog.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "xxhash.h"

namespace ps {
namespace server {
namespace {

constexpr char kDense = 'd';
constexpr char kMeta = 'm';
constexpr char kRow = 'r';
constexpr char kTable = 't';
constexpr char kWindow = 'w';

rocksdb::Options FileOptions() {
  rocksdb::Options options;
  // Floats do not compress; 256 KiB blocks keep the index small for millions of rows.
  options.compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.block_size = 256 << 10;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

void AppendBigEndian32(uint32_t v, std::string* out) {
  const uint32_t be = absl::ghtonl(v);
  out->append(reinterpret_cast<const char*>(&be), sizeof(be));
}

void AppendBigEndian64(uint64_t v, std::string* out) {
  const uint64_t be = absl::ghtonll(v);
  out->append(reinterpret_cast<const char*>(&be), sizeof(be));
}

uint64_t ReadBigEndian64(const char* p) {
  uint64_t be;
  std::memcpy(&be, p, sizeof(be));
  return absl::gntohll(be);
}

absl::Status Internal(const std::string& path, const rocksdb::Status& s) {
  return absl::InternalError(absl::StrCat("checkpoint file ", path, ": ", s.ToString()));
}

absl::Status DataLoss(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("checkpoint file ", path, ": ", what));
}

}  // namespace

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

absl::StatusOr<rpc::CheckpointShardFile> WriteShardFile(
    const std::string& path, const ShardCut& cut,
    const std::vector<std::unique_ptr<TableSpec>>& tables) {
  // Gather the rows by table and sort them by id: the file's keys must come in order.
  struct RowRef {
    uint64_t id;
    const char* row;
  };
  std::vector<std::vector<RowRef>> rows(tables.size());
  std::vector<const rpc::DenseChange*> dense;
  std::vector<const rpc::WindowEntry*> windows;
  for (const rpc::ShardRecord& record : cut.records) {
    if (record.has_rows()) {
      const rpc::RowsChange& change = record.rows();
      if (change.table() >= tables.size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("shard %d: rows of table %d, the job has %d tables", cut.shard,
                            change.table(), tables.size()));
      }
      const size_t row_bytes = tables[change.table()]->row_floats() * sizeof(float);
      const size_t n = change.keys().size() / sizeof(uint64_t);
      if (change.keys().size() % sizeof(uint64_t) != 0 || change.values().size() != n * row_bytes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "shard %d: rows of table %s: %d key bytes and %d value bytes disagree", cut.shard,
            tables[change.table()]->name, change.keys().size(), change.values().size()));
      }
      std::vector<RowRef>& out = rows[change.table()];
      for (size_t i = 0; i < n; ++i) {
        uint64_t id;
        std::memcpy(&id, change.keys().data() + i * sizeof(uint64_t), sizeof(id));
        out.push_back({id, change.values().data() + i * row_bytes});
      }
    } else if (record.has_dense()) {
      dense.push_back(&record.dense());
    } else if (record.has_window()) {
      windows.push_back(&record.window());
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "shard %d: a checkpoint holds rows, dense chunks and windows only", cut.shard));
    }
  }

  rpc::CheckpointShardFile meta;
  meta.set_shard(cut.shard);
  meta.set_sequence(cut.sequence);
  meta.set_applied_step(cut.applied_step);
  meta.set_dense_chunks(dense.size());
  uint64_t total_rows = 0;
  for (const std::vector<RowRef>& r : rows) total_rows += r.size();
  meta.set_rows(total_rows);

  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), FileOptions());
  rocksdb::Status s = writer.Open(path);
  if (!s.ok()) return Internal(path, s);
  std::string key;
  std::string value;

  // "d": dense chunks by (name, chunk).
  std::sort(dense.begin(), dense.end(), [](const rpc::DenseChange* a, const rpc::DenseChange* b) {
    if (a->name() != b->name()) return a->name() < b->name();
    return a->chunk() < b->chunk();
  });
  for (const rpc::DenseChange* d : dense) {
    key.assign(1, kDense);
    key.append(d->name());
    key.push_back('\0');
    AppendBigEndian32(d->chunk(), &key);
    d->SerializeToString(&value);
    if (!(s = writer.Put(key, value)).ok()) return Internal(path, s);
  }

  // "m": what the file holds.
  meta.SerializeToString(&value);
  if (!(s = writer.Put(std::string(1, kMeta), value)).ok()) return Internal(path, s);

  // "r": rows by (table name, id).
  std::vector<size_t> by_name(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) by_name[t] = t;
  std::sort(by_name.begin(), by_name.end(),
            [&](size_t a, size_t b) { return tables[a]->name < tables[b]->name; });
  for (size_t t : by_name) {
    std::vector<RowRef>& table_rows = rows[t];
    std::sort(table_rows.begin(), table_rows.end(),
              [](const RowRef& a, const RowRef& b) { return a.id < b.id; });
    const size_t row_bytes = tables[t]->row_floats() * sizeof(float);
    key.assign(1, kRow);
    key.append(tables[t]->name);
    key.push_back('\0');
    const size_t prefix = key.size();
    for (const RowRef& r : table_rows) {
      key.resize(prefix);
      AppendBigEndian64(r.id, &key);
      s = writer.Put(key, rocksdb::Slice(r.row, row_bytes));
      if (!s.ok()) return Internal(path, s);
    }
  }

  // "t": the tables' layouts.
  for (size_t t : by_name) {
    rpc::CheckpointTableLayout layout;
    layout.set_name(tables[t]->name);
    layout.set_dim(tables[t]->dim);
    layout.set_row_floats(tables[t]->row_floats());
    layout.SerializeToString(&value);
    if (!(s = writer.Put(std::string(1, kTable) + tables[t]->name, value)).ok()) {
      return Internal(path, s);
    }
  }

  // "w": the window by worker.
  std::sort(windows.begin(), windows.end(),
            [](const rpc::WindowEntry* a, const rpc::WindowEntry* b) {
              return a->worker_id() < b->worker_id();
            });
  for (const rpc::WindowEntry* w : windows) {
    key.assign(1, kWindow);
    AppendBigEndian32(w->worker_id(), &key);
    w->SerializeToString(&value);
    if (!(s = writer.Put(key, value)).ok()) return Internal(path, s);
  }

  if (!(s = writer.Finish()).ok()) return Internal(path, s);
  absl::Status synced = SyncPath(path, /*folder=*/false);
  if (!synced.ok()) return synced;

  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec) return absl::InternalError(absl::StrCat("size of ", path, ": ", ec.message()));
  absl::StatusOr<uint64_t> digest = FileXxh3(path);
  if (!digest.ok()) return digest.status();
  meta.set_file(std::filesystem::path(path).filename().string());
  meta.set_bytes(bytes);
  meta.set_xxh3(*digest);
  return meta;
}

absl::StatusOr<ShardCut> ReadShardFile(const std::string& path,
                                       const std::vector<std::unique_ptr<TableSpec>>& tables,
                                       const rpc::CheckpointShardFile* expected,
                                       size_t max_record_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return DataLoss(path, "is missing");
  if (expected != nullptr) {
    const uintmax_t bytes = std::filesystem::file_size(path, ec);
    if (ec || bytes != expected->bytes()) {
      return DataLoss(path, absl::StrFormat("has %d bytes, the manifest says %d", ec ? 0 : bytes,
                                            expected->bytes()));
    }
    absl::StatusOr<uint64_t> digest = FileXxh3(path);
    if (!digest.ok()) return DataLoss(path, digest.status().message());
    if (*digest != expected->xxh3()) {
      return DataLoss(path, absl::StrFormat("checksum %016x, the manifest says %016x", *digest,
                                            expected->xxh3()));
    }
  }

  rocksdb::SstFileReader reader(FileOptions());
  rocksdb::Status s = reader.Open(path);
  if (!s.ok()) return DataLoss(path, s.ToString());
  if (!(s = reader.VerifyChecksum()).ok()) return DataLoss(path, s.ToString());
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));

  // The tables of the file, mapped onto the job's.
  absl::flat_hash_map<std::string, size_t> job_table;
  for (size_t t = 0; t < tables.size(); ++t) job_table[tables[t]->name] = t;
  absl::flat_hash_map<std::string, size_t> file_table;  // name -> the job's index
  for (it->Seek(std::string(1, kTable)); it->Valid() && it->key()[0] == kTable; it->Next()) {
    rpc::CheckpointTableLayout layout;
    if (!layout.ParseFromArray(it->value().data(), it->value().size())) {
      return DataLoss(path, "a table layout does not parse");
    }
    auto at = job_table.find(layout.name());
    if (at == job_table.end()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("checkpoint file %s holds table \"%s\", which the job does not have",
                          path, layout.name()));
    }
    const TableSpec& spec = *tables[at->second];
    if (spec.dim != layout.dim() || spec.row_floats() != layout.row_floats()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "checkpoint file %s: table \"%s\" has dim %d and %d floats a row (embedding and "
          "optimizer state); the job's has dim %d and %d",
          path, layout.name(), layout.dim(), layout.row_floats(), spec.dim, spec.row_floats()));
    }
    file_table[layout.name()] = at->second;
  }
  if (!it->status().ok()) return DataLoss(path, it->status().ToString());

  ShardCut cut;
  rpc::CheckpointShardFile meta;
  bool have_meta = false;
  uint64_t rows = 0;
  uint64_t dense_chunks = 0;
  rpc::ShardRecord record;  // rows being gathered
  size_t record_table = SIZE_MAX;
  auto flush = [&] {
    if (record_table == SIZE_MAX) return;
    cut.records.push_back(std::move(record));
    record = rpc::ShardRecord();
    record_table = SIZE_MAX;
  };
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    switch (k[0]) {
      case kDense: {
        flush();
        rpc::ShardRecord r;
        if (!r.mutable_dense()->ParseFromArray(v.data(), v.size())) {
          return DataLoss(path, "a dense chunk does not parse");
        }
        cut.records.push_back(std::move(r));
        ++dense_chunks;
        break;
      }
      case kMeta:
        if (!meta.ParseFromArray(v.data(), v.size()))
          return DataLoss(path, "its header does not parse");
        have_meta = true;
        break;
      case kRow: {
        const absl::string_view rest(k.data() + 1, k.size() - 1);
        const size_t nul = rest.find('\0');
        if (nul == absl::string_view::npos || rest.size() != nul + 1 + sizeof(uint64_t)) {
          return DataLoss(path, "a row's key is malformed");
        }
        auto table = file_table.find(rest.substr(0, nul));
        if (table == file_table.end()) {
          return DataLoss(path, absl::StrCat("rows of table \"", rest.substr(0, nul),
                                             "\", which the file does not describe"));
        }
        const size_t row_bytes = tables[table->second]->row_floats() * sizeof(float);
        if (v.size() != row_bytes) {
          return DataLoss(path, absl::StrFormat("a row of table \"%s\" has %d bytes, not %d",
                                                tables[table->second]->name, v.size(), row_bytes));
        }
        if (record_table != table->second ||
            record.rows().values().size() + row_bytes > max_record_bytes) {
          flush();
          record.mutable_rows()->set_table(static_cast<uint32_t>(table->second));
          record_table = table->second;
        }
        const uint64_t id = ReadBigEndian64(rest.data() + nul + 1);
        record.mutable_rows()->mutable_keys()->append(reinterpret_cast<const char*>(&id),
                                                      sizeof(id));
        record.mutable_rows()->mutable_values()->append(v.data(), v.size());
        ++rows;
        break;
      }
      case kTable:
        flush();
        break;  // read above
      case kWindow: {
        flush();
        rpc::ShardRecord r;
        if (!r.mutable_window()->ParseFromArray(v.data(), v.size())) {
          return DataLoss(path, "a window entry does not parse");
        }
        cut.records.push_back(std::move(r));
        break;
      }
      default:
        return DataLoss(path, absl::StrFormat("unknown key kind 0x%02x", k[0]));
    }
  }
  flush();
  if (!it->status().ok()) return DataLoss(path, it->status().ToString());
  if (!have_meta) return DataLoss(path, "has no header (key \"m\")");
  if (meta.rows() != rows || meta.dense_chunks() != dense_chunks) {
    return DataLoss(path, absl::StrFormat("holds %d rows and %d dense chunks, its header says %d "
                                          "and %d",
                                          rows, dense_chunks, meta.rows(), meta.dense_chunks()));
  }
  if (expected != nullptr &&
      (meta.shard() != expected->shard() || meta.sequence() != expected->sequence())) {
    return DataLoss(path, absl::StrFormat("holds shard %d at sequence %d, the manifest says "
                                          "shard %d at %d",
                                          meta.shard(), meta.sequence(), expected->shard(),
                                          expected->sequence()));
  }
  cut.shard = meta.shard();
  cut.sequence = meta.sequence();
  cut.applied_step = meta.applied_step();
  for (rpc::ShardRecord& r : cut.records) {
    r.set_shard(cut.shard);
    r.set_sequence(cut.sequence);
  }
  return cut;
}

}  // namespace server
}  // namespace ps

#include "server/checkpoint/shard_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"

namespace ps {
namespace server {
namespace {

rocksdb::Options FileOptions() {
  rocksdb::Options options;
  // Floats do not compress; 256 KiB blocks keep the index small for millions of rows.
  options.compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.block_size = 256 << 10;
  // A file is read once, in order: no block cache (RocksDB would give each reader a 32 MiB one,
  // which a restore's reading threads would fill).
  table.no_block_cache = true;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

absl::Status Internal(const std::string& path, const rocksdb::Status& s) {
  return absl::InternalError(absl::StrCat("checkpoint file ", path, ": ", s.ToString()));
}

absl::Status DataLoss(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("checkpoint file ", path, ": ", what));
}

}  // namespace

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
  meta.set_incremental(cut.incremental);
  meta.set_base_id(cut.base_id);
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
    key = DenseChunkKey(d->name(), d->chunk());
    d->SerializeToString(&value);
    if (!(s = writer.Put(key, value)).ok()) return Internal(path, s);
  }

  // "m": what the file holds.
  meta.SerializeToString(&value);
  if (!(s = writer.Put(ShardMetaKey(), value)).ok()) return Internal(path, s);

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
    key = RowKeyPrefix(tables[t]->name);
    const size_t prefix = key.size();
    for (const RowRef& r : table_rows) {
      key.resize(prefix);
      AppendRowId(r.id, &key);
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
    if (!(s = writer.Put(TableLayoutKey(tables[t]->name), value)).ok()) {
      return Internal(path, s);
    }
  }

  // "w": the window by worker.
  std::sort(windows.begin(), windows.end(),
            [](const rpc::WindowEntry* a, const rpc::WindowEntry* b) {
              return a->worker_id() < b->worker_id();
            });
  for (const rpc::WindowEntry* w : windows) {
    key = WindowKey(w->worker_id());
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
                                       size_t max_record_bytes, const RowSink* sink,
                                       bool map_file) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return DataLoss(path, "is missing");
  if (expected != nullptr) {
    absl::Status verified = VerifyShardFile(path, *expected);
    if (!verified.ok()) return verified;
  }

  // Blocks are read in place from a mapping of the file instead of copied out of the page cache
  // (a restore spent about 5% of its time in that copy). The size was checked above; a file
  // truncated while it is being read ends the process (SIGBUS) instead of failing the read.
  rocksdb::Options reader_options = FileOptions();
  reader_options.allow_mmap_reads = map_file;
  rocksdb::SstFileReader reader(reader_options);
  rocksdb::Status s = reader.Open(path);
  if (!s.ok()) return DataLoss(path, s.ToString());
  // Every block is checked as it is read (verify_checksums), so the whole file is read once.
  rocksdb::ReadOptions read_options;
  read_options.verify_checksums = true;
  read_options.readahead_size = 2 << 20;
  read_options.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(read_options));

  // The tables of the file, mapped onto the job's.
  absl::flat_hash_map<std::string, size_t> job_table;
  for (size_t t = 0; t < tables.size(); ++t) job_table[tables[t]->name] = t;
  absl::flat_hash_map<std::string, size_t> file_table;  // name -> the job's index
  for (it->Seek(std::string(1, kShardKeyTable)); it->Valid() && it->key()[0] == kShardKeyTable;
       it->Next()) {
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
  // With a sink: the batch being gathered, ids and whole rows of table record_table.
  std::vector<uint64_t> batch_ids;
  std::vector<float> batch_rows;
  absl::Status sunk;
  if (sink != nullptr) batch_rows.reserve(max_record_bytes / sizeof(float));
  auto flush = [&] {
    if (record_table == SIZE_MAX) return;
    if (sink != nullptr) {
      if (!batch_ids.empty() && sunk.ok()) {
        sunk = (*sink)(static_cast<uint32_t>(record_table), batch_ids.data(), batch_rows.data(),
                       batch_ids.size());
      }
      batch_ids.clear();
      batch_rows.clear();
    } else {
      cut.records.push_back(std::move(record));
      record = rpc::ShardRecord();
    }
    record_table = SIZE_MAX;
  };
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    switch (k[0]) {
      case kShardKeyDense: {
        flush();
        rpc::ShardRecord r;
        if (!r.mutable_dense()->ParseFromArray(v.data(), v.size())) {
          return DataLoss(path, "a dense chunk does not parse");
        }
        cut.records.push_back(std::move(r));
        ++dense_chunks;
        break;
      }
      case kShardKeyMeta:
        if (!meta.ParseFromArray(v.data(), v.size()))
          return DataLoss(path, "its header does not parse");
        have_meta = true;
        break;
      case kShardKeyRow: {
        absl::string_view name;
        uint64_t id;
        if (!ParseRowKey(absl::string_view(k.data(), k.size()), &name, &id)) {
          return DataLoss(path, "a row's key is malformed");
        }
        auto table = file_table.find(name);
        if (table == file_table.end()) {
          return DataLoss(
              path, absl::StrCat("rows of table \"", name, "\", which the file does not describe"));
        }
        const size_t row_bytes = tables[table->second]->row_floats() * sizeof(float);
        if (v.size() != row_bytes) {
          return DataLoss(path, absl::StrFormat("a row of table \"%s\" has %d bytes, not %d",
                                                tables[table->second]->name, v.size(), row_bytes));
        }
        const size_t gathered =
            sink != nullptr ? batch_rows.size() * sizeof(float) : record.rows().values().size();
        if (record_table != table->second || gathered + row_bytes > max_record_bytes) {
          flush();
          if (!sunk.ok()) return sunk;
          record_table = table->second;
          if (sink == nullptr)
            record.mutable_rows()->set_table(static_cast<uint32_t>(record_table));
        }
        if (sink != nullptr) {
          batch_ids.push_back(id);
          const size_t at = batch_rows.size();
          batch_rows.resize(at + row_bytes / sizeof(float));
          std::memcpy(batch_rows.data() + at, v.data(), row_bytes);
        } else {
          record.mutable_rows()->mutable_keys()->append(reinterpret_cast<const char*>(&id),
                                                        sizeof(id));
          record.mutable_rows()->mutable_values()->append(v.data(), v.size());
        }
        ++rows;
        break;
      }
      case kShardKeyTable:
        flush();
        break;  // read above
      case kShardKeyWindow: {
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
  if (!sunk.ok()) return sunk;
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
  cut.incremental = meta.incremental();
  cut.base_id = meta.base_id();
  for (rpc::ShardRecord& r : cut.records) {
    r.set_shard(cut.shard);
    r.set_sequence(cut.sequence);
  }
  return cut;
}

}  // namespace server
}  // namespace ps

#include "server/checkpoint/shard_loader.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint_catalog.h"
#include "common/hash.h"
#include "server/checkpoint/shard_file.h"

namespace ps {
namespace server {
namespace {

// Rows of a re-routed cut are gathered into records of about this many bytes of values.
constexpr size_t kMaxRecordBytes = 1 << 20;

// Runs fn(0) .. fn(n - 1) on up to `threads` threads (this one included) and returns the first
// error; after an error no new index is started.
absl::Status ParallelFor(size_t n, int threads, const std::function<absl::Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status first;
  auto run = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      absl::Status status = fn(i);
      if (status.ok()) continue;
      absl::MutexLock lock(&mu);
      if (first.ok()) first = std::move(status);
      next.store(n);
    }
  };
  std::vector<std::thread> pool;
  const size_t extra = std::min<size_t>(n, std::max(threads, 1)) - (n > 0 ? 1 : 0);
  for (size_t t = 0; t < extra; ++t) pool.emplace_back(run);
  run();
  for (std::thread& t : pool) t.join();
  return first;
}

// The file of shard `s` of the checkpoint, after checking that its size is the manifest's.
// Its content is checked by RocksDB's block checksums as it is read; the whole file's XXH3 is the
// coordinator's to check before the restore begins (reading every file once more here would
// double the restore's reads).
absl::StatusOr<ShardCut> ReadCheckedFile(const std::string& folder,
                                         const rpc::CheckpointShardFile& expected,
                                         const std::vector<std::unique_ptr<TableSpec>>& tables,
                                         const RowSink* rows, bool map_file) {
  const std::string path = absl::StrCat(folder, "/", expected.file());
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec) return absl::DataLossError(absl::StrCat("checkpoint file ", path, ": ", ec.message()));
  if (bytes != expected.bytes()) {
    return absl::DataLossError(absl::StrFormat(
        "checkpoint file %s has %d bytes, the manifest says %d", path, bytes, expected.bytes()));
  }
  absl::StatusOr<ShardCut> cut =
      ReadShardFile(path, tables, nullptr, kMaxRecordBytes, rows, map_file);
  if (!cut.ok()) return cut.status();
  if (cut->shard != expected.shard() || cut->sequence != expected.sequence()) {
    return absl::DataLossError(absl::StrFormat(
        "checkpoint file %s holds shard %d at sequence %d, the manifest says shard %d at %d", path,
        cut->shard, cut->sequence, expected.shard(), expected.sequence()));
  }
  return cut;
}

// The cut of one shard of the checkpoint chain[0]: its file, and, when that is incremental, the
// files it builds on (ShardFileChain), merged: every file's rows, oldest first (so that an id's
// newest row comes last), and the newest file's dense chunks, window, sequence and step. With
// `rows`, the rows go to it instead, in the same order. `begin` (if given) is called first with
// the rows of the chain's files as the manifests say; its error stops the reading.
absl::StatusOr<ShardCut> ReadShardChain(const std::vector<CheckpointLink>& chain, uint32_t shard,
                                        const std::vector<std::unique_ptr<TableSpec>>& tables,
                                        bool map_files, const RowSink* rows = nullptr,
                                        const std::function<absl::Status(uint64_t)>& begin = {}) {
  absl::StatusOr<std::vector<ShardFileRef>> files = ShardFileChain(chain, shard);
  if (!files.ok()) return files.status();
  if (begin) {
    uint64_t total = 0;
    for (const ShardFileRef& ref : *files) total += ref.file.rows();
    absl::Status begun = begin(total);
    if (!begun.ok()) return begun;
  }
  std::vector<ShardCut> cuts;
  for (const ShardFileRef& ref : *files) {
    const std::string folder = std::filesystem::path(ref.path).parent_path().string();
    absl::StatusOr<ShardCut> cut = ReadCheckedFile(folder, ref.file, tables, rows, map_files);
    if (!cut.ok()) return cut.status();
    if (cut->incremental != ref.file.incremental() || cut->base_id != ref.file.base_id()) {
      return absl::DataLossError(absl::StrFormat(
          "checkpoint file %s says it is %s, the manifest says %s", ref.path,
          cut->incremental ? absl::StrCat("incremental on ", cut->base_id) : "full",
          ref.file.incremental() ? absl::StrCat("incremental on ", ref.file.base_id()) : "full"));
    }
    cuts.push_back(*std::move(cut));
  }
  if (cuts.size() == 1) return std::move(cuts[0]);
  ShardCut merged;
  ShardCut& newest = cuts.back();
  merged.shard = newest.shard;
  merged.sequence = newest.sequence;
  merged.applied_step = newest.applied_step;
  size_t records = 0;
  for (const ShardCut& cut : cuts) records += cut.records.size();
  merged.records.reserve(records);
  for (ShardCut& cut : cuts) {
    for (rpc::ShardRecord& record : cut.records) {
      if (!record.has_rows() && &cut != &newest) continue;  // the newest's state only
      record.set_sequence(merged.sequence);
      merged.records.push_back(std::move(record));
    }
  }
  return merged;
}

// Re-routes the rows and dense chunks of `from` into the cuts of the shards they hash to among
// `num_shards`, in their order; `slot[s]` is the index in `cuts` of shard s, or -1 for a shard not
// loaded here. `open[i][t]` is the index in cuts[i].records of the record gathering table t's
// rows, or -1.
void Route(const ShardCut& from, const std::vector<std::unique_ptr<TableSpec>>& tables,
           uint32_t num_shards, const std::vector<int>& slot, std::vector<ShardCut>* cuts,
           std::vector<std::vector<int>>* open) {
  for (const rpc::ShardRecord& record : from.records) {
    if (record.has_dense()) {
      const rpc::DenseChange& dense = record.dense();
      const int i = slot[ShardOf(NameHash(dense.name()), dense.chunk(), num_shards)];
      if (i < 0) continue;
      ShardCut& to = (*cuts)[i];
      rpc::ShardRecord& r = to.records.emplace_back();
      r.set_shard(to.shard);
      r.set_sequence(to.sequence);
      *r.mutable_dense() = dense;
      continue;
    }
    if (!record.has_rows()) continue;  // windows stay with the old layout's shards
    const rpc::RowsChange& rows = record.rows();
    const size_t table = rows.table();
    const uint64_t name_hash = tables[table]->name_hash;
    const size_t row_bytes = tables[table]->row_floats() * sizeof(float);
    const size_t n = rows.keys().size() / sizeof(uint64_t);
    for (size_t k = 0; k < n; ++k) {
      uint64_t id;
      std::memcpy(&id, rows.keys().data() + k * sizeof(id), sizeof(id));
      const int i = slot[ShardOf(name_hash, id, num_shards)];
      if (i < 0) continue;
      ShardCut& to = (*cuts)[i];
      int& at = (*open)[i][table];
      if (at < 0 || to.records[at].rows().values().size() + row_bytes > kMaxRecordBytes) {
        at = static_cast<int>(to.records.size());
        rpc::ShardRecord& r = to.records.emplace_back();
        r.set_shard(to.shard);
        r.set_sequence(to.sequence);
        r.mutable_rows()->set_table(static_cast<uint32_t>(table));
      }
      rpc::RowsChange* out = to.records[at].mutable_rows();
      out->mutable_keys()->append(reinterpret_cast<const char*>(&id), sizeof(id));
      out->mutable_values()->append(rows.values().data() + k * row_bytes, row_bytes);
    }
  }
}

}  // namespace

absl::Status LoadCheckpointShards(const std::string& folder,
                                  const rpc::CheckpointManifest& manifest,
                                  const std::vector<std::unique_ptr<TableSpec>>& tables,
                                  uint32_t num_shards, const std::vector<uint32_t>& shards,
                                  int threads, ShardBuilder* builder, bool map_files) {
  const uint32_t old_shards = manifest.shard_map().num_shards();
  if (old_shards == 0 || manifest.shards_size() != static_cast<int>(old_shards)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("checkpoint %s: its manifest lists %d shard files for %d shards", folder,
                        manifest.shards_size(), old_shards));
  }
  for (uint32_t s = 0; s < old_shards; ++s) {
    if (manifest.shards(s).shard() != s) {
      return absl::InvalidArgumentError(
          absl::StrFormat("checkpoint %s: its manifest's file %d is of shard %d", folder, s,
                          manifest.shards(s).shard()));
    }
  }
  for (uint32_t s : shards) {
    if (s >= num_shards) {
      return absl::FailedPreconditionError(
          absl::StrFormat("shard %d is outside the job's %d shards", s, num_shards));
    }
  }

  absl::StatusOr<std::vector<CheckpointLink>> chain = ReadCheckpointChain(folder, manifest);
  if (!chain.ok()) return chain.status();

  if (old_shards == num_shards) {
    return ParallelFor(shards.size(), threads, [&](size_t i) -> absl::Status {
      const uint32_t shard = shards[i];
      const RowSink rows = [&](uint32_t table, const uint64_t* ids, const float* values, size_t n) {
        return builder->AddRows(shard, table, ids, values, n);
      };
      absl::StatusOr<ShardCut> cut =
          ReadShardChain(*chain, shard, tables, map_files, &rows,
                         [&](uint64_t total) { return builder->Begin(shard, total); });
      if (!cut.ok()) return cut.status();
      return builder->Finish(*std::move(cut));
    });
  }

  std::vector<ShardCut> cuts(shards.size());
  std::vector<int> slot(num_shards, -1);
  std::vector<std::vector<int>> open(shards.size(), std::vector<int>(tables.size(), -1));
  for (size_t i = 0; i < shards.size(); ++i) {
    slot[shards[i]] = static_cast<int>(i);
    cuts[i].shard = shards[i];
    cuts[i].sequence = 0;
    cuts[i].applied_step = manifest.step() > 0 ? manifest.step() - 1 : -1;
  }
  absl::Mutex route_mu;
  absl::Status status = ParallelFor(old_shards, threads, [&](size_t s) -> absl::Status {
    // The chain's rows in order, so that each id's newest row comes last where it lands (an id
    // is in one old shard only).
    absl::StatusOr<ShardCut> cut =
        ReadShardChain(*chain, static_cast<uint32_t>(s), tables, map_files);
    if (!cut.ok()) return cut.status();
    absl::MutexLock lock(&route_mu);
    Route(*cut, tables, num_shards, slot, &cuts, &open);
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return ParallelFor(cuts.size(), threads, [&](size_t i) -> absl::Status {
    uint64_t rows = 0;
    for (const rpc::ShardRecord& r : cuts[i].records) {
      if (r.has_rows()) rows += r.rows().keys().size() / sizeof(uint64_t);
    }
    absl::Status begun = builder->Begin(cuts[i].shard, rows);
    if (!begun.ok()) return begun;
    return builder->Finish(std::move(cuts[i]));
  });
}

namespace {

// Builds whole cuts: the rows of AddRows in records, before those of Finish's cut.
class CutCollector : public ShardBuilder {
 public:
  CutCollector(const std::vector<uint32_t>& shards,
               const std::vector<std::unique_ptr<TableSpec>>& tables)
      : shards_(shards), tables_(tables), cuts_(shards.size()) {}

  absl::Status Begin(uint32_t shard, uint64_t) override {
    Cut(shard) = ShardCut();
    return absl::OkStatus();
  }

  absl::Status AddRows(uint32_t shard, uint32_t table, const uint64_t* ids, const float* rows,
                       size_t n) override {
    rpc::RowsChange* change = Cut(shard).records.emplace_back().mutable_rows();
    change->set_table(table);
    change->mutable_keys()->assign(reinterpret_cast<const char*>(ids), n * sizeof(uint64_t));
    change->mutable_values()->assign(reinterpret_cast<const char*>(rows),
                                     n * tables_[table]->row_floats() * sizeof(float));
    return absl::OkStatus();
  }

  absl::Status Finish(ShardCut cut) override {
    ShardCut& whole = Cut(cut.shard);
    for (rpc::ShardRecord& r : cut.records) whole.records.push_back(std::move(r));
    for (rpc::ShardRecord& r : whole.records) {
      r.set_shard(cut.shard);
      r.set_sequence(cut.sequence);
    }
    cut.records = std::move(whole.records);
    whole = std::move(cut);
    return absl::OkStatus();
  }

  std::vector<ShardCut> Take() { return std::move(cuts_); }

 private:
  // Each shard is built from one thread at a time, in its own place in cuts_.
  ShardCut& Cut(uint32_t shard) {
    return cuts_[std::find(shards_.begin(), shards_.end(), shard) - shards_.begin()];
  }

  const std::vector<uint32_t>& shards_;
  const std::vector<std::unique_ptr<TableSpec>>& tables_;
  std::vector<ShardCut> cuts_;
};

}  // namespace

absl::StatusOr<std::vector<ShardCut>> LoadCheckpointShards(
    const std::string& folder, const rpc::CheckpointManifest& manifest,
    const std::vector<std::unique_ptr<TableSpec>>& tables, uint32_t num_shards,
    const std::vector<uint32_t>& shards, int threads) {
  CutCollector collector(shards, tables);
  absl::Status status =
      LoadCheckpointShards(folder, manifest, tables, num_shards, shards, threads, &collector);
  if (!status.ok()) return status;
  return collector.Take();
}

}  // namespace server
}  // namespace ps

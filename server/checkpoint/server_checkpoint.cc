#include "server/checkpoint/server_checkpoint.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint_catalog.h"
#include "server/checkpoint/shard_file.h"
#include "server/checkpoint/shard_loader.h"

namespace ps {
namespace server {
namespace {

// The nice value of the threads writing a server's shards (see WriteServerCheckpoint).
constexpr int kWriterNice = 19;

}  // namespace

int CheckpointWriterThreads() {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 2, 8);
}

absl::StatusOr<rpc::WriteCheckpointResponse> WriteServerCheckpoint(
    ShardedStore* store, const rpc::WriteCheckpointRequest& request, absl::Time deadline) {
  const std::filesystem::path folder(request.path());
  std::error_code ec;
  if (!folder.is_absolute() || !std::filesystem::is_directory(folder, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint folder \"", request.path(),
                                                   "\" is not an existing absolute path"));
  }
  const std::vector<uint32_t> shards(request.shards().begin(), request.shards().end());
  CutRequest cut_request;
  cut_request.checkpoint_id = request.id();
  cut_request.base_id = request.base_id();
  absl::Status begun =
      store->BeginCheckpoint(request.step(), shards, request.header().map_version(), cut_request);
  if (!begun.ok()) return begun;

  // This thread cuts the shards (a cut holds a shard's lock for its small state, so it runs at
  // the priority of the threads serving requests) and hands them to a few writer threads at a
  // lower priority, which read the cut's rows (copy-on-write, a record at a time under the lock)
  // and encode its file: training takes precedence over writing when the cores are busy, and the
  // writing takes what training leaves. At most as many cuts wait as there are writers.
  rpc::WriteCheckpointResponse response;
  double max_stall_ms = 0;  // guarded by mu while the writers run
  absl::Mutex mu;
  absl::Status status;
  std::deque<ShardCut> cuts;
  bool cutting = true;
  auto write = [&] {
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWriterNice);
    while (true) {
      ShardCut cut;
      {
        absl::MutexLock lock(&mu);
        auto ready = [&] { return !cuts.empty() || !cutting || !status.ok(); };
        mu.Await(absl::Condition(&ready));
        if (cuts.empty() || !status.ok()) return;
        cut = std::move(cuts.front());
        cuts.pop_front();
      }
      absl::Duration hold;
      absl::Status read = store->ReadCheckpointRows(&cut, &hold);
      absl::StatusOr<rpc::CheckpointShardFile> file =
          read.ok()
              ? WriteShardFile((folder / absl::StrFormat("shard-%05d.sst", cut.shard)).string(),
                               cut, store->tables())
              : read;
      absl::MutexLock lock(&mu);
      max_stall_ms = std::max(max_stall_ms, absl::ToDoubleMilliseconds(hold));
      if (!file.ok()) {
        if (status.ok()) status = file.status();
        return;
      }
      *response.add_files() = *std::move(file);
    }
  };
  const size_t writer_threads = static_cast<size_t>(CheckpointWriterThreads());
  std::vector<std::thread> writers;
  for (size_t t = 0; t < writer_threads; ++t) writers.emplace_back(write);
  for (uint32_t shard : shards) {
    {
      absl::MutexLock lock(&mu);
      auto room = [&] { return cuts.size() < writer_threads || !status.ok(); };
      mu.Await(absl::Condition(&room));
      if (!status.ok()) break;
    }
    absl::Duration stall;
    absl::StatusOr<ShardCut> cut = store->TakeCheckpointCut(shard, deadline, &stall);
    absl::MutexLock lock(&mu);
    if (!cut.ok()) {
      if (status.ok()) status = cut.status();
      break;
    }
    max_stall_ms = std::max(max_stall_ms, absl::ToDoubleMilliseconds(stall));
    cuts.push_back(*std::move(cut));
  }
  {
    absl::MutexLock lock(&mu);
    cutting = false;
  }
  for (std::thread& t : writers) t.join();
  store->EndCheckpoint();
  if (!status.ok()) return status;

  // The files' names must be on disk too before the manifest names them.
  absl::Status synced = SyncPath(folder.string(), /*folder=*/true);
  if (!synced.ok()) return synced;
  response.set_max_stall_ms(max_stall_ms);
  return response;
}

namespace {

// Loads shards `shards` (of `num_shards`) of the checkpoint in `folder` into new shards of
// `store`, on up to `threads` threads; the result is ready for SetShardMap or ReplacePrimaries.
absl::StatusOr<ShardedStore::Restored> LoadShards(ShardedStore* store, const std::string& folder,
                                                  uint32_t num_shards,
                                                  const std::vector<uint32_t>& shards,
                                                  int threads) {
  absl::StatusOr<rpc::CheckpointManifest> manifest = ReadCheckpointManifest(folder);
  if (!manifest.ok()) return manifest.status();
  ShardedStore::Restored restored;
  restored.step = manifest->step();
  // Each shard's rows go from its files straight into its tables (Shard::BeginRestore ..
  // FinishRestore), so that only a batch of rows a reading thread is held besides the shards.
  class Builder : public ShardBuilder {
   public:
    Builder(ShardedStore* store, ShardedStore::Restored* restored)
        : store_(store), restored_(restored) {}

    absl::Status Begin(uint32_t shard, uint64_t rows) override {
      absl::StatusOr<std::unique_ptr<Shard>> created = store_->NewRestoringShard(shard, rows);
      if (!created.ok()) return created.status();
      absl::MutexLock lock(&mu_);
      building_[shard] = *std::move(created);
      return absl::OkStatus();
    }

    absl::Status AddRows(uint32_t shard, uint32_t table, const uint64_t* ids, const float* rows,
                         size_t n) override {
      return Building(shard)->RestoreRows(table, ids, rows, n);
    }

    absl::Status Finish(ShardCut cut) override {
      Shard* shard = Building(cut.shard);
      absl::Status finished = shard->FinishRestore(cut);
      if (!finished.ok()) return finished;
      absl::MutexLock lock(&mu_);
      restored_->shards.push_back(std::move(building_[cut.shard]));
      building_.erase(cut.shard);
      return absl::OkStatus();
    }

   private:
    // The shard begun (a shard's calls come from one thread, after its Begin).
    Shard* Building(uint32_t shard) {
      absl::MutexLock lock(&mu_);
      return building_.at(shard).get();
    }

    ShardedStore* const store_;
    absl::Mutex mu_;
    ShardedStore::Restored* const restored_ ABSL_PT_GUARDED_BY(mu_);
    absl::flat_hash_map<uint32_t, std::unique_ptr<Shard>> building_ ABSL_GUARDED_BY(mu_);
  } builder(store, &restored);
  // Under a memory budget the files are read, not mapped: a mapped file's pages would count in
  // the resident set.
  absl::Status loaded = LoadCheckpointShards(folder, *manifest, store->tables(), num_shards, shards,
                                             threads, &builder, /*map_files=*/!store->bounded());
  if (!loaded.ok()) return loaded;
  return restored;
}

}  // namespace

absl::Status InstallShardMap(ShardedStore* store, const rpc::ShardMap& map, uint32_t server_id,
                             int threads, HeldRestore* held) {
  std::vector<uint32_t> shards;
  if (!map.restore_from().empty()) shards = store->NewPrimaries(map, server_id);
  const bool have_them =
      held->map_version > 0 && held->folder == map.restore_from() && held->shards == shards;
  if (map.restore_unchecked()) {
    // Loaded now, while the coordinator checks the files; installed with the map that says they
    // are intact.
    if (!have_them) {
      *held = HeldRestore();
      if (!shards.empty()) {
        const absl::Time start = absl::Now();
        absl::StatusOr<ShardedStore::Restored> restored =
            LoadShards(store, map.restore_from(), map.num_shards(), shards, threads);
        if (!restored.ok()) return restored.status();
        held->restored = *std::move(restored);
        held->loaded_at = absl::Now();
        held->load_seconds = absl::ToDoubleSeconds(held->loaded_at - start);
      }
      held->folder = map.restore_from();
      held->shards = shards;
    }
    held->map_version = map.version();
    return absl::OkStatus();
  }
  if (shards.empty()) {
    *held = HeldRestore();
    store->SetShardMap(map, server_id);
    return absl::OkStatus();
  }
  const absl::Time start = absl::Now();
  ShardedStore::Restored restored;
  double load_seconds = 0;
  double waited_seconds = 0;  // for the coordinator's check, after loading
  if (have_them) {
    restored = std::move(held->restored);
    load_seconds = held->load_seconds;
    waited_seconds = absl::ToDoubleSeconds(start - held->loaded_at);
  } else {
    absl::StatusOr<ShardedStore::Restored> loaded =
        LoadShards(store, map.restore_from(), map.num_shards(), shards, threads);
    if (!loaded.ok()) return loaded.status();
    restored = *std::move(loaded);
    load_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  }
  *held = HeldRestore();
  const absl::Time read = absl::Now();
  const size_t count = restored.shards.size();
  absl::Status installed = store->SetShardMap(map, server_id, std::move(restored));
  if (installed.ok()) {
    std::fprintf(stderr,
                 "ps_server %u: restored %zu shards from %s: read and filled in %.2f s, then "
                 "waited %.2f s for the coordinator's check of the files, installed in %.2f s\n",
                 server_id, count, map.restore_from().c_str(), load_seconds, waited_seconds,
                 absl::ToDoubleSeconds(absl::Now() - read));
  }
  return installed;
}

absl::StatusOr<rpc::RestoreShardsResponse> RestoreServerShards(
    ShardedStore* store, const rpc::RestoreShardsRequest& request, int threads) {
  if (!std::filesystem::path(request.path()).is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint's folder must be an absolute path, got \"", request.path(), "\""));
  }
  const std::vector<uint32_t> shards(request.shards().begin(), request.shards().end());
  absl::StatusOr<ShardedStore::Restored> restored =
      LoadShards(store, request.path(), store->num_shards(), shards, threads);
  if (!restored.ok()) return restored.status();
  std::vector<uint64_t> rows(store->tables().size(), 0);
  std::vector<uint64_t> bytes(store->tables().size(), 0);
  for (const std::unique_ptr<Shard>& shard : restored->shards) shard->AddSizes(&rows, &bytes);
  rpc::RestoreShardsResponse response;
  for (const uint64_t r : rows) response.set_rows(response.rows() + r);
  absl::Status replaced =
      store->ReplacePrimaries(request.header().map_version(), *std::move(restored));
  if (!replaced.ok()) return replaced;
  return response;
}

}  // namespace server
}  // namespace ps

#include "server/checkpoint/server_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_catalog.h"
#include "server/checkpoint/shard_file.h"
#include "server/checkpoint/shard_loader.h"

namespace ps {
namespace server {

absl::StatusOr<rpc::WriteCheckpointResponse> WriteServerCheckpoint(
    ShardedStore* store, const rpc::WriteCheckpointRequest& request, absl::Time deadline) {
  const std::filesystem::path folder(request.path());
  std::error_code ec;
  if (!folder.is_absolute() || !std::filesystem::is_directory(folder, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint folder \"", request.path(),
                                                   "\" is not an existing absolute path"));
  }
  const std::vector<uint32_t> shards(request.shards().begin(), request.shards().end());
  absl::Status begun =
      store->BeginCheckpoint(request.step(), shards, request.header().map_version());
  if (!begun.ok()) return begun;

  rpc::WriteCheckpointResponse response;
  absl::Status status;
  double max_stall_ms = 0;
  for (uint32_t shard : shards) {
    absl::Duration stall;
    absl::StatusOr<ShardCut> cut = store->TakeCheckpointCut(shard, deadline, &stall);
    if (!cut.ok()) {
      status = cut.status();
      break;
    }
    max_stall_ms = std::max(max_stall_ms, absl::ToDoubleMilliseconds(stall));
    absl::StatusOr<rpc::CheckpointShardFile> file = WriteShardFile(
        (folder / absl::StrFormat("shard-%05d.sst", shard)).string(), *cut, store->tables());
    if (!file.ok()) {
      status = file.status();
      break;
    }
    *response.add_files() = *std::move(file);
  }
  store->EndCheckpoint();
  if (!status.ok()) return status;

  // The files' names must be on disk too before the manifest names them.
  absl::Status synced = SyncPath(folder.string(), /*folder=*/true);
  if (!synced.ok()) return synced;
  response.set_max_stall_ms(max_stall_ms);
  return response;
}

absl::Status InstallShardMap(ShardedStore* store, const rpc::ShardMap& map, uint32_t server_id,
                             int threads) {
  std::vector<uint32_t> shards;
  if (!map.restore_from().empty()) shards = store->NewPrimaries(map, server_id);
  if (shards.empty()) {
    store->SetShardMap(map, server_id);
    return absl::OkStatus();
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<rpc::CheckpointManifest> manifest = ReadCheckpointManifest(map.restore_from());
  if (!manifest.ok()) return manifest.status();
  ShardedStore::Restored restored;
  restored.step = manifest->step();
  // Each shard is built as soon as its file is read, so that only a few files' contents are in
  // memory at once besides the shards.
  absl::Mutex mu;
  absl::Status loaded = LoadCheckpointShards(
      map.restore_from(), *manifest, store->tables(), map.num_shards(), shards, threads,
      [&](ShardCut cut) -> absl::Status {
        absl::StatusOr<std::unique_ptr<Shard>> shard = store->RestoreShard(cut);
        if (!shard.ok()) return shard.status();
        absl::MutexLock lock(&mu);
        restored.shards.push_back(*std::move(shard));
        return absl::OkStatus();
      });
  if (!loaded.ok()) return loaded;
  const absl::Time read = absl::Now();
  const size_t count = restored.shards.size();
  absl::Status installed = store->SetShardMap(map, server_id, std::move(restored));
  if (installed.ok()) {
    std::fprintf(stderr,
                 "ps_server %u: restored %zu shards from %s: read and filled in %.2f s, "
                 "installed in %.2f s\n",
                 server_id, count, map.restore_from().c_str(), absl::ToDoubleSeconds(read - start),
                 absl::ToDoubleSeconds(absl::Now() - read));
  }
  return installed;
}

}  // namespace server
}  // namespace ps

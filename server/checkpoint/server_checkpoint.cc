#include "server/checkpoint/server_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_catalog.h"
#include "server/checkpoint/shard_file.h"

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

}  // namespace server
}  // namespace ps

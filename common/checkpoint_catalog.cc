#include "common/checkpoint_catalog.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace {

constexpr char kManifest[] = "MANIFEST";

}  // namespace

std::string CheckpointFolderName(uint64_t id) { return absl::StrFormat("%020d", id); }

absl::Status SyncPath(const std::string& path, bool folder) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (folder ? O_DIRECTORY : 0));
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return absl::InternalError(absl::StrCat("fsync ", path, ": ", std::strerror(err)));
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::StatusOr<rpc::CheckpointManifest> ReadCheckpointManifest(const std::string& folder) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint folder ", folder, " does not exist"));
  }
  auto incomplete = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat(folder, " is not a complete checkpoint: ", why));
  };
  std::ifstream in(std::filesystem::path(folder) / kManifest, std::ios::binary);
  if (!in) return incomplete("it has no MANIFEST");
  rpc::CheckpointManifest manifest;
  if (!manifest.ParseFromIstream(&in)) return incomplete("its MANIFEST does not parse");
  if (manifest.format() != kCheckpointFormat) {
    return incomplete(absl::StrFormat("its MANIFEST has format %d, this build reads %d",
                                      manifest.format(), kCheckpointFormat));
  }
  return manifest;
}

absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path,
                                              rpc::CheckpointManifest* manifest) {
  std::error_code ec;
  std::string folder = path;
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
  if (!std::filesystem::is_directory(folder, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", path, " does not exist"));
  }
  if (!std::filesystem::exists(absl::StrCat(folder, "/", kManifest), ec)) {
    std::vector<std::string> partial;
    absl::StatusOr<std::vector<rpc::CheckpointManifest>> all = ListCheckpoints(folder, &partial);
    if (!all.ok()) return all.status();
    if (all->empty()) {
      return absl::NotFoundError(absl::StrFormat(
          "%s holds no complete checkpoint (%d partial folder(s) without a valid MANIFEST)", folder,
          partial.size()));
    }
    folder = absl::StrCat(folder, "/", CheckpointFolderName(all->back().id()));
  }
  absl::StatusOr<rpc::CheckpointManifest> read = ReadCheckpointManifest(folder);
  if (!read.ok()) return read.status();
  *manifest = *std::move(read);
  return folder;
}

absl::StatusOr<std::vector<rpc::CheckpointManifest>> ListCheckpoints(
    const std::string& dir, std::vector<std::string>* partial) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint folder ", dir, " does not exist"));
  }
  std::map<uint64_t, rpc::CheckpointManifest> complete;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.size() != 20 ||
        !std::all_of(name.begin(), name.end(), absl::ascii_isdigit)) {
      continue;
    }
    absl::StatusOr<rpc::CheckpointManifest> manifest =
        ReadCheckpointManifest(entry.path().string());
    if (manifest.ok() && CheckpointFolderName(manifest->id()) == name) {
      complete[manifest->id()] = *std::move(manifest);
    } else if (partial != nullptr) {
      partial->push_back(entry.path().string());
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("listing ", dir, ": ", ec.message()));
  std::vector<rpc::CheckpointManifest> out;
  for (auto& [id, m] : complete) out.push_back(std::move(m));
  if (partial != nullptr) std::sort(partial->begin(), partial->end());
  return out;
}

absl::StatusOr<std::vector<CheckpointLink>> ReadCheckpointChain(
    const std::string& folder, const rpc::CheckpointManifest& manifest) {
  std::string trimmed = folder;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::filesystem::path dir = std::filesystem::path(trimmed).parent_path();
  std::vector<CheckpointLink> chain;
  chain.push_back({trimmed, manifest});
  while (chain.back().manifest.base_id() != 0) {
    const rpc::CheckpointManifest& top = chain.back().manifest;
    const uint64_t base = top.base_id();
    const std::string base_folder = (dir / CheckpointFolderName(base)).string();
    auto broken = [&](absl::string_view why) {
      return absl::DataLossError(
          absl::StrFormat("checkpoint %d builds on checkpoint %d (%s), which %s; the increments "
                          "cannot be restored without it",
                          top.id(), base, base_folder, why));
    };
    if (base >= top.id()) return broken("is not older than it");
    absl::StatusOr<rpc::CheckpointManifest> read = ReadCheckpointManifest(base_folder);
    if (read.status().code() == absl::StatusCode::kNotFound) return broken("is missing");
    if (!read.ok()) return broken(absl::StrCat("is not complete: ", read.status().message()));
    if (read->id() != base) {
      return broken(absl::StrFormat("holds checkpoint %d instead", read->id()));
    }
    if (read->job_digest() != manifest.job_digest() ||
        read->shard_map().num_shards() != manifest.shard_map().num_shards()) {
      return broken("is of another job or number of shards");
    }
    chain.push_back({base_folder, *std::move(read)});
  }
  return chain;
}

absl::StatusOr<std::vector<ShardFileRef>> ShardFileChain(const std::vector<CheckpointLink>& chain,
                                                         uint32_t shard) {
  std::vector<ShardFileRef> files;
  for (size_t i = 0; i < chain.size(); ++i) {
    const rpc::CheckpointManifest& m = chain[i].manifest;
    if (shard >= static_cast<uint32_t>(m.shards_size()) || m.shards(shard).shard() != shard) {
      return absl::DataLossError(
          absl::StrFormat("checkpoint %s lists no file for shard %d", chain[i].folder, shard));
    }
    const rpc::CheckpointShardFile& file = m.shards(shard);
    files.push_back({absl::StrCat(chain[i].folder, "/", file.file()), file});
    if (!file.incremental()) {
      std::reverse(files.begin(), files.end());
      return files;
    }
    if (i + 1 == chain.size() || chain[i + 1].manifest.id() != file.base_id()) {
      return absl::DataLossError(absl::StrFormat(
          "checkpoint %s: the file of shard %d builds on checkpoint %d, which is not the base of "
          "the checkpoint (%d)",
          chain[i].folder, shard, file.base_id(), m.base_id()));
    }
  }
  return absl::DataLossError("an empty checkpoint chain");  // not reached: chains end full
}

absl::Status WriteCheckpointManifest(const std::string& folder,
                                     const rpc::CheckpointManifest& manifest) {
  const std::string tmp = absl::StrCat(folder, "/", kManifest, ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!manifest.SerializeToOstream(&out) || !out.flush()) {
      return absl::InternalError(absl::StrCat("writing ", tmp, " failed"));
    }
  }
  absl::Status synced = SyncPath(tmp, /*folder=*/false);
  if (!synced.ok()) return synced;
  std::error_code ec;
  std::filesystem::rename(tmp, absl::StrCat(folder, "/", kManifest), ec);
  if (ec) return absl::InternalError(absl::StrCat("rename ", tmp, ": ", ec.message()));
  return SyncPath(folder, /*folder=*/true);
}

int CheckpointReadThreads() {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 4, 64);
}

}  // namespace ps

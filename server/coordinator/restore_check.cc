#include "server/coordinator/restore_check.h"

#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"

namespace ps {
namespace coordinator {

absl::StatusOr<RestorePoint> CheckRestorable(const std::string& path, const config::Job& job) {
  RestorePoint point;
  absl::StatusOr<std::string> folder = ResolveCheckpoint(path, &point.manifest);
  if (!folder.ok()) return folder.status();
  point.folder = *folder;
  const rpc::CheckpointManifest& m = point.manifest;

  absl::flat_hash_map<std::string, const config::Table*> job_tables;
  for (const config::Table& t : job.tables()) job_tables[t.name()] = &t;
  for (const config::Table& t : m.tables()) {
    auto it = job_tables.find(t.name());
    if (it == job_tables.end()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "checkpoint %s holds table \"%s\", which the job does not have", point.folder, t.name()));
    }
    const config::Table& mine = *it->second;
    if (mine.dim() != t.dim()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("table \"%s\" has dim %d in checkpoint %s, dim %d in the job", t.name(),
                          t.dim(), point.folder, mine.dim()));
    }
    if (absl::AsciiStrToLower(mine.optimizer().type()) !=
        absl::AsciiStrToLower(t.optimizer().type())) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "table \"%s\" has optimizer %s in checkpoint %s, %s in the job (their state differs)",
          t.name(), t.optimizer().type(), point.folder, mine.optimizer().type()));
    }
  }

  // An incremental checkpoint needs its chain: every base down to a full checkpoint, whole.
  absl::StatusOr<std::vector<CheckpointLink>> chain = ReadCheckpointChain(point.folder, m);
  if (!chain.ok()) return chain.status();
  for (const CheckpointLink& link : *chain) {
    for (const rpc::CheckpointShardFile& file : link.manifest.shards()) {
      RestorePoint::File& f = point.files.emplace_back();
      f.path = absl::StrCat(link.folder, "/", file.file());
      f.expected = file;
      absl::Status size = CheckShardFileSize(f.path, file);
      if (!size.ok()) return size;
    }
  }
  return point;
}

absl::Status VerifyRestoreFiles(const RestorePoint& point, const std::atomic<bool>* cancelled) {
  // Several files at once: on a large machine the disk, not one core's hashing, is the bound.
  const std::vector<RestorePoint::File>& files = point.files;
  std::vector<absl::Status> results(files.size());
  std::vector<std::thread> threads;
  const size_t parallel = CheckpointReadThreads();
  for (size_t w = 0; w < parallel; ++w) {
    threads.emplace_back([&, w] {
      for (size_t i = w; i < files.size(); i += parallel) {
        if (cancelled != nullptr && cancelled->load()) {
          results[i] = absl::CancelledError("the check of the checkpoint's files was stopped");
          continue;
        }
        results[i] = VerifyShardFile(files[i].path, files[i].expected);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& status : results) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::string RestorePathOf(const std::string& flag, const config::Job& job) {
  if (!flag.empty()) return flag;
  const config::Cluster& cluster = job.cluster();
  if (cluster.has_restore_from()) return cluster.restore_from();
  if (!cluster.resume()) return "";
  std::error_code ec;
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> all =
      ListCheckpoints(cluster.checkpoint_dir());
  if (!all.ok() || all->empty()) return "";
  return absl::StrCat(cluster.checkpoint_dir(), "/", CheckpointFolderName(all->back().id()));
}

}  // namespace coordinator
}  // namespace ps

#include "common/checkpoint_catalog.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ps {
namespace {

struct TempFolder {
  TempFolder() {
    char tmpl[] = "/tmp/checkpoint_catalog_test.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempFolder() { std::filesystem::remove_all(path); }
  std::string path;
};

rpc::CheckpointManifest Manifest(uint64_t id) {
  rpc::CheckpointManifest m;
  m.set_format(kCheckpointFormat);
  m.set_id(id);
  m.set_job_name("j");
  return m;
}

TEST_CASE("folder names are the id in 20 digits, sorting as numbers", "[checkpoint]") {
  CHECK(CheckpointFolderName(7) == "00000000000000000007");
  CHECK(CheckpointFolderName(10) > CheckpointFolderName(9));
}

TEST_CASE("only folders with a valid manifest are checkpoints", "[checkpoint]") {
  TempFolder dir;
  for (uint64_t id : {3, 1, 12}) {
    const std::string folder = dir.path + "/" + CheckpointFolderName(id);
    std::filesystem::create_directory(folder);
    REQUIRE(WriteCheckpointManifest(folder, Manifest(id)).ok());
    CHECK_FALSE(std::filesystem::exists(folder + "/MANIFEST.tmp"));
  }
  // Partial: no manifest; a manifest that does not parse; one naming another id; a newer format.
  const std::string none = dir.path + "/" + CheckpointFolderName(4);
  std::filesystem::create_directory(none);
  const std::string garbage = dir.path + "/" + CheckpointFolderName(5);
  std::filesystem::create_directory(garbage);
  std::ofstream(garbage + "/MANIFEST") << "\xff\xff\xff not a manifest";
  const std::string other = dir.path + "/" + CheckpointFolderName(6);
  std::filesystem::create_directory(other);
  REQUIRE(WriteCheckpointManifest(other, Manifest(2)).ok());
  const std::string future = dir.path + "/" + CheckpointFolderName(7);
  std::filesystem::create_directory(future);
  rpc::CheckpointManifest newer = Manifest(7);
  newer.set_format(kCheckpointFormat + 1);
  REQUIRE(WriteCheckpointManifest(future, newer).ok());
  // Not numbered: not a checkpoint's folder at all.
  std::filesystem::create_directory(dir.path + "/scratch");

  std::vector<std::string> partial;
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> list = ListCheckpoints(dir.path, &partial);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 3);
  CHECK(list->at(0).id() == 1);
  CHECK(list->at(1).id() == 3);
  CHECK(list->at(2).id() == 12);
  CHECK(partial == std::vector<std::string>{none, garbage, other, future});
}

TEST_CASE("a restore path is a checkpoint's folder or a checkpoint_dir's newest", "[checkpoint]") {
  TempFolder dir;
  rpc::CheckpointManifest manifest;
  CHECK(ResolveCheckpoint(dir.path, &manifest).status().code() == absl::StatusCode::kNotFound);
  for (uint64_t id : {2, 9}) {
    const std::string folder = dir.path + "/" + CheckpointFolderName(id);
    std::filesystem::create_directory(folder);
    REQUIRE(WriteCheckpointManifest(folder, Manifest(id)).ok());
  }
  // A newer partial folder is not the newest checkpoint.
  std::filesystem::create_directory(dir.path + "/" + CheckpointFolderName(10));

  absl::StatusOr<std::string> newest = ResolveCheckpoint(dir.path + "/", &manifest);
  REQUIRE(newest.ok());
  CHECK(*newest == dir.path + "/" + CheckpointFolderName(9));
  CHECK(manifest.id() == 9);
  absl::StatusOr<std::string> second =
      ResolveCheckpoint(dir.path + "/" + CheckpointFolderName(2), &manifest);
  REQUIRE(second.ok());
  CHECK(manifest.id() == 2);

  std::ofstream(dir.path + "/" + CheckpointFolderName(2) + "/MANIFEST", std::ios::trunc) << "\xff";
  CHECK(ResolveCheckpoint(dir.path + "/" + CheckpointFolderName(2), &manifest).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("one folder's manifest is read, under any name, or the folder is not a checkpoint",
          "[checkpoint]") {
  TempFolder dir;
  // A copy of checkpoint 9 under another name is still checkpoint 9.
  const std::string copy = dir.path + "/copied";
  std::filesystem::create_directory(copy);
  REQUIRE(WriteCheckpointManifest(copy, Manifest(9)).ok());
  absl::StatusOr<rpc::CheckpointManifest> read = ReadCheckpointManifest(copy);
  REQUIRE(read.ok());
  CHECK(read->id() == 9);
  CHECK(read->job_name() == "j");

  const std::string none = dir.path + "/none";
  std::filesystem::create_directory(none);
  const std::string garbage = dir.path + "/garbage";
  std::filesystem::create_directory(garbage);
  std::ofstream(garbage + "/MANIFEST") << "\xff\xff\xff not a manifest";
  const std::string future = dir.path + "/future";
  std::filesystem::create_directory(future);
  rpc::CheckpointManifest newer = Manifest(7);
  newer.set_format(kCheckpointFormat + 1);
  REQUIRE(WriteCheckpointManifest(future, newer).ok());
  for (const std::string& folder : {none, garbage, future}) {
    read = ReadCheckpointManifest(folder);
    CHECK(read.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(read.status().message()),
               Catch::Contains(folder + " is not a complete checkpoint"));
  }
  CHECK(ReadCheckpointManifest(dir.path + "/absent").status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("a missing checkpoint_dir or path is named in the error", "[checkpoint]") {
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> list = ListCheckpoints("/nonexistent/ckpt");
  CHECK(list.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(list.status().message()), Catch::Contains("/nonexistent/ckpt"));
  const absl::Status synced = SyncPath("/nonexistent/file", /*folder=*/false);
  CHECK(synced.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(synced.message()), Catch::Contains("fsync /nonexistent/file"));
  CHECK(WriteCheckpointManifest("/nonexistent", Manifest(1)).code() == absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace ps

#include "common/checkpoint_catalog.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

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

// Checkpoint `id` of two shards on base `base` (0: full), written into dir: shard 0's file is
// incremental on the base, shard 1's is full when `shard1_full` (as after a failover).
rpc::CheckpointManifest ChainLink(const std::string& dir, uint64_t id, uint64_t base,
                                  bool shard1_full = false) {
  rpc::CheckpointManifest m = Manifest(id);
  m.set_base_id(base);
  m.set_job_digest(77);
  m.mutable_shard_map()->set_num_shards(2);
  for (uint32_t s = 0; s < 2; ++s) {
    rpc::CheckpointShardFile* file = m.add_shards();
    file->set_shard(s);
    file->set_file(absl::StrFormat("shard-%05d.sst", s));
    const bool incremental = base != 0 && !(s == 1 && shard1_full);
    file->set_incremental(incremental);
    file->set_base_id(incremental ? base : 0);
  }
  const std::string folder = dir + "/" + CheckpointFolderName(id);
  std::filesystem::create_directory(folder);
  REQUIRE(WriteCheckpointManifest(folder, m).ok());
  return m;
}

std::vector<std::string> Paths(const absl::StatusOr<std::vector<ShardFileRef>>& files) {
  REQUIRE(files.ok());
  std::vector<std::string> paths;
  for (const ShardFileRef& f : *files) paths.push_back(f.path);
  return paths;
}

TEST_CASE("an incremental checkpoint's chain goes back through its bases to a full one",
          "[checkpoint][incremental]") {
  TempFolder dir;
  ChainLink(dir.path, 3, 0);
  ChainLink(dir.path, 4, 3);
  ChainLink(dir.path, 6, 4, /*shard1_full=*/true);
  const rpc::CheckpointManifest newest = ChainLink(dir.path, 7, 6);
  auto folder = [&](uint64_t id) { return dir.path + "/" + CheckpointFolderName(id); };

  absl::StatusOr<std::vector<CheckpointLink>> chain = ReadCheckpointChain(folder(7) + "/", newest);
  REQUIRE(chain.ok());
  std::vector<uint64_t> ids;
  for (const CheckpointLink& link : *chain) ids.push_back(link.manifest.id());
  CHECK(ids == std::vector<uint64_t>{7, 6, 4, 3});
  CHECK(chain->at(0).folder == folder(7));
  CHECK(chain->at(3).folder == folder(3));
  // Shard 0 needs every file; shard 1 was written in full at 6.
  CHECK(Paths(ShardFileChain(*chain, 0)) ==
        std::vector<std::string>{folder(3) + "/shard-00000.sst", folder(4) + "/shard-00000.sst",
                                 folder(6) + "/shard-00000.sst", folder(7) + "/shard-00000.sst"});
  CHECK(Paths(ShardFileChain(*chain, 1)) ==
        std::vector<std::string>{folder(6) + "/shard-00001.sst", folder(7) + "/shard-00001.sst"});
  CHECK(ShardFileChain(*chain, 2).status().code() == absl::StatusCode::kDataLoss);

  // A full checkpoint is its own chain.
  absl::StatusOr<rpc::CheckpointManifest> full = ReadCheckpointManifest(folder(3));
  REQUIRE(full.ok());
  chain = ReadCheckpointChain(folder(3), *full);
  REQUIRE(chain.ok());
  CHECK(chain->size() == 1);
  CHECK(Paths(ShardFileChain(*chain, 1)) ==
        std::vector<std::string>{folder(3) + "/shard-00001.sst"});
}

TEST_CASE("a chain with a missing, incomplete or foreign base is DATA_LOSS naming it",
          "[checkpoint][incremental]") {
  TempFolder dir;
  ChainLink(dir.path, 3, 0);
  ChainLink(dir.path, 4, 3);
  rpc::CheckpointManifest newest = ChainLink(dir.path, 5, 4);
  const std::string folder = dir.path + "/" + CheckpointFolderName(5);
  const std::string base = dir.path + "/" + CheckpointFolderName(3);
  SECTION("missing") { std::filesystem::remove_all(base); }
  SECTION("incomplete") { std::filesystem::remove(base + "/MANIFEST"); }
  SECTION("of another job") {
    rpc::CheckpointManifest other = Manifest(3);
    other.set_job_digest(78);
    REQUIRE(WriteCheckpointManifest(base, other).ok());
  }
  absl::StatusOr<std::vector<CheckpointLink>> chain = ReadCheckpointChain(folder, newest);
  CHECK(chain.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(chain.status().message()),
             Catch::Contains("checkpoint 4 builds on checkpoint 3 (" + base + ")"));
}

TEST_CASE("a shard file incremental on another checkpoint than the base is DATA_LOSS",
          "[checkpoint][incremental]") {
  TempFolder dir;
  ChainLink(dir.path, 3, 0);
  rpc::CheckpointManifest newest = ChainLink(dir.path, 5, 3);
  newest.mutable_shards(1)->set_base_id(4);
  absl::StatusOr<std::vector<CheckpointLink>> chain =
      ReadCheckpointChain(dir.path + "/" + CheckpointFolderName(5), newest);
  REQUIRE(chain.ok());
  CHECK(ShardFileChain(*chain, 0).ok());
  CHECK(ShardFileChain(*chain, 1).status().code() == absl::StatusCode::kDataLoss);
  // A base not older than the checkpoint is refused rather than followed.
  newest.set_base_id(5);
  CHECK(ReadCheckpointChain(dir.path + "/" + CheckpointFolderName(5), newest).status().code() ==
        absl::StatusCode::kDataLoss);
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

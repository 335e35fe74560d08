#include "server/checkpoint/server_checkpoint.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/checkpoint_catalog.h"
#include "server/checkpoint/shard_file.h"
#include "server/internal/test_fixtures.h"

namespace ps {
namespace server {
namespace {

using testing::EvenOddMap;
using testing::PullStoreRows;
using testing::TestJob;
constexpr uint32_t kShards = testing::kTestShards;

using Rows = std::map<uint64_t, std::vector<float>>;

// A checkpoint of a two-server job (EvenOddMap) in a fresh folder, whose server 0's shards hold
// rows for `keys`, and those rows as they were cut.
struct Checkpoint {
  Checkpoint() {
    char tmpl[] = "/tmp/server_checkpoint_test.XXXXXX";
    dir = ::mkdtemp(tmpl);
    keys = testing::KeysOnShards(0, 200);
    rpc::CheckpointManifest manifest;
    manifest.set_format(kCheckpointFormat);
    manifest.set_id(1);
    manifest.set_step(-1);
    manifest.mutable_shard_map()->set_num_shards(kShards);
    for (uint32_t server = 0; server < 2; ++server) {
      std::unique_ptr<ShardedStore> store = *ShardedStore::Create(TestJob(), {});
      store->SetShardMap(EvenOddMap(1), server);
      if (server == 0) at_cut = *PullStoreRows(*store, keys);  // creates the rows
      std::vector<uint32_t> shards;
      for (uint32_t s = server; s < kShards; s += 2) shards.push_back(s);
      REQUIRE(store->BeginCheckpoint(-1, shards, 1).ok());
      for (uint32_t s : shards) {
        absl::Duration stall, hold;
        absl::StatusOr<ShardCut> cut = store->TakeCheckpointCut(s, absl::InfiniteFuture(), &stall);
        REQUIRE(cut.ok());
        REQUIRE(store->ReadCheckpointRows(&*cut, &hold).ok());
        absl::StatusOr<rpc::CheckpointShardFile> file =
            WriteShardFile(Path(s), *cut, store->tables());
        REQUIRE(file.ok());
        files[s] = *file;
      }
      store->EndCheckpoint();
    }
    for (const auto& [shard, file] : files) *manifest.add_shards() = file;
    REQUIRE(WriteCheckpointManifest(dir, manifest).ok());
  }
  ~Checkpoint() { std::filesystem::remove_all(dir); }

  std::string Path(uint32_t shard) const {
    return absl::StrFormat("%s/shard-%05d.sst", dir, shard);
  }

  // Version `version` of the map restoring this checkpoint, its files checked or not.
  rpc::ShardMap Map(uint64_t version, bool unchecked) const {
    rpc::ShardMap map = EvenOddMap(version);
    map.set_restore_from(dir);
    map.set_restore_unchecked(unchecked);
    return map;
  }

  std::string dir;
  std::vector<uint64_t> keys;
  Rows at_cut;
  std::map<uint32_t, rpc::CheckpointShardFile> files;
};

std::unique_ptr<ShardedStore> FreshStore() { return *ShardedStore::Create(TestJob(), {}); }

TEST_CASE(
    "a restore map whose files are unchecked is loaded, held, and installed only once checked",
    "[checkpoint][restore]") {
  Checkpoint c;
  std::unique_ptr<ShardedStore> store = FreshStore();
  HeldRestore held;
  REQUIRE(InstallShardMap(store.get(), c.Map(1, true), 0, 2, &held).ok());
  // Nothing is served yet: the map is not installed.
  CHECK(store->map_version() == 0);
  CHECK(PullStoreRows(*store, c.keys).status().code() == absl::StatusCode::kUnavailable);
  CHECK(held.map_version == 1);
  CHECK(held.folder == c.dir);
  CHECK(held.shards == std::vector<uint32_t>({0, 2, 4, 6}));
  CHECK(held.restored.shards.size() == 4);

  // A newer unchecked map with the same primaries reads nothing again.
  for (uint32_t s = 0; s < kShards; ++s) std::filesystem::remove(c.Path(s));
  REQUIRE(InstallShardMap(store.get(), c.Map(2, true), 0, 2, &held).ok());
  CHECK(store->map_version() == 0);
  CHECK(held.map_version == 2);

  // The checked map installs the held shards (the files are gone: they are not read again).
  REQUIRE(InstallShardMap(store.get(), c.Map(3, false), 0, 2, &held).ok());
  CHECK(store->map_version() == 3);
  CHECK(held.map_version == 0);
  CHECK(held.restored.shards.empty());
  absl::StatusOr<Rows> restored = PullStoreRows(*store, c.keys);
  REQUIRE(restored.ok());
  CHECK(*restored == c.at_cut);
}

TEST_CASE("a checked restore map with nothing held loads the files and installs them",
          "[checkpoint][restore]") {
  Checkpoint c;
  std::unique_ptr<ShardedStore> store = FreshStore();
  HeldRestore held;
  REQUIRE(InstallShardMap(store.get(), c.Map(1, false), 0, 2, &held).ok());
  CHECK(store->map_version() == 1);
  absl::StatusOr<Rows> restored = PullStoreRows(*store, c.keys);
  REQUIRE(restored.ok());
  CHECK(*restored == c.at_cut);
}

TEST_CASE("held shards of other primaries are not installed: the checked map loads its own",
          "[checkpoint][restore]") {
  Checkpoint c;
  std::unique_ptr<ShardedStore> store = FreshStore();
  HeldRestore held;
  // Held as server 1 (the odd shards), then the checked map makes this server 0.
  REQUIRE(InstallShardMap(store.get(), c.Map(1, true), 1, 2, &held).ok());
  CHECK(held.shards == std::vector<uint32_t>({1, 3, 5, 7}));
  REQUIRE(InstallShardMap(store.get(), c.Map(2, false), 0, 2, &held).ok());
  CHECK(store->map_version() == 2);
  absl::StatusOr<Rows> restored = PullStoreRows(*store, c.keys);
  REQUIRE(restored.ok());
  CHECK(*restored == c.at_cut);
}

TEST_CASE("a damaged file fails the held load, and nothing is installed", "[checkpoint][restore]") {
  Checkpoint c;
  // Same size, its last byte (in RocksDB's footer) changed.
  const std::string path = c.Path(2);
  const auto size = std::filesystem::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size) - 1);
    char byte;
    f.read(&byte, 1);
    f.seekp(static_cast<std::streamoff>(size) - 1);
    byte ^= 0x40;
    f.write(&byte, 1);
  }
  std::unique_ptr<ShardedStore> store = FreshStore();
  HeldRestore held;
  const absl::Status status = InstallShardMap(store.get(), c.Map(1, true), 0, 2, &held);
  CHECK(status.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(status.message()), Catch::Contains(path));
  CHECK(store->map_version() == 0);
  CHECK(held.restored.shards.empty());
}

}  // namespace
}  // namespace server
}  // namespace ps

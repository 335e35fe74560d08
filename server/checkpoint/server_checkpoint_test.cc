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

TEST_CASE("a checkpoint restored into a running store replaces its primaries' rows",
          "[checkpoint][restore]") {
  Checkpoint c;
  std::unique_ptr<ShardedStore> store = FreshStore();
  store->SetShardMap(EvenOddMap(1), 0);
  // Rows the checkpoint has, changed since, and rows it does not have.
  rpc::PushRequest push;
  push.set_table("emb");
  push.mutable_header()->set_map_version(1);
  push.mutable_header()->set_worker_id(7);
  push.mutable_header()->set_sequence(1);
  testing::SetKeys(c.keys, &push);
  const std::vector<float> grads(c.keys.size() * 4, 1.0f);
  push.set_grads(
      std::string(reinterpret_cast<const char*>(grads.data()), grads.size() * sizeof(float)));
  uint32_t duplicates = 0;
  REQUIRE(store->Push(push, &duplicates).ok());
  absl::StatusOr<Rows> pushed = PullStoreRows(*store, c.keys);
  REQUIRE(pushed.ok());
  REQUIRE(*pushed != c.at_cut);
  const std::vector<uint64_t> newer = testing::KeysOnShards(0, 250);  // 50 keys after c.keys
  REQUIRE(PullStoreRows(*store, newer).ok());

  rpc::RestoreShardsRequest request;
  request.mutable_header()->set_map_version(1);
  request.set_path(c.dir);
  for (uint32_t s = 0; s < kShards; s += 2) request.add_shards(s);

  SECTION("the checkpoint's rows come back; rows it did not have are gone") {
    absl::StatusOr<rpc::RestoreShardsResponse> restored =
        RestoreServerShards(store.get(), request, 2);
    INFO(restored.status().ToString());
    REQUIRE(restored.ok());
    CHECK(restored->rows() == c.keys.size());
    absl::StatusOr<Rows> rows = PullStoreRows(*store, c.keys);
    REQUIRE(rows.ok());
    CHECK(*rows == c.at_cut);
    rpc::ServerStatus status;
    store->FillStatus(&status);
    uint64_t held_rows = 0;
    for (const auto& table : status.tables()) held_rows += table.rows();
    CHECK(held_rows == c.keys.size());
    // The store serves on: a push applies to the restored rows.
    push.mutable_header()->set_sequence(2);
    REQUIRE(store->Push(push, &duplicates).ok());
    absl::StatusOr<Rows> again = PullStoreRows(*store, c.keys);
    REQUIRE(again.ok());
    CHECK(*again == *pushed);
  }
  SECTION("another map version, or shards it is not primary of, replace nothing") {
    request.mutable_header()->set_map_version(2);
    CHECK(RestoreServerShards(store.get(), request, 2).status().code() ==
          absl::StatusCode::kFailedPrecondition);
    request.mutable_header()->set_map_version(1);
    request.add_shards(1);
    CHECK(RestoreServerShards(store.get(), request, 2).status().code() ==
          absl::StatusCode::kFailedPrecondition);
    request.set_path("relative/folder");
    CHECK(RestoreServerShards(store.get(), request, 2).status().code() ==
          absl::StatusCode::kInvalidArgument);
    absl::StatusOr<Rows> rows = PullStoreRows(*store, c.keys);
    REQUIRE(rows.ok());
    CHECK(*rows == *pushed);
  }
}

}  // namespace
}  // namespace server
}  // namespace ps

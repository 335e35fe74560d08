#include "server/checkpoint/shard_loader.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/hash.h"
#include "server/checkpoint/internal/test_shards.h"
#include "server/checkpoint/shard_file.h"

namespace ps {
namespace server {
namespace {

using testing::Contents;
using testing::Fixture;

constexpr uint32_t kOldShards = 4;

// A checkpoint of kOldShards filled shards in f.dir: its manifest (step 7) and the shards' cuts.
struct Checkpoint {
  explicit Checkpoint(Fixture* f) {
    manifest.set_step(7);
    manifest.mutable_shard_map()->set_num_shards(kOldShards);
    for (uint32_t s = 0; s < kOldShards; ++s) {
      cuts.push_back(f->Filled(s, 100, /*first_id=*/s * 1000)->Cut(4096));
      absl::StatusOr<rpc::CheckpointShardFile> file =
          WriteShardFile(absl::StrFormat("%s/shard-%05d.sst", f->dir, s), cuts.back(), f->tables);
      REQUIRE(file.ok());
      *manifest.add_shards() = *file;
    }
  }
  rpc::CheckpointManifest manifest;
  std::vector<ShardCut> cuts;
};

TEST_CASE("with the checkpoint's num_shards each shard is its own file", "[checkpoint]") {
  Fixture f;
  Checkpoint ckpt(&f);
  absl::StatusOr<std::vector<ShardCut>> loaded =
      LoadCheckpointShards(f.dir, ckpt.manifest, f.tables, kOldShards, {3, 1}, /*threads=*/2);
  REQUIRE(loaded.ok());
  REQUIRE(loaded->size() == 2);
  CHECK(loaded->at(0).shard == 3);
  CHECK(Contents(loaded->at(0), f.tables) == Contents(ckpt.cuts[3], f.tables));
  CHECK(Contents(loaded->at(1), f.tables) == Contents(ckpt.cuts[1], f.tables));
  Shard restored(3, f.config, {0, 0});
  REQUIRE(restored.Restore(loaded->at(0)).ok());
  CHECK(restored.applied_sequence() == ckpt.cuts[3].sequence);
}

TEST_CASE("with another num_shards rows and dense chunks go where they hash", "[checkpoint]") {
  const uint32_t num_shards = GENERATE(1u, 3u, 7u);
  Fixture f;
  Checkpoint ckpt(&f);
  std::vector<uint32_t> all;
  for (uint32_t s = 0; s < num_shards; ++s) all.push_back(s);
  absl::StatusOr<std::vector<ShardCut>> loaded =
      LoadCheckpointShards(f.dir, ckpt.manifest, f.tables, num_shards, all, /*threads=*/3);
  REQUIRE(loaded.ok());
  REQUIRE(loaded->size() == num_shards);

  // Every row and chunk of the checkpoint, exactly once, in the shard its key hashes to now.
  std::vector<std::pair<std::pair<uint32_t, uint64_t>, std::string>> want_rows, got_rows;
  std::map<std::pair<std::string, uint32_t>, std::string> want_dense, got_dense;
  for (const ShardCut& cut : ckpt.cuts) {
    const Contents c(cut, f.tables);
    want_rows.insert(want_rows.end(), c.rows.begin(), c.rows.end());
    want_dense.insert(c.dense.begin(), c.dense.end());
  }
  for (const ShardCut& cut : *loaded) {
    CHECK(cut.sequence == 0);
    CHECK(cut.applied_step == 6);
    const Contents c(cut, f.tables);
    CHECK(c.windows.empty());
    for (const auto& [key, row] : c.rows) {
      CHECK(ShardOf(f.tables[key.first]->name_hash, key.second, num_shards) == cut.shard);
      got_rows.emplace_back(key, row);
    }
    for (const auto& [key, chunk] : c.dense) {
      CHECK(ShardOf(NameHash(key.first), key.second, num_shards) == cut.shard);
      got_dense[key] = chunk;
    }
    Shard restored(cut.shard, f.config, {0, 0});
    REQUIRE(restored.Restore(cut).ok());
  }
  std::sort(want_rows.begin(), want_rows.end());
  std::sort(got_rows.begin(), got_rows.end());
  CHECK(got_rows.size() == want_rows.size());
  CHECK(got_rows == want_rows);
  CHECK(got_dense == want_dense);
}

TEST_CASE("a missing or resized file fails the whole load with DATA_LOSS", "[checkpoint]") {
  Fixture f;
  Checkpoint ckpt(&f);
  const std::string path = f.dir + "/" + ckpt.manifest.shards(2).file();
  const uint32_t num_shards = GENERATE(kOldShards, 5u);
  SECTION("missing") { std::filesystem::remove(path); }
  SECTION("truncated") { std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1); }
  absl::StatusOr<std::vector<ShardCut>> loaded =
      LoadCheckpointShards(f.dir, ckpt.manifest, f.tables, num_shards, {2}, /*threads=*/2);
  CHECK(loaded.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(loaded.status().message()), Catch::Contains(path));
}

TEST_CASE("a manifest without a file for every shard is refused", "[checkpoint]") {
  Fixture f;
  Checkpoint ckpt(&f);
  ckpt.manifest.mutable_shards()->RemoveLast();
  CHECK(LoadCheckpointShards(f.dir, ckpt.manifest, f.tables, kOldShards, {0}, 1).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace server
}  // namespace ps

#include "server/checkpoint/shard_loader.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/checkpoint_catalog.h"
#include "common/hash.h"
#include "server/checkpoint/internal/test_shards.h"
#include "server/checkpoint/shard_file.h"

namespace ps {
namespace server {
namespace {

using testing::Contents;
using testing::Fixture;
using testing::RestoreCut;

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
  REQUIRE(RestoreCut(restored, loaded->at(0)).ok());
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
    REQUIRE(RestoreCut(restored, cut).ok());
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
  // as<uint32_t>: with the lvalue kOldShards first, Catch2 would make a generator of
  // `const uint32_t&` and keep a dangling reference to the temporary 5u (ASan saw 1 there).
  const uint32_t num_shards = GENERATE(as<uint32_t>{}, kOldShards, 5u);
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

// A full checkpoint (id 1) and increments 2 and 3 of kOldShards shards in f.dir's checkpoint
// folders, as servers write them: between checkpoints some rows change and some are created; at
// 2, shard 3 is written in full (a failover's new primary). `states[i]` is every shard's whole
// content at checkpoint i + 1.
struct Chain {
  explicit Chain(Fixture* f) : f(f) {
    for (uint32_t s = 0; s < kOldShards; ++s) shards.push_back(f->Filled(s, 100, s * 1000));
    std::mt19937_64 rng(5);
    for (uint64_t id = 1; id <= 3; ++id) {
      if (id > 1) {
        for (uint32_t s = 0; s < kOldShards; ++s) {
          std::vector<uint64_t> keys;
          for (int k = 0; k < 10; ++k) keys.push_back(s * 1000 + rng() % 500);  // some new
          std::vector<float> grads(keys.size() * 4, 0.125f * id);
          REQUIRE(shards[s]->Push(1, /*worker=*/3, /*sequence=*/id, keys, grads.data()) ==
                  ApplyWindow::Verdict::kApply);
        }
      }
      const std::string folder = Folder(id);
      std::filesystem::create_directory(folder);
      rpc::CheckpointManifest m;
      m.set_format(kCheckpointFormat);
      m.set_id(id);
      m.set_step(-1);
      m.mutable_shard_map()->set_num_shards(kOldShards);
      m.set_base_id(id - 1);
      std::vector<ShardCut> cuts;
      for (uint32_t s = 0; s < kOldShards; ++s) {
        const uint64_t base = (id == 2 && s == 3) ? 0 : id - 1;
        cuts.push_back(shards[s]->Cut(4096, {id, base}));
        REQUIRE(cuts.back().incremental == (base != 0));
        absl::StatusOr<rpc::CheckpointShardFile> file =
            WriteShardFile(absl::StrFormat("%s/shard-%05d.sst", folder, s), cuts.back(), f->tables);
        REQUIRE(file.ok());
        *m.add_shards() = *file;
      }
      REQUIRE(WriteCheckpointManifest(folder, m).ok());
      manifests.push_back(m);
      std::vector<Contents> state;
      for (uint32_t s = 0; s < kOldShards; ++s) state.push_back(Whole(s, cuts[s]));
      states.push_back(state);
    }
  }

  std::string Folder(uint64_t id) const { return f->dir + "/" + CheckpointFolderName(id); }

  // Shard s as it is, with the sequence and step of `at` (a cut taken now).
  Contents Whole(uint32_t s, const ShardCut& at) {
    ShardCut whole = shards[s]->Cut(1 << 20);  // for no checkpoint: not a base
    whole.sequence = at.sequence;
    whole.applied_step = at.applied_step;
    return Contents(whole, f->tables);
  }

  Fixture* f;
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<rpc::CheckpointManifest> manifests;  // of 1, 2, 3
  std::vector<std::vector<Contents>> states;
};

TEST_CASE("a chain's shards are its full file's rows with the increments over them",
          "[checkpoint][incremental]") {
  Fixture f;
  Chain chain(&f);
  const uint64_t id = GENERATE(3u, 2u, 1u);  // the newest, the middle, the full one
  CAPTURE(id);
  const rpc::CheckpointManifest& m = chain.manifests[id - 1];
  if (id > 1) {
    CHECK(m.shards(0).incremental());
    CHECK(m.shards(0).rows() < chain.manifests[0].shards(0).rows());
    CHECK(chain.states[id - 1][0].rows != chain.states[id - 2][0].rows);
  }
  absl::StatusOr<std::vector<ShardCut>> loaded =
      LoadCheckpointShards(chain.Folder(id), m, f.tables, kOldShards, {0, 1, 2, 3}, /*threads=*/2);
  REQUIRE(loaded.ok());
  for (uint32_t s = 0; s < kOldShards; ++s) {
    CAPTURE(s);
    CHECK(Contents(loaded->at(s), f.tables) == chain.states[id - 1][s]);
    // Restored, the shard holds exactly that.
    Shard restored(s, f.config, {0, 0});
    REQUIRE(RestoreCut(restored, loaded->at(s)).ok());
    CHECK(Contents(restored.Cut(1 << 20), f.tables) == chain.states[id - 1][s]);
  }
}

// Builds Shards as a restoring server does: rows straight into them (Shard::BeginRestore ..
// FinishRestore).
class ShardsBuilder : public ShardBuilder {
 public:
  explicit ShardsBuilder(const ShardConfig& config) : config_(config) {}

  absl::Status Begin(uint32_t shard, uint64_t rows) override {
    absl::MutexLock lock(&mu_);
    rows_[shard] = rows;
    auto& built = shards_[shard];
    built = std::make_unique<Shard>(shard, config_, std::vector<size_t>{0, 0}, false);
    built->BeginRestore();
    return absl::OkStatus();
  }
  absl::Status AddRows(uint32_t shard, uint32_t table, const uint64_t* ids, const float* rows,
                       size_t n) override {
    return Get(shard)->RestoreRows(table, ids, rows, n);
  }
  absl::Status Finish(ShardCut cut) override { return Get(cut.shard)->FinishRestore(cut); }

  Shard* Get(uint32_t shard) {
    absl::MutexLock lock(&mu_);
    return shards_.at(shard).get();
  }
  uint64_t Rows(uint32_t shard) {
    absl::MutexLock lock(&mu_);
    return rows_.at(shard);
  }

 private:
  const ShardConfig config_;
  absl::Mutex mu_;
  std::map<uint32_t, std::unique_ptr<Shard>> shards_;
  std::map<uint32_t, uint64_t> rows_;
};

TEST_CASE("a chain's rows streamed straight into shards give the same shards",
          "[checkpoint][incremental]") {
  Fixture f;
  Chain chain(&f);
  const uint64_t id = GENERATE(3u, 1u);
  CAPTURE(id);
  ShardsBuilder builder(f.config);
  REQUIRE(LoadCheckpointShards(chain.Folder(id), chain.manifests[id - 1], f.tables, kOldShards,
                               {0, 1, 2, 3}, /*threads=*/2, &builder)
              .ok());
  for (uint32_t s = 0; s < kOldShards; ++s) {
    CAPTURE(s);
    CHECK(Contents(builder.Get(s)->Cut(1 << 20), f.tables) == chain.states[id - 1][s]);
    // Begin was told the rows of the chain's files (each builds on its base_id).
    uint64_t rows = 0;
    for (uint64_t c = id; c != 0; c = chain.manifests[c - 1].shards(s).base_id()) {
      rows += chain.manifests[c - 1].shards(s).rows();
    }
    CHECK(builder.Rows(s) == rows);
  }
}

TEST_CASE("a chain restored onto another num_shards: every row once, its newest value",
          "[checkpoint][incremental]") {
  const uint32_t num_shards = GENERATE(1u, 3u, 7u);
  Fixture f;
  Chain chain(&f);
  std::map<std::pair<uint32_t, uint64_t>, std::string> want;
  std::map<std::pair<std::string, uint32_t>, std::string> want_dense;
  for (const Contents& c : chain.states[2]) {
    want.insert(c.rows.begin(), c.rows.end());
    want_dense.insert(c.dense.begin(), c.dense.end());
  }
  std::vector<uint32_t> all;
  for (uint32_t s = 0; s < num_shards; ++s) all.push_back(s);
  std::map<std::pair<uint32_t, uint64_t>, std::string> got;
  std::map<std::pair<std::string, uint32_t>, std::string> got_dense;
  absl::StatusOr<std::vector<ShardCut>> loaded =
      LoadCheckpointShards(chain.Folder(3), chain.manifests[2], f.tables, num_shards, all, 3);
  REQUIRE(loaded.ok());
  for (const ShardCut& cut : *loaded) {
    Shard restored(cut.shard, f.config, {0, 0});
    REQUIRE(RestoreCut(restored, cut).ok());
    const Contents c(restored.Cut(1 << 20), f.tables);
    got.insert(c.rows.begin(), c.rows.end());
    got_dense.insert(c.dense.begin(), c.dense.end());
  }
  CHECK(got.size() == want.size());
  CHECK(got == want);
  CHECK(got_dense == want_dense);
}

TEST_CASE("a chain whose base or base file is missing is refused with DATA_LOSS naming it",
          "[checkpoint][incremental]") {
  Fixture f;
  Chain chain(&f);
  std::string named;
  SECTION("base checkpoint") {
    std::filesystem::remove_all(chain.Folder(1));
    named = chain.Folder(1);
  }
  SECTION("base's file") {
    named = chain.Folder(1) + "/shard-00002.sst";
    std::filesystem::remove(named);
  }
  // as<uint32_t>: with the lvalue kOldShards first, Catch2 would make a generator of
  // `const uint32_t&` and keep a dangling reference to the temporary 5u (ASan saw 1 there).
  const uint32_t num_shards = GENERATE(as<uint32_t>{}, kOldShards, 5u);
  absl::StatusOr<std::vector<ShardCut>> loaded = LoadCheckpointShards(
      chain.Folder(3), chain.manifests[2], f.tables, num_shards, {0, 1, 2, 3}, /*threads=*/2);
  CHECK(loaded.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(loaded.status().message()), Catch::Contains(named));
  // Shard 3 was written in full at 2: checkpoint 2 does not need 1 for it, but for the others.
  if (num_shards == kOldShards) {
    CHECK(LoadCheckpointShards(chain.Folder(2), chain.manifests[1], f.tables, kOldShards, {3}, 1)
              .ok() == (named != chain.Folder(1)));
  }
}

}  // namespace
}  // namespace server
}  // namespace ps

#include "server/checkpoint/shard_file.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "server/checkpoint/internal/test_shards.h"

namespace ps {
namespace server {
namespace {

using testing::Contents;
using testing::Fixture;
using testing::RestoreCut;

TEST_CASE("a shard written to a file and read back restores bit for bit", "[checkpoint]") {
  Fixture f;
  std::unique_ptr<Shard> shard = f.Filled(5, 300);
  const ShardCut cut = shard->Cut(/*max_record_bytes=*/4096);
  const std::string path = f.dir + "/shard-5.sst";
  absl::StatusOr<rpc::CheckpointShardFile> written = WriteShardFile(path, cut, f.tables);
  REQUIRE(written.ok());
  CHECK(written->file() == "shard-5.sst");
  CHECK(written->shard() == 5);
  CHECK(written->sequence() == shard->applied_sequence());
  CHECK(written->bytes() == std::filesystem::file_size(path));
  CHECK(written->dense_chunks() == 2);
  const Contents original(cut, f.tables);
  CHECK(written->rows() == original.rows.size());
  CHECK(original.windows.size() == 2);

  absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables, &*written, 4096);
  REQUIRE(read.ok());
  CHECK(Contents(*read, f.tables) == original);

  // Restored into a fresh shard, it cuts the same again, and keeps training the same way.
  Shard restored(5, f.config, {0, 0});
  REQUIRE(RestoreCut(restored, *read).ok());
  CHECK(restored.complete());
  CHECK(restored.applied_sequence() == shard->applied_sequence());
  CHECK(Contents(restored.Cut(1 << 20), f.tables) == original);
  const std::vector<uint64_t> ids = {1, 2, 3, 700};
  std::vector<float> grads(ids.size() * 4, 0.25f);
  CHECK(shard->Push(1, 2, 50, ids, grads.data()) == ApplyWindow::Verdict::kApply);
  CHECK(restored.Push(1, 2, 50, ids, grads.data()) == ApplyWindow::Verdict::kApply);
  CHECK(Contents(restored.Cut(1 << 20), f.tables) == Contents(shard->Cut(1 << 20), f.tables));
  // The window came along: a retry of an applied push is recognised.
  CHECK(restored.Push(1, 1, 5, ids, grads.data()) == ApplyWindow::Verdict::kDuplicate);
}

TEST_CASE("an incremental cut's file says so, names its base, and reads back as written",
          "[checkpoint][incremental]") {
  Fixture f;
  std::unique_ptr<Shard> shard = f.Filled(2, 200);
  const ShardCut full = shard->Cut(4096, {/*checkpoint_id=*/4, /*base_id=*/0});
  const std::vector<uint64_t> ids = {1, 2, 3};
  std::vector<float> grads(ids.size() * 4, 0.25f);
  REQUIRE(shard->Push(1, 2, 60, ids, grads.data()) == ApplyWindow::Verdict::kApply);
  const ShardCut inc = shard->Cut(4096, {5, 4});
  REQUIRE(inc.incremental);
  const std::string path = f.dir + "/shard-2.sst";
  absl::StatusOr<rpc::CheckpointShardFile> written = WriteShardFile(path, inc, f.tables);
  REQUIRE(written.ok());
  CHECK(written->incremental());
  CHECK(written->base_id() == 4);
  CHECK(written->rows() == ids.size());
  CHECK(written->dense_chunks() == 2);  // every dense chunk, changed or not
  absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables, &*written);
  REQUIRE(read.ok());
  CHECK(read->incremental);
  CHECK(read->base_id == 4);
  CHECK(Contents(*read, f.tables) == Contents(inc, f.tables));

  absl::StatusOr<rpc::CheckpointShardFile> full_file =
      WriteShardFile(f.dir + "/full.sst", full, f.tables);
  REQUIRE(full_file.ok());
  CHECK_FALSE(full_file->incremental());
  CHECK(full_file->base_id() == 0);
}

TEST_CASE("an empty shard makes a valid file", "[checkpoint]") {
  Fixture f;
  Shard shard(0, f.config, {0, 0});
  const std::string path = f.dir + "/empty.sst";
  absl::StatusOr<rpc::CheckpointShardFile> written =
      WriteShardFile(path, shard.Cut(4096), f.tables);
  REQUIRE(written.ok());
  CHECK(written->rows() == 0);
  absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables, &*written);
  REQUIRE(read.ok());
  CHECK(read->records.empty());
  CHECK(read->applied_step == -1);
}

TEST_CASE("a damaged shard file is refused with DATA_LOSS", "[checkpoint]") {
  Fixture f;
  const std::string path = f.dir + "/shard-1.sst";
  absl::StatusOr<rpc::CheckpointShardFile> written =
      WriteShardFile(path, f.Filled(1, 200)->Cut(4096), f.tables);
  REQUIRE(written.ok());
  const uintmax_t size = std::filesystem::file_size(path);

  SECTION("missing") {
    std::filesystem::remove(path);
    absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables, &*written);
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(read.status().message()), Catch::Contains("missing"));
  }
  SECTION("truncated") {
    std::filesystem::resize_file(path, size / 2);
    CHECK(ReadShardFile(path, f.tables, &*written).status().code() == absl::StatusCode::kDataLoss);
    // Without the manifest's size and checksum, RocksDB's own checks refuse it too.
    absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables);
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("a flipped byte") {
    {
      std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(static_cast<std::streamoff>(size / 3));
      char c;
      file.read(&c, 1);
      file.seekp(static_cast<std::streamoff>(size / 3));
      c ^= 0x10;
      file.write(&c, 1);
    }
    absl::StatusOr<ShardCut> read = ReadShardFile(path, f.tables, &*written);
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(read.status().message()), Catch::Contains("checksum"));
    // RocksDB's block checksums catch it without the manifest.
    CHECK(ReadShardFile(path, f.tables).status().code() == absl::StatusCode::kDataLoss);
  }
}

TEST_CASE("a shard file is refused by a job whose table differs", "[checkpoint]") {
  Fixture f;
  const std::string path = f.dir + "/shard-2.sst";
  REQUIRE(WriteShardFile(path, f.Filled(2, 50)->Cut(4096), f.tables).ok());
  const std::vector<std::unique_ptr<TableSpec>> wider = Fixture::Tables(/*dim=*/8);
  absl::StatusOr<ShardCut> read = ReadShardFile(path, wider);
  CHECK(read.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(read.status().message()), Catch::Contains("\"emb\" has dim 4"));
  std::vector<std::unique_ptr<TableSpec>> fewer = Fixture::Tables(4);
  fewer.erase(fewer.begin());  // no "wide"
  read = ReadShardFile(path, fewer);
  CHECK(read.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(read.status().message()), Catch::Contains("\"wide\""));
}

}  // namespace
}  // namespace server
}  // namespace ps

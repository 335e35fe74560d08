#include "server/coordinator/restore_check.h"

#include <stdlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"

namespace ps {
namespace coordinator {
namespace {

config::Table Table(const std::string& name, uint32_t dim, const std::string& optimizer) {
  config::Table t;
  t.set_name(name);
  t.set_dim(dim);
  t.mutable_optimizer()->set_type(optimizer);
  return t;
}

// A checkpoint_dir holding checkpoint 4: tables emb (dim 8, adagrad) and wide (dim 1, sgd), two
// shard files (any bytes: only sizes and checksums are checked here).
struct Checkpoint {
  Checkpoint() {
    char tmpl[] = "/tmp/restore_check_test.XXXXXX";
    dir = ::mkdtemp(tmpl);
    folder = Write(4, 0);
    *job.add_tables() = Table("wide", 1, "SGD");
    *job.add_tables() = Table("emb", 8, "adagrad");
  }

  // Writes checkpoint `id`, incremental on `base` (0: full); returns its folder.
  std::string Write(uint64_t id, uint64_t base) {
    const std::string at = dir + "/" + CheckpointFolderName(id);
    std::filesystem::create_directory(at);
    rpc::CheckpointManifest m;
    m.set_format(kCheckpointFormat);
    m.set_id(id);
    m.set_base_id(base);
    m.mutable_shard_map()->set_num_shards(2);
    *m.add_tables() = Table("emb", 8, "adagrad");
    *m.add_tables() = Table("wide", 1, "sgd");
    for (int s = 0; s < 2; ++s) {
      rpc::CheckpointShardFile* f = m.add_shards();
      f->set_shard(s);
      f->set_file("shard-" + std::to_string(s) + ".sst");
      f->set_incremental(base != 0);
      f->set_base_id(base);
      const std::string path = at + "/" + f->file();
      std::ofstream(path, std::ios::binary) << std::string(1000 + s, 'a' + s);
      f->set_bytes(1000 + s);
      f->set_xxh3(*FileXxh3(path));
    }
    REQUIRE(WriteCheckpointManifest(at, m).ok());
    return at;
  }
  ~Checkpoint() { std::filesystem::remove_all(dir); }

  std::string dir, folder;
  config::Job job;
};

TEST_CASE("an intact checkpoint fitting the job is restorable", "[checkpoint]") {
  Checkpoint c;
  // More tables and other hyperparameters are fine.
  *c.job.add_tables() = Table("new", 4, "adam");
  c.job.mutable_tables(1)->mutable_optimizer()->set_learning_rate(0.5f);
  for (const std::string& path : {c.dir, c.folder}) {
    absl::StatusOr<RestorePoint> point = CheckRestorable(path, c.job);
    REQUIRE(point.ok());
    CHECK(point->folder == c.folder);
    CHECK(point->manifest.id() == 4);
    REQUIRE(point->files.size() == 2);
    CHECK(point->files[1].path == c.folder + "/shard-1.sst");
    CHECK(point->files[1].expected.bytes() == 1001);
    CHECK(VerifyRestoreFiles(*point).ok());
    std::atomic<bool> cancelled{true};
    CHECK(VerifyRestoreFiles(*point, &cancelled).code() == absl::StatusCode::kCancelled);
    cancelled = false;
    CHECK(VerifyRestoreFiles(*point, &cancelled).ok());
  }
}

TEST_CASE("a checkpoint whose tables do not fit the job is refused", "[checkpoint]") {
  Checkpoint c;
  std::string want;
  SECTION("another dim") {
    c.job.mutable_tables(1)->set_dim(16);
    want = "table \"emb\" has dim 8 in checkpoint";
  }
  SECTION("another optimizer") {
    c.job.mutable_tables(1)->mutable_optimizer()->set_type("adam");
    want = "table \"emb\" has optimizer adagrad in checkpoint";
  }
  SECTION("a table missing") {
    c.job.mutable_tables()->DeleteSubrange(0, 1);
    want = "holds table \"wide\", which the job does not have";
  }
  absl::StatusOr<RestorePoint> point = CheckRestorable(c.dir, c.job);
  CHECK(point.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(point.status().message()), Catch::Contains(want));
}

TEST_CASE("a truncated or missing file is refused at once, naming the file", "[checkpoint]") {
  Checkpoint c;
  const std::string file = c.folder + "/shard-1.sst";
  std::string want;
  SECTION("truncated") {
    std::filesystem::resize_file(file, 500);
    want = "has 500 bytes, the manifest says 1001";
  }
  SECTION("missing") {
    std::filesystem::remove(file);
    want = file;
  }
  absl::StatusOr<RestorePoint> point = CheckRestorable(c.folder, c.job);
  CHECK(point.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(point.status().message()), Catch::Contains(want));
}

TEST_CASE("a damaged file passes the quick check and fails the files' check, naming the file",
          "[checkpoint]") {
  Checkpoint c;
  const std::string file = c.folder + "/shard-1.sst";
  absl::StatusOr<RestorePoint> point = CheckRestorable(c.folder, c.job);
  REQUIRE(point.ok());
  std::string want;
  SECTION("a flipped byte, same size") {
    std::ofstream(file, std::ios::binary) << std::string(1000, 'b') << 'c';
    want = "checksum";
    REQUIRE(CheckRestorable(c.folder, c.job).ok());  // the size is right
  }
  SECTION("truncated after the quick check") {
    std::filesystem::resize_file(file, 500);
    want = "has 500 bytes, the manifest says 1001";
  }
  SECTION("removed after the quick check") {
    std::filesystem::remove(file);
    want = file;
  }
  const absl::Status verified = VerifyRestoreFiles(*point);
  CHECK(verified.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(verified.message()), Catch::Contains(file));
  CHECK_THAT(std::string(verified.message()), Catch::Contains(want));
}

TEST_CASE("an incremental checkpoint is checked with every file of its chain",
          "[checkpoint][incremental]") {
  Checkpoint c;
  c.Write(5, 4);
  const std::string newest = c.Write(6, 5);
  absl::StatusOr<RestorePoint> point = CheckRestorable(c.dir, c.job);
  REQUIRE(point.ok());
  CHECK(point->folder == newest);
  CHECK(point->manifest.base_id() == 5);

  REQUIRE(point->files.size() == 6);  // two files of each of 6, 5 and 4
  CHECK(point->files[0].path == newest + "/shard-0.sst");
  CHECK(point->files[5].path == c.folder + "/shard-1.sst");
  CHECK(VerifyRestoreFiles(*point).ok());

  std::string want;
  SECTION("a base's file truncated") {
    const std::string file = c.folder + "/shard-1.sst";
    std::filesystem::resize_file(file, 10);
    want = file;
  }
  SECTION("a base missing") {
    std::filesystem::remove_all(c.dir + "/" + CheckpointFolderName(5));
    want = "checkpoint 6 builds on checkpoint 5";
  }
  SECTION("the full checkpoint missing") {
    std::filesystem::remove_all(c.folder);
    want = "checkpoint 5 builds on checkpoint 4 (" + c.folder + "), which is missing";
  }
  point = CheckRestorable(newest, c.job);
  CHECK(point.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(point.status().message()), Catch::Contains(want));
}

TEST_CASE("a damaged file of a base fails the files' check", "[checkpoint][incremental]") {
  Checkpoint c;
  c.Write(5, 4);
  absl::StatusOr<RestorePoint> point = CheckRestorable(c.Write(6, 5), c.job);
  REQUIRE(point.ok());
  const std::string file = c.folder + "/shard-1.sst";  // of the full checkpoint 4
  std::ofstream(file, std::ios::binary) << std::string(1000, 'b') << 'c';
  const absl::Status verified = VerifyRestoreFiles(*point);
  CHECK(verified.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(verified.message()), Catch::Contains(file));
}

TEST_CASE("without a complete checkpoint there is nothing to restore", "[checkpoint]") {
  Checkpoint c;
  std::filesystem::remove(c.folder + "/MANIFEST");
  CHECK(CheckRestorable(c.dir, c.job).status().code() == absl::StatusCode::kNotFound);
  CHECK(CheckRestorable(c.folder, c.job).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("the restore path: the flag, restore_from, or resume's newest", "[checkpoint]") {
  Checkpoint c;
  CHECK(RestorePathOf("", c.job).empty());
  c.job.mutable_cluster()->set_checkpoint_dir(c.dir);
  c.job.mutable_cluster()->set_resume(true);
  CHECK(RestorePathOf("", c.job) == c.folder);
  CHECK(RestorePathOf("/x", c.job) == "/x");
  std::filesystem::remove(c.folder + "/MANIFEST");
  CHECK(RestorePathOf("", c.job).empty());  // resume with nothing complete: start empty
  c.job.mutable_cluster()->set_resume(false);
  c.job.mutable_cluster()->set_restore_from("/y");
  CHECK(RestorePathOf("", c.job) == "/y");
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

#include "tests/testing/temp_dir.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"

namespace ps {
namespace testing {
namespace {

namespace fs = std::filesystem;

TEST_CASE("TempDir is Bazel's folder for the test", "[temp_dir]") {
  const char* bazel = std::getenv("TEST_TMPDIR");
  REQUIRE(bazel != nullptr);  // set by `bazel test`
  CHECK(TempDir() == bazel);
  CHECK(fs::is_directory(TempDir()));
}

TEST_CASE("a ScopedTempDir is a new folder, removed with its contents", "[temp_dir]") {
  std::string path;
  {
    auto dir = ScopedTempDir::Create("temp_dir_test");
    INFO(dir.status().ToString());
    REQUIRE(dir.ok());
    path = (*dir)->path();
    CHECK(absl::StartsWith(path, TempDir() + "/temp_dir_test."));
    REQUIRE(fs::is_directory(path));

    auto other = ScopedTempDir::Create("temp_dir_test");
    REQUIRE(other.ok());
    CHECK((*other)->path() != path);

    fs::create_directories(path + "/sub/deeper");
    std::ofstream(path + "/sub/deeper/file.txt") << "contents";
    std::ofstream(path + "/top.txt") << "contents";
    REQUIRE(fs::exists(path + "/sub/deeper/file.txt"));
  }
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("ScopedTempDir fails where it cannot create the folder", "[temp_dir]") {
  auto dir = ScopedTempDir::Create("no/such/folder/x");
  CHECK(dir.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(dir.status().message(), "cannot create "));
  CHECK(absl::StrContains(dir.status().message(), "/no/such/folder/x."));
}

}  // namespace
}  // namespace testing
}  // namespace ps

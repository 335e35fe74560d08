#include "tests/testing/temp_dir.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

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

TEST_CASE("UseScopedTempDir sends a process's and its children's files into its folder",
          "[temp_dir]") {
  // As a benchmark run by hand: no TEST_TMPDIR. Both variables are put back at the end.
  const std::string bazel = std::getenv("TEST_TMPDIR");
  const char* tmpdir = std::getenv("TMPDIR");
  const std::optional<std::string> old_tmpdir =
      tmpdir == nullptr ? std::nullopt : std::optional<std::string>(tmpdir);
  setenv("TMPDIR", bazel.c_str(), 1);
  unsetenv("TEST_TMPDIR");
  std::string path;
  {
    auto dir = UseScopedTempDir("temp_dir_bench");
    INFO(dir.status().ToString());
    REQUIRE(dir.ok());
    path = (*dir)->path();
    CHECK(absl::StartsWith(path, bazel + "/temp_dir_bench."));
    CHECK(TempDir() == path);
    // A child process inherits it.
    const std::string seen = path + "/seen";
    REQUIRE(std::system(("echo \"$TMPDIR\" > '" + seen + "'").c_str()) == 0);
    std::string line;
    std::getline(std::ifstream(seen), line);
    CHECK(line == path);
  }
  CHECK_FALSE(fs::exists(path));
  setenv("TEST_TMPDIR", bazel.c_str(), 1);
  if (old_tmpdir.has_value()) {
    setenv("TMPDIR", old_tmpdir->c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
  CHECK(TempDir() == bazel);
}

}  // namespace
}  // namespace testing
}  // namespace ps

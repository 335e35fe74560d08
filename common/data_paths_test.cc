#include "common/data_paths.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

// A new folder holding empty files of `names`.
std::unique_ptr<testing::ScopedTempDir> FolderWith(const std::vector<std::string>& names) {
  auto dir = testing::ScopedTempDir::Create("data_paths");
  REQUIRE(dir.ok());
  for (const std::string& name : names) std::ofstream(absl::StrCat((*dir)->path(), "/", name));
  return std::move(*dir);
}

TEST_CASE("a path without glob characters names itself, existing or not", "[common][data]") {
  CHECK_FALSE(IsDataGlob("data/train.tsv"));
  const auto files = ExpandDataPath("/nonexistent/train.tsv");
  REQUIRE(files.ok());
  CHECK(*files == std::vector<std::string>{"/nonexistent/train.tsv"});
  CHECK(ExpandDataPath("").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a glob names the files it matches, sorted", "[common][data]") {
  const auto dir = FolderWith({"part-2.tsv", "part-10.tsv", "part-1.tsv", "other.txt"});
  const std::string d = dir->path();
  CHECK(IsDataGlob("part-*.tsv"));
  CHECK(IsDataGlob("part-?.tsv"));
  CHECK(IsDataGlob("part-[12].tsv"));
  const auto star = ExpandDataPath(d + "/part-*.tsv");
  REQUIRE(star.ok());
  CHECK(*star ==
        std::vector<std::string>{d + "/part-1.tsv", d + "/part-10.tsv", d + "/part-2.tsv"});
  const auto one = ExpandDataPath(d + "/part-?.tsv");
  REQUIRE(one.ok());
  CHECK(*one == std::vector<std::string>{d + "/part-1.tsv", d + "/part-2.tsv"});

  SECTION("several paths keep their order, each expanded") {
    const auto all = ExpandDataPaths({d + "/other.txt", d + "/part-[2].tsv", d + "/part-1.tsv"});
    REQUIRE(all.ok());
    CHECK(*all == std::vector<std::string>{d + "/other.txt", d + "/part-2.tsv", d + "/part-1.tsv"});
  }
}

TEST_CASE("a glob that matches nothing is NOT_FOUND, naming it", "[common][data]") {
  const auto dir = FolderWith({"train.tsv"});
  const std::string pattern = dir->path() + "/trian*.tsv";
  const auto none = ExpandDataPath(pattern);
  REQUIRE(none.status().code() == absl::StatusCode::kNotFound);
  CHECK(none.status().message() == absl::StrCat("the pattern \"", pattern, "\" matches no file"));
  CHECK(ExpandDataPaths({dir->path() + "/train.tsv", pattern}).status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("a file whose name has glob characters is found by its name", "[common][data]") {
  const auto dir = FolderWith({"day[1].tsv"});
  const std::string name = dir->path() + "/day[1].tsv";
  const auto files = ExpandDataPath(name);
  REQUIRE(files.ok());
  CHECK(*files == std::vector<std::string>{name});
}

}  // namespace
}  // namespace ps

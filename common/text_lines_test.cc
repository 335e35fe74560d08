#include "common/text_lines.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

std::vector<std::string> Lines(const std::string& path, int max = 1000) {
  std::vector<std::string> lines;
  const absl::Status status = ForEachLine(path, [&](const std::string& line) {
    lines.push_back(line);
    return static_cast<int>(lines.size()) < max;
  });
  REQUIRE(status.ok());
  return lines;
}

TEST_CASE("ForEachLine reads plain and gzip files alike, lines of any length whole",
          "[text_lines]") {
  auto dir = testing::ScopedTempDir::Create("text_lines");
  REQUIRE(dir.ok());
  const std::string longest(200000, 'x');  // longer than a read's buffer
  const std::string text = absl::StrCat("a\tb\r\n\n", longest, "\nlast");
  const bool gzip = GENERATE(false, true);
  const std::string path = absl::StrCat((*dir)->path(), gzip ? "/f.gz" : "/f.txt");
  REQUIRE((gzip ? testing::WriteGzipFile(path, text) : testing::WriteFile(path, text)).ok());
  CHECK(Lines(path) == std::vector<std::string>{"a\tb", "", longest, "last"});
  CHECK(Lines(path, 2) == std::vector<std::string>{"a\tb", ""});  // stops when told
  CHECK(*FirstLine(path) == "a\tb");
}

TEST_CASE("ForEachLine and FirstLine: empty, missing and damaged files", "[text_lines]") {
  auto dir = testing::ScopedTempDir::Create("text_lines");
  REQUIRE(dir.ok());
  const std::string empty = absl::StrCat((*dir)->path(), "/empty.txt");
  REQUIRE(testing::WriteFile(empty, "").ok());
  CHECK(Lines(empty).empty());
  CHECK(*FirstLine(empty) == "");
  const std::string missing = absl::StrCat((*dir)->path(), "/missing.txt");
  const absl::Status status = ForEachLine(missing, [](const std::string&) { return true; });
  CHECK(status.code() == absl::StatusCode::kNotFound);
  CHECK(std::string(status.message()).find("missing.txt") != std::string::npos);
  CHECK(FirstLine(missing).status().code() == absl::StatusCode::kNotFound);
  // A gzip file cut short: the lines before the cut, then DATA_LOSS.
  const std::string whole = absl::StrCat((*dir)->path(), "/whole.gz");
  std::string text;
  for (int i = 0; i < 20000; ++i) absl::StrAppend(&text, "line ", i * 7919 % 10007, "\n");
  REQUIRE(testing::WriteGzipFile(whole, text).ok());
  std::ifstream in(whole, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 100);
  const std::string cut = absl::StrCat((*dir)->path(), "/cut.gz");
  REQUIRE(testing::WriteFile(cut, bytes.substr(0, bytes.size() / 2)).ok());
  int lines = 0;
  const absl::Status damaged = ForEachLine(cut, [&](const std::string&) {
    ++lines;
    return true;
  });
  CHECK(damaged.code() == absl::StatusCode::kDataLoss);
  CHECK(lines > 0);
  CHECK(lines < 20000);
}

}  // namespace
}  // namespace ps

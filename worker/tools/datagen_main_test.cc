// Runs the real ps_datagen binary.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace worker {
namespace {

using testing::TempDir;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs ps_datagen (from the test's runfiles) with `args`.
Result RunDatagen(const std::vector<std::string>& args) {
  const std::string command =
      absl::StrCat("worker/tools/ps_datagen '", absl::StrJoin(args, "' '"), "' 2>&1");
  Result result;
  std::FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  REQUIRE(WIFEXITED(status));
  result.exit_code = WEXITSTATUS(status);
  return result;
}

TEST_CASE("ps_datagen writes both files and prints one JSON line", "[worker][datagen]") {
  const std::string dir = TempDir();
  const std::vector<std::string> args = {"--rows=3000",
                                         "--heldout_rows=700",
                                         "--cardinalities=50,60,70",
                                         "--num_sparse=3",
                                         "--num_dense=2",
                                         "--seed=5",
                                         absl::StrCat("--out=", dir, "/dg_train.tsv"),
                                         absl::StrCat("--heldout_out=", dir, "/dg_heldout.tsv")};
  const Result first = RunDatagen(args);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(absl::StartsWith(first.output, "{\"rows\":3000,\"heldout_rows\":700,\"teacher_auc\":0."));
  CHECK(absl::StrContains(first.output, ",\"teacher_logloss\":0."));
  CHECK(absl::StrContains(first.output, ",\"positive_rate\":0."));
  CHECK(absl::EndsWith(first.output, "}\n"));
  const std::string train = ReadBytes(dir + "/dg_train.tsv");
  const std::string heldout = ReadBytes(dir + "/dg_heldout.tsv");
  CHECK(std::count(train.begin(), train.end(), '\n') == 3000);
  CHECK(std::count(heldout.begin(), heldout.end(), '\n') == 700);
  // 6 fields per line: label, 2 integers, 3 hex values.
  CHECK(std::count(train.begin(), train.end(), '\t') == 3000 * 5);

  // The same flags give the same bytes and the same line.
  const Result second = RunDatagen(args);
  CHECK(second.output == first.output);
  CHECK(ReadBytes(dir + "/dg_train.tsv") == train);
  CHECK(ReadBytes(dir + "/dg_heldout.tsv") == heldout);
}

TEST_CASE("ps_datagen --long_tail writes 64-bit ids and their expected distinct counts",
          "[worker][datagen][long_tail]") {
  const std::string dir = TempDir();
  const std::vector<std::string> args = {"--long_tail",
                                         "--rows=20000",
                                         "--heldout_rows=20000",
                                         "--num_sparse=3",
                                         "--num_dense=2",
                                         absl::StrCat("--out=", dir, "/dg_lt_train.tsv"),
                                         absl::StrCat("--heldout_out=", dir, "/dg_lt_heldout.tsv")};
  const Result first = RunDatagen(args);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(
      absl::StartsWith(first.output, "{\"rows\":20000,\"heldout_rows\":20000,\"teacher_auc\":0."));
  CHECK(absl::StrContains(first.output, ",\"positive_rate\":0."));
  CHECK(absl::EndsWith(first.output, "]}\n"));
  // One count per field, each about half the rows with 10^8 values.
  const size_t open = first.output.find(",\"expected_distinct_per_field\":[");
  REQUIRE(open != std::string::npos);
  const std::string list = first.output.substr(open + 32, first.output.size() - 3 - (open + 32));
  const std::vector<std::string> counts = absl::StrSplit(list, ',');
  REQUIRE(counts.size() == 3);
  for (const std::string& count : counts) {
    int distinct = 0;
    REQUIRE(absl::SimpleAtoi(count, &distinct));
    CHECK(distinct > 8000);
    CHECK(distinct < 14000);
  }
  double auc = 0;
  REQUIRE(absl::SimpleAtod(first.output.substr(first.output.find("teacher_auc") + 13, 8), &auc));
  CHECK(auc > 0.6);

  const std::string train = ReadBytes(dir + "/dg_lt_train.tsv");
  CHECK(std::count(train.begin(), train.end(), '\n') == 20000);
  // Label, 2 integers, 3 ids of 16 hex digits.
  const std::string first_line = train.substr(0, train.find('\n'));
  const std::vector<std::string> fields = absl::StrSplit(first_line, '\t');
  REQUIRE(fields.size() == 6);
  for (int c = 3; c < 6; ++c) CHECK(fields[c].size() == 16);

  // The same flags give the same bytes; the mode's defaults are 10^8 values and Zipf(1.05).
  std::vector<std::string> explicit_args = args;
  explicit_args.push_back("--cardinalities=100000000");
  explicit_args.push_back("--zipf=1.05");
  const Result second = RunDatagen(explicit_args);
  CHECK(second.output == first.output);
  CHECK(ReadBytes(dir + "/dg_lt_train.tsv") == train);
  // Another exponent gives other ids.
  explicit_args.back() = "--zipf=1.2";
  REQUIRE(RunDatagen(explicit_args).exit_code == 0);
  CHECK(ReadBytes(dir + "/dg_lt_train.tsv") != train);
}

TEST_CASE("ps_datagen --long_tail takes cardinalities up to 2^40", "[worker][datagen][long_tail]") {
  const std::string out = absl::StrCat("--out=", TempDir(), "/dg_lt_big.tsv");
  Result r = RunDatagen(
      {out, "--long_tail", "--rows=100", "--heldout_rows=0", "--cardinalities=1099511627776"});
  CHECK(r.exit_code == 0);
  r = RunDatagen(
      {out, "--long_tail", "--rows=100", "--heldout_rows=0", "--cardinalities=1099511627777"});
  CHECK(r.exit_code == 2);
  CHECK(absl::StrContains(r.output, "cardinalities"));
  // Without --long_tail the tabulated limit holds.
  r = RunDatagen({out, "--rows=100", "--heldout_rows=0", "--cardinalities=16777217"});
  CHECK(r.exit_code == 2);
  CHECK(absl::StrContains(r.output, "cardinalities"));
}

TEST_CASE("ps_datagen refuses bad flags and unwritable files", "[worker][datagen]") {
  const std::string out = absl::StrCat("--out=", TempDir(), "/dg_bad.tsv");
  const std::string heldout = absl::StrCat("--heldout_out=", TempDir(), "/dg_bad_heldout.tsv");
  Result r = RunDatagen({"--rows=10", "--heldout_rows=0"});
  CHECK(r.exit_code == 2);
  CHECK(absl::StrContains(r.output, "--out is required"));
  r = RunDatagen({out, "--rows=10", "--heldout_rows=5"});
  CHECK(r.exit_code == 2);
  CHECK(absl::StrContains(r.output, "--heldout_out"));
  r = RunDatagen({out, "--rows=10", "--heldout_rows=0", "--cardinalities=10,x"});
  CHECK(r.exit_code == 2);
  CHECK(absl::StrContains(r.output, "bad number \"x\""));
  r = RunDatagen({out, heldout, "--rows=10", "--cardinalities=10,20"});
  CHECK(r.exit_code == 2);
  CHECK(absl::StrContains(r.output, "cardinalities"));
  r = RunDatagen({out, heldout, "--rows=10", "--positive_rate=1.5"});
  CHECK(r.exit_code == 2);
  CHECK(absl::StrContains(r.output, "positive_rate"));
  const std::string missing_dir = absl::StrCat(TempDir(), "/no_such_dir/x.tsv");
  r = RunDatagen({"--out=" + missing_dir, "--rows=10", "--heldout_rows=0"});
  CHECK(r.exit_code == 1);
  CHECK(absl::StrContains(r.output, missing_dir));
  // Without a held-out file, the teacher's metrics are those of the training file.
  r = RunDatagen({out, "--rows=100", "--heldout_rows=0", "--cardinalities=10"});
  CHECK(r.exit_code == 0);
  CHECK(absl::StartsWith(r.output, "{\"rows\":100,\"heldout_rows\":0,"));
}

}  // namespace
}  // namespace worker
}  // namespace ps

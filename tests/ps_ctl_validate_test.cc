// `ps_ctl validate` checks a job's data (issue 14): a missing data file is an error naming the
// job file, line, field and path (exit 1); a job of 16 steps is valid but warned (exit 0); a
// delimited schema's header must name its columns, and STANDARDIZE's moments are computed.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/testing/daemon.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

constexpr char kPsCtl[] = "client/ps_ctl";

// The quickstart's settings on `train`: batch 512, 2 workers, 2 epochs. Data on line 4.
std::string WriteJob(const std::string& name, const std::string& train) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream(path) << absl::StrFormat(
      "name: \"%s\"\n"
      "tables { name: \"emb\" dim: 16 }\n"
      "model { shared_table: \"emb\" }\n"
      "data { train_paths: \"%s\" }\n"
      "training {\n"
      "  mode: SYNC\n"
      "  batch_size: 512\n"
      "  epochs: 2\n"
      "}\n"
      "cluster { num_servers: 2 num_workers: 2 }\n",
      name, train);
  return path;
}

// `lines` lines of Criteo's shape (label, 13 integers, 26 hex values).
void WriteData(const std::string& path, int lines) {
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    out << (i % 3 == 0 ? 1 : 0);
    for (int d = 0; d < 13; ++d) out << '\t' << (i + d) % 97;
    for (int c = 0; c < 26; ++c) out << '\t' << absl::StrFormat("%08x", (i * 31 + c) % 5000);
    out << '\n';
  }
}

TEST_CASE("ps_ctl validate refuses a missing data file, naming it", "[integration][ps_ctl]") {
  const std::string missing = absl::StrCat(testing::TempDir(), "/trian.tsv");
  const std::string job = WriteJob("missing", missing);
  const auto result = testing::RunProcess(kPsCtl, {"validate", job});
  REQUIRE(result.ok());
  INFO(result->stdout_text << result->stderr_text);
  CHECK(result->exit_code == 1);
  CHECK(result->stderr_text == absl::StrCat(job, ":4:8: data.train_paths[0]: cannot read \"",
                                            missing, "\": No such file or directory\n"));
  CHECK_FALSE(absl::StrContains(result->stdout_text, "is valid"));

  SECTION("--check_data=false checks the job file alone") {
    const auto unchecked = testing::RunProcess(kPsCtl, {"validate", "--check_data=false", job});
    REQUIRE(unchecked.ok());
    CHECK(unchecked->exit_code == 0);
    CHECK_THAT(unchecked->stdout_text, Catch::Contains("data: not checked (--check_data=false)"));
  }
  SECTION("a relative path is taken from ps_ctl's current directory, which the message names") {
    const std::string relative = WriteJob("relative", "data/trian.tsv");
    const auto r = testing::RunProcess(kPsCtl, {"validate", relative});
    REQUIRE(r.ok());
    CHECK(r->exit_code == 1);
    char cwd[4096];
    REQUIRE(getcwd(cwd, sizeof(cwd)) != nullptr);
    CHECK_THAT(r->stderr_text, Catch::Contains(absl::StrCat("\"data/trian.tsv\" (relative to ", cwd,
                                                            ", the current directory of ps_ctl)")));
  }
}

TEST_CASE("ps_ctl validate warns of a job of 16 steps and accepts it", "[integration][ps_ctl]") {
  const std::string train = absl::StrCat(testing::TempDir(), "/train_8k.tsv");
  WriteData(train, 8000);
  const std::string job = WriteJob("short", train);
  const auto result = testing::RunProcess(kPsCtl, {"validate", job});
  REQUIRE(result.ok());
  INFO(result->stdout_text << result->stderr_text);
  CHECK(result->exit_code == 0);
  CHECK_THAT(result->stdout_text, Catch::Contains("job \"short\" is valid"));
  CHECK_THAT(result->stdout_text,
             Catch::Contains("  data: 8000 lines (counted) in 1 file of 2.2 MB: 8 steps an epoch "
                             "(8000 lines / (512 x 2 workers)), 16 steps in all (2 epochs)\n"));
  CHECK(result->stderr_text ==
        absl::StrCat("warning: ", job,
                     ":7:3: 16 steps in all (8000 lines / (512 x 2 workers) x 2 epochs); fewer "
                     "than 100 steps rarely trains well: lower training.batch_size (e.g. 64 gives "
                     "~126 steps) or raise training.epochs (e.g. 13 gives ~104 steps)\n"));
}

// A comma-delimited job with a header on `train`: the label, "age" (STANDARDIZE, moments left to
// be computed) and "user".
std::string WriteSchemaJob(const std::string& name, const std::string& train) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream(path) << absl::StrFormat(
      "name: \"%s\"\n"
      "tables { name: \"emb\" dim: 4 }\n"
      "model { shared_table: \"emb\" }\n"
      "data {\n"
      "  format: DELIMITED\n"
      "  train_paths: \"%s\"\n"
      "  schema {\n"
      "    delimiter: COMMA header: true label: \"click\"\n"
      "    dense { column: \"age\" transform: STANDARDIZE }\n"
      "    sparse { column: \"user\" }\n"
      "  }\n"
      "}\n"
      "training { mode: SYNC batch_size: 2 steps: 200 }\n"
      "cluster { num_servers: 1 num_workers: 1 }\n",
      name, train);
  return path;
}

TEST_CASE("ps_ctl validate computes STANDARDIZE's moments and checks the header's columns",
          "[integration][ps_ctl]") {
  const std::string train = absl::StrCat(testing::TempDir(), "/people.csv");
  std::ofstream(train) << "click,age,user\n1,20,a\n0,40,b\n1,,c\n0,60,d\n";
  const std::string job = WriteSchemaJob("moments", train);
  const auto result = testing::RunProcess(kPsCtl, {"validate", job});
  REQUIRE(result.ok());
  INFO(result->stdout_text << result->stderr_text);
  CHECK(result->exit_code == 0);
  // Values 20, 40, 0 (empty), 60: mean 30, population stddev sqrt(500).
  CHECK_THAT(result->stdout_text,
             Catch::Contains("  data.schema.dense[0] (age): STANDARDIZE mean 30 stddev 22.3607, "
                             "from 4 lines (computed; the coordinator computes the same)\n"));

  const std::string renamed = absl::StrCat(testing::TempDir(), "/renamed.csv");
  std::ofstream(renamed) << "click,years,user\n1,20,a\n";
  const std::string bad = WriteSchemaJob("renamed", renamed);
  const auto refused = testing::RunProcess(kPsCtl, {"validate", bad});
  REQUIRE(refused.ok());
  CHECK(refused->exit_code == 1);
  CHECK(refused->stderr_text ==
        absl::StrCat(bad, ":9:5: data.schema.dense[0].column: ", renamed,
                     ":1:1: the header has no column \"age\" (its columns: click, years, user)\n"));
}

}  // namespace
}  // namespace ps

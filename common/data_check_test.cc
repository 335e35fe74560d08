#include "common/data_check.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_config.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

// `lines` lines of 20 to 300 random hex digits and tabs (as Criteo's are, and compressing as
// evenly), the same for the same seed.
std::string Lines(int64_t lines, uint32_t seed, bool last_newline = true) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> length(20, 300);
  std::uniform_int_distribution<int> symbol(0, 16);
  std::string text;
  for (int64_t i = 0; i < lines; ++i) {
    for (int n = length(rng); n > 0; --n) text.push_back("0123456789abcdef\t"[symbol(rng)]);
    if (i + 1 < lines || last_newline) text.push_back('\n');
  }
  return text;
}

void WritePlain(const std::string& path, const std::string& text) {
  REQUIRE(testing::WriteFile(path, text).ok());
}

void WriteGzip(const std::string& path, const std::string& text) {
  REQUIRE(testing::WriteGzipFile(path, text).ok());
}

// A job on `train` and `eval` (already quoted lists' insides) in a file of its own; the data
// section is on lines 3 to 6, `training` on 7 to 11.
struct JobFile {
  std::string path;
  config::Job job;
};

JobFile WriteJob(const std::string& dir, const std::string& train, const std::string& eval,
                 int batch, int workers, const std::string& length = "epochs: 2") {
  const std::string text = absl::StrFormat(
      "name: \"data_check\"\n"
      "tables { name: \"emb\" dim: 4 }\n"
      "data {\n"
      "  train_paths: %s\n"
      "  eval_paths: %s\n"
      "}\n"
      "training {\n"
      "  mode: SYNC\n"
      "  batch_size: %d\n"
      "  %s\n"
      "}\n"
      "cluster { num_servers: 1 num_workers: %d }\n",
      train, eval, batch, length, workers);
  JobFile f;
  f.path = absl::StrCat(dir, "/job.pbtxt");
  WritePlain(f.path, text);
  absl::StatusOr<config::Job> job = ParseJob(text, f.path);
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  f.job = *job;
  return f;
}

std::string Quoted(const std::string& path) { return absl::StrCat("\"", path, "\""); }

std::unique_ptr<testing::ScopedTempDir> NewDir() {
  auto dir = testing::ScopedTempDir::Create("data_check");
  REQUIRE(dir.ok());
  return std::move(*dir);
}

DataCheckResult Check(const JobFile& f, DataCheckOptions options = {}) {
  options.job_path = f.path;
  options.checker = "the test";
  return CheckJobData(f.job, options);
}

TEST_CASE("a missing training file is an error naming the file, field, line and path",
          "[common][data_check]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  WritePlain(d + "/eval.tsv", Lines(10, 1));
  const JobFile f = WriteJob(d, Quoted(d + "/trian.tsv"), Quoted(d + "/eval.tsv"), 64, 1);
  const DataCheckResult r = Check(f);
  CHECK_FALSE(r.ok());
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0] == absl::StrCat(f.path, ":4:3: data.train_paths[0]: cannot read \"", d,
                                    "/trian.tsv\": No such file or directory"));
  CHECK_FALSE(r.estimate.has_value());
}

TEST_CASE("relative paths are taken from the current directory, which the message names",
          "[common][data_check]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  char cwd[4096];
  REQUIRE(getcwd(cwd, sizeof(cwd)) != nullptr);
  REQUIRE(chdir(d.c_str()) == 0);
  WritePlain(d + "/train.tsv", Lines(10, 1));
  const JobFile f = WriteJob(d, "[\"train.tsv\", \"missing.tsv\"]", "\"eval/*.tsv\"", 64, 1);
  const DataCheckResult r = Check(f);
  REQUIRE(chdir(cwd) == 0);
  REQUIRE(r.errors.size() == 2);
  // Both train_paths were written as one list: its position.
  CHECK(r.errors[0] == absl::StrCat(f.path,
                                    ":5:3: data.eval_paths[0]: the pattern \"eval/*.tsv\" "
                                    "matches no file (relative to ",
                                    d, ", the current directory of the test)"));
  CHECK(r.errors[1] == absl::StrCat(f.path,
                                    ":4:3: data.train_paths[1]: cannot read "
                                    "\"missing.tsv\" (relative to ",
                                    d,
                                    ", the current directory of the test): No such file or "
                                    "directory"));
}

TEST_CASE("a folder, an empty glob and empty training data are errors", "[common][data_check]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  WritePlain(d + "/empty.tsv", "");
  SECTION("a folder") {
    WritePlain(d + "/train.tsv", Lines(10, 1));
    const JobFile f = WriteJob(d, Quoted(d + "/train.tsv"), Quoted(d), 64, 1);
    const DataCheckResult r = Check(f);
    REQUIRE(r.errors.size() == 1);
    CHECK(absl::StrContains(r.errors[0], "data.eval_paths[0]: cannot read"));
    CHECK(absl::StrContains(r.errors[0], "it is a folder, not a file"));
  }
  SECTION("training data without a line") {
    const JobFile f = WriteJob(d, Quoted(d + "/empty.tsv"), "[]", 64, 1);
    const DataCheckResult r = Check(f);
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0] == absl::StrCat(f.path,
                                      ":4:3: data.train_paths: the training files hold no "
                                      "line (1 file, 0 bytes): there is nothing to train "
                                      "on"));
  }
}

TEST_CASE("a job without training data is not checked", "[common][data_check]") {
  absl::StatusOr<config::Job> job = ParseJob("tables { name: \"emb\" dim: 4 }", "job.pbtxt");
  REQUIRE(job.ok());
  const DataCheckResult r = CheckJobData(*job);
  CHECK(r.ok());
  CHECK(r.warnings.empty());
  CHECK_FALSE(r.estimate.has_value());
}

TEST_CASE("8000 lines in batches of 512 on 2 workers for 2 epochs: 16 steps, warned",
          "[common][data_check]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  // Two files, the last line of the second without its newline.
  WritePlain(d + "/train-1.tsv", Lines(5000, 7));
  WritePlain(d + "/train-2.tsv", Lines(3000, 8, /*last_newline=*/false));
  const JobFile f = WriteJob(d, Quoted(d + "/train-*.tsv"), "[]", 512, 2);
  const DataCheckResult r = Check(f);
  REQUIRE(r.ok());
  REQUIRE(r.estimate.has_value());
  const StepsEstimate& e = *r.estimate;
  CHECK(e.exact);
  CHECK(e.files == 2);
  CHECK(e.lines == 8000);
  CHECK(e.steps_per_epoch == 8);
  CHECK(e.epochs == 2);
  CHECK(e.total_steps == 16);
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0] ==
        absl::StrCat(f.path,
                     ":9:3: 16 steps in all (8000 lines / (512 x 2 workers) x 2 epochs); fewer "
                     "than 100 steps rarely trains well: lower training.batch_size (e.g. 64 gives "
                     "~126 steps) or raise training.epochs (e.g. 13 gives ~104 steps)"));
  CHECK(absl::StartsWith(e.Describe(), "8000 lines (counted) in 2 files of "));
  CHECK(absl::EndsWith(e.Describe(),
                       ": 8 steps an epoch (8000 lines / (512 x 2 workers)), 16 steps in all (2 "
                       "epochs)"));

  SECTION("a smaller batch trains enough steps: no warning") {
    const JobFile small = WriteJob(d, Quoted(d + "/train-*.tsv"), "[]", 64, 2);
    const DataCheckResult ok = Check(small);
    CHECK(ok.warnings.empty());
    CHECK(ok.estimate->total_steps == 126);
  }
  SECTION("with training.steps the advice is about steps") {
    const JobFile steps = WriteJob(d, Quoted(d + "/train-*.tsv"), "[]", 512, 2, "steps: 30");
    const DataCheckResult w = Check(steps);
    REQUIRE(w.warnings.size() == 1);
    CHECK(w.warnings[0] == absl::StrCat(steps.path,
                                        ":10:3: 30 steps in all (training.steps; an epoch of the "
                                        "data, 8000 lines / (512 x 2 workers), is 8 steps); fewer "
                                        "than 100 steps rarely trains well: raise training.steps"));
  }
  SECTION("when even a batch of 1 is too few, only more epochs help") {
    WritePlain(d + "/tiny.tsv", Lines(60, 9));
    const JobFile tiny = WriteJob(d, Quoted(d + "/tiny.tsv"), "[]", 16, 2, "epochs: 1");
    const DataCheckResult w = Check(tiny);
    REQUIRE(w.warnings.size() == 1);
    CHECK(absl::EndsWith(w.warnings[0],
                         "2 steps in all (60 lines / (16 x 2 workers) x 1 epoch); fewer than 100 "
                         "steps rarely trains well: raise training.epochs (e.g. 50 gives ~100 "
                         "steps)"));
  }
}

TEST_CASE("large data is estimated from its first lines, gzip from their compression",
          "[common][data_check]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  const int64_t lines = 60000;
  WritePlain(d + "/a.tsv", Lines(lines, 11));
  WritePlain(d + "/b.tsv", Lines(lines, 12));
  WriteGzip(d + "/c.tsv.gz", Lines(lines, 13));
  const JobFile f = WriteJob(d,
                             absl::StrCat("[", Quoted(d + "/a.tsv"), ", ", Quoted(d + "/b.tsv"),
                                          ", ", Quoted(d + "/c.tsv.gz"), "]"),
                             "[]", 256, 2);
  DataCheckOptions sampled;
  sampled.count_bytes = 0;  // never read whole
  const DataCheckResult r = Check(f, sampled);
  REQUIRE(r.ok());
  REQUIRE(r.estimate.has_value());
  CHECK_FALSE(r.estimate->exact);
  CHECK(r.estimate->gzip);
  INFO(r.estimate->Describe());
  CHECK(r.estimate->lines == Approx(3 * lines).epsilon(0.05));
  CHECK(absl::StartsWith(r.estimate->Describe(), "about "));

  SECTION("read whole, the count is exact") {
    const DataCheckResult whole = Check(f);
    REQUIRE(whole.estimate.has_value());
    CHECK(whole.estimate->exact);
    CHECK(whole.estimate->lines == 3 * lines);
  }
  SECTION("a corrupt gzip file is an error") {
    std::string bytes = "\x1f\x8b";
    bytes += std::string(1000, 'x');
    WritePlain(d + "/c.tsv.gz", bytes);
    const DataCheckResult bad = Check(f);
    REQUIRE(bad.errors.size() == 1);
    CHECK(absl::StrContains(bad.errors[0], "data.train_paths[2]: cannot read"));
    CHECK(absl::StrContains(bad.errors[0], "corrupt gzip data"));
  }
}

TEST_CASE("binary files give their sample counts, and a schema's header lines are no samples",
          "[common][data_check]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  // The start of a binary file's header (worker/data/README.md): magic, version, size, counts.
  std::string header("PSBIN\0\0\0", 8);
  const auto u32 = [&](uint32_t v) { header.append(reinterpret_cast<const char*>(&v), 4); };
  u32(1);
  u32(64);
  u32(13);
  u32(26);
  const uint64_t samples = 123456;
  header.append(reinterpret_cast<const char*>(&samples), 8);
  header.resize(64, '\0');
  WritePlain(d + "/train.bin", header);
  JobFile binary = WriteJob(d, Quoted(d + "/train.bin"), "[]", 512, 2);
  binary.job.mutable_data()->set_format(config::Data::BINARY);
  const DataCheckResult b = Check(binary);
  REQUIRE(b.ok());
  REQUIRE(b.estimate.has_value());
  CHECK(b.estimate->exact);
  CHECK(b.estimate->lines == 123456);

  WritePlain(d + "/log-1.tsv", "click\tuser\n" + Lines(10, 3));
  WritePlain(d + "/log-2.tsv", "click\tuser\n" + Lines(20, 4));
  JobFile delimited = WriteJob(d, Quoted(d + "/log-*.tsv"), "[]", 4, 1);
  delimited.job.mutable_data()->set_format(config::Data::DELIMITED);
  delimited.job.mutable_data()->mutable_schema()->set_header(true);
  const DataCheckResult t = Check(delimited);
  REQUIRE(t.ok());
  CHECK(t.estimate->lines == 30);
  CHECK(t.estimate->steps_per_epoch == 8);
}

TEST_CASE("a header that lacks a schema's column is an error at the field and in the file",
          "[common][data_check]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  WritePlain(d + "/train.csv", "click,user,age\n1,a,3\n");
  WriteGzip(d + "/eval.csv.gz", "click,user,user,age\n1,a,b,3\n");
  // clang-format off
  const std::string text = absl::StrCat(
      "name: \"header\"\n"
      "tables { name: \"emb\" dim: 4 }\n"
      "model { num_dense_features: 2 num_sparse_features: 1 }\n"
      "data {\n"
      "  format: DELIMITED\n"
      "  train_paths: \"", d, "/train.csv\"\n"
      "  eval_paths: \"", d, "/eval.csv.gz\"\n"
      "  schema {\n"
      "    delimiter: COMMA header: true label: \"click\"\n"
      "    dense { column: \"age\" }\n"
      "    dense { column: \"price\" }\n"
      "    sparse { column: \"user\" table: \"emb\" }\n"
      "  }\n"
      "}\n"
      "training { mode: SYNC batch_size: 1 steps: 1000 }\n"
      "cluster { num_servers: 1 num_workers: 1 }\n");
  // clang-format on
  JobFile f;
  f.path = d + "/job.pbtxt";
  WritePlain(f.path, text);
  absl::StatusOr<config::Job> job = ParseJob(text, f.path);
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  f.job = *job;
  const DataCheckResult r = Check(f);
  REQUIRE(r.errors.size() == 3);
  CHECK(r.errors[0] == absl::StrCat(f.path, ":11:5: data.schema.dense[1].column: ", d,
                                    "/train.csv:1:1: the header has no column \"price\" (its "
                                    "columns: click, user, age)"));
  CHECK(absl::StartsWith(r.errors[1], absl::StrCat(f.path, ":11:5: data.schema.dense[1].column: ",
                                                   d, "/eval.csv.gz:1:1: the header has no")));
  CHECK(r.errors[2] == absl::StrCat(f.path, ":12:5: data.schema.sparse[0].column: ", d,
                                    "/eval.csv.gz:1:12: the header names column \"user\" twice "
                                    "(columns 2 and 3) (its columns: click, user, user, age)"));
}

}  // namespace
}  // namespace ps

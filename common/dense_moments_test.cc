#include "common/dense_moments.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_config.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

std::unique_ptr<testing::ScopedTempDir> NewDir() {
  auto dir = testing::ScopedTempDir::Create("dense_moments");
  REQUIRE(dir.ok());
  return std::move(*dir);
}

void WritePlain(const std::string& path, const std::string& text) {
  REQUIRE(testing::WriteFile(path, text).ok());
}

void WriteGzip(const std::string& path, const std::string& text) {
  REQUIRE(testing::WriteGzipFile(path, text).ok());
}

// A job over `train` (a glob or path) with a comma-delimited schema: the label, "age"
// (STANDARDIZE, moments as `age_moments` says), "price" (LOG1P) and "user".
config::Job JobOn(const std::string& train, bool header, const std::string& age_moments) {
  const std::string age = header ? "age" : "3";
  const std::string text = absl::StrCat(
      "name: \"m\"\n"
      "tables { name: \"emb\" dim: 4 }\n"
      "model { shared_table: \"emb\" }\n"
      "data {\n"
      "  format: DELIMITED\n"
      "  train_paths: \"",
      train,
      "\"\n"
      "  schema {\n"
      "    delimiter: COMMA header: ",
      header ? "true" : "false", " label: \"1\"\n", "    dense { column: \"", age,
      "\" transform: STANDARDIZE ", age_moments, " }\n",
      "    dense { column: \"2\" transform: LOG1P }\n"
      "    sparse { column: \"4\" }\n"
      "  }\n"
      "}\n"
      "training { mode: SYNC batch_size: 2 epochs: 1 }\n"
      "cluster { num_servers: 1 num_workers: 1 }\n");
  absl::StatusOr<config::Job> job = ParseJob(text, "job.pbtxt");
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  return *job;
}

TEST_CASE("the moments of a STANDARDIZE column are those of its values, empty ones as 0",
          "[common][dense_moments]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  const bool header = GENERATE(false, true);
  CAPTURE(header);
  // age: 10, 20, (empty: 0), 30, and in the second (gzip) file 40, 20; a line with a bad number
  // and one with too few columns are skipped.
  const std::string head = header ? "click,price,age,user\n" : "";
  WritePlain(d + "/a.csv", head + "1,5,10,u\n0,6,20,v\n0,7,,w\n1,3,x,u\n1,8,30,v\n");
  WriteGzip(d + "/b.csv.gz", head + "0,1,40,u\n1,2\n0,3,20,u");
  config::Job job = JobOn(d + "/*.csv*", header, "");
  REQUIRE(NeedsDenseMoments(job));
  DenseMomentsReport report;
  const absl::Status filled = FillDenseMoments(&job, {}, &report);
  INFO(filled.ToString());
  REQUIRE(filled.ok());
  const std::vector<double> values = {10, 20, 0, 30, 40, 20};
  double mean = 0, var = 0;
  for (double v : values) mean += v / values.size();
  for (double v : values) var += (v - mean) * (v - mean) / values.size();
  const config::DenseColumn& age = job.data().schema().dense(0);
  CHECK(age.mean() == Approx(mean).epsilon(1e-6));
  CHECK(age.stddev() == Approx(std::sqrt(var)).epsilon(1e-6));
  CHECK_FALSE(job.data().schema().dense(1).has_mean());  // LOG1P: untouched
  CHECK(report.lines_read == 8);
  CHECK(report.lines_skipped == 2);
  REQUIRE(report.lines.size() == 1);
  CHECK(report.lines[0] == absl::StrCat("data.schema.dense[0] (", header ? "age" : "3",
                                        "): STANDARDIZE mean 20 stddev 12.9099, from 6 lines"));
  // Filled in, the job needs nothing more and validates as one written with its moments.
  CHECK_FALSE(NeedsDenseMoments(job));
  CHECK(ValidateJob(job).ok());
}

TEST_CASE("moments come from the first max_lines lines only", "[common][dense_moments]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  std::string text;
  for (int i = 0; i < 100; ++i) absl::StrAppend(&text, "1,1,", i < 10 ? i : 1000, ",u\n");
  WritePlain(d + "/a.csv", text);
  config::Job job = JobOn(d + "/a.csv", false, "");
  DenseMomentsOptions options;
  options.max_lines = 10;
  DenseMomentsReport report;
  REQUIRE(FillDenseMoments(&job, options, &report).ok());
  CHECK(job.data().schema().dense(0).mean() == Approx(4.5));
  CHECK(report.lines_read == 10);
}

TEST_CASE("given moments are kept, and what cannot be computed is refused",
          "[common][dense_moments]") {
  const auto dir = NewDir();
  const std::string d = dir->path();
  WritePlain(d + "/flat.csv", "1,1,7,u\n0,1,7,v\n");
  WritePlain(d + "/words.csv", "1,1,x,u\n0,1,y,v\n");
  WritePlain(d + "/head.csv", "click,price,cost,user\n1,1,2,u\n");

  config::Job given = JobOn(d + "/flat.csv", false, "mean: 3 stddev: 2");
  CHECK_FALSE(NeedsDenseMoments(given));
  DenseMomentsReport report;
  REQUIRE(FillDenseMoments(&given, {}, &report).ok());
  CHECK(given.data().schema().dense(0).mean() == 3);
  CHECK(report.lines.empty());

  config::Job flat = JobOn(d + "/flat.csv", false, "");
  absl::Status s = FillDenseMoments(&flat, {}, &report);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message() ==
        "data.schema.dense[0] (3): STANDARDIZE without moments, and the column's 2 values have "
        "no spread (stddev 0) to divide by: give mean and stddev in the job");

  config::Job words = JobOn(d + "/words.csv", false, "");
  s = FillDenseMoments(&words, {}, &report);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message() ==
        "data.schema.dense[0] (3): STANDARDIZE without moments, and no line of the training data "
        "has a number in the column to compute them from");

  config::Job headless = JobOn(d + "/head.csv", true, "");
  s = FillDenseMoments(&headless, {}, &report);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message() == d + "/head.csv:1: the header has no column \"age\"");

  config::Job missing = JobOn(d + "/none.csv", false, "");
  CHECK(FillDenseMoments(&missing, {}, &report).code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps

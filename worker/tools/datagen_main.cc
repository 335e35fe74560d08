// ps_datagen: writes synthetic training and held-out data in Criteo's text format, drawn from a
// known teacher model (worker/data/synthetic.h describes the model and why its defaults).
//
//   ps_datagen --out=train.tsv --heldout_out=heldout.tsv [--rows=1000000] [--heldout_rows=100000]
//              [--seed=1] [--num_dense=13] [--num_sparse=26] [--long_tail]
//              [--cardinalities=10000 (100000000 with --long_tail)]
//              [--zipf=1.1 (1.05 with --long_tail)] [--teacher_scale=0.2] [--dense_scale=0.25]
//              [--positive_rate=0.3]
//
// With --job=JOB.pbtxt (a DELIMITED job with a data.schema) it writes data of that schema instead,
// labelled by a teacher of the job's own model family (worker/tools/teacher_data.h); then
// --cardinalities is one number (default 1000), --teacher_scale is the standard deviation of the
// teacher's embedding weights (default 0.5), --logit_scale that of its logit (default 1.5), and
// --num_dense, --num_sparse, --long_tail and --dense_scale are refused.
//
// Prints one JSON line:
//   {"rows":N,"heldout_rows":M,"teacher_auc":A,"teacher_logloss":L,"positive_rate":P}
// where teacher_auc and teacher_logloss are those of the teacher's true probabilities on the
// held-out file (on the training file when --heldout_rows=0) and positive_rate is the training
// file's fraction of positive labels. With --long_tail the line ends instead with
//   ...,"positive_rate":P,"expected_distinct_per_field":[D1,...,Dnum_sparse]}
// each D the expected number of distinct values of that field in the training file (rounded; from
// the distribution, not counted). The output depends only on the flags. Exit status: 0 on
// success, 1 when a file cannot be written, 2 for bad flags.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/job_config.h"
#include "worker/data/synthetic.h"
#include "worker/tools/teacher_data.h"

ABSL_FLAG(int64_t, rows, 1000000, "training rows to write to --out");
ABSL_FLAG(int64_t, heldout_rows, 100000, "held-out rows to write to --heldout_out");
ABSL_FLAG(std::string, out, "", "the training file to write (required)");
ABSL_FLAG(std::string, heldout_out, "", "the held-out file (required when --heldout_rows > 0)");
ABSL_FLAG(uint64_t, seed, 1, "seeds the distributions, the teacher and the samples");
ABSL_FLAG(int, num_dense, 13, "integer features per sample");
ABSL_FLAG(int, num_sparse, 26, "categorical fields per sample");
ABSL_FLAG(bool, long_tail, false,
          "long-tail ids: Zipf over up to 2^40 values per field, drawn without tables and written "
          "as 16 hex digits, so that most ids are rare as in a click log");
ABSL_FLAG(std::optional<std::string>, cardinalities, std::nullopt,
          "distinct values per field: one number for all fields or a comma-separated list with "
          "one per field; default 10000, or 100000000 with --long_tail");
ABSL_FLAG(std::optional<double>, zipf, std::nullopt,
          "Zipf exponent of the categorical values' distribution (>= 0); default 1.1, or 1.05 "
          "with --long_tail");
ABSL_FLAG(double, teacher_scale, 0.2, "standard deviation of the teacher's categorical weights");
ABSL_FLAG(double, dense_scale, 0.25, "standard deviation of the teacher's dense weights");
ABSL_FLAG(double, positive_rate, 0.3, "the teacher's mean probability of a positive label");
ABSL_FLAG(std::string, job, "",
          "a job with a data.schema: write data of its schema, labelled by a teacher of its model");
ABSL_FLAG(double, logit_scale, 1.5, "--job: the standard deviation of the teacher's logit");

namespace ps {
namespace worker {
namespace {

// The defaults that differ in long-tail mode: a click log's skew over 10^8 values a field.
constexpr double kDefaultZipf = 1.1;
constexpr double kLongTailZipf = 1.05;
constexpr const char* kDefaultCardinalities = "10000";
constexpr const char* kLongTailCardinalities = "100000000";

// ps_datagen --job: data of the job's schema from a teacher of its model family.
int JobMain(const std::string& job_path) {
  if (absl::GetFlag(FLAGS_num_dense) != 13 || absl::GetFlag(FLAGS_num_sparse) != 26 ||
      absl::GetFlag(FLAGS_long_tail) || absl::GetFlag(FLAGS_dense_scale) != 0.25) {
    std::fprintf(stderr,
                 "ps_datagen: --num_dense, --num_sparse, --long_tail and --dense_scale are not "
                 "settings of "
                 "--job data (the schema and the teacher's model decide)\n");
    return 2;
  }
  absl::StatusOr<config::Job> job = LoadJobFile(job_path);
  if (!job.ok()) {
    std::fprintf(stderr, "ps_datagen: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  TeacherDataOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.positive_rate = absl::GetFlag(FLAGS_positive_rate);
  options.logit_scale = absl::GetFlag(FLAGS_logit_scale);
  if (absl::GetFlag(FLAGS_teacher_scale) != 0.2) {
    options.emb_scale = absl::GetFlag(FLAGS_teacher_scale);
  }
  options.zipf = absl::GetFlag(FLAGS_zipf).value_or(options.zipf);
  if (absl::GetFlag(FLAGS_cardinalities).has_value() &&
      !absl::SimpleAtoi(*absl::GetFlag(FLAGS_cardinalities), &options.cardinality)) {
    std::fprintf(stderr, "ps_datagen: --cardinalities: one number with --job\n");
    return 2;
  }
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int64_t heldout_rows = absl::GetFlag(FLAGS_heldout_rows);
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string heldout_out = absl::GetFlag(FLAGS_heldout_out);
  if (out.empty() || (heldout_rows > 0 && heldout_out.empty()) || rows < 0 || heldout_rows < 0) {
    std::fprintf(stderr,
                 "ps_datagen: --out is required, --heldout_out too when --heldout_rows > 0, and "
                 "both counts must be >= 0\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<TeacherData>> data = TeacherData::Create(*job, options);
  if (!data.ok()) {
    std::fprintf(stderr, "ps_datagen: %s\n", data.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<TeacherFileStats> train = (*data)->Write(TeacherData::kTrainStream, rows, out);
  if (!train.ok()) {
    std::fprintf(stderr, "ps_datagen: %s\n", train.status().ToString().c_str());
    return 1;
  }
  TeacherFileStats heldout = *train;
  if (heldout_rows > 0) {
    absl::StatusOr<TeacherFileStats> written =
        (*data)->Write(TeacherData::kHeldoutStream, heldout_rows, heldout_out);
    if (!written.ok()) {
      std::fprintf(stderr, "ps_datagen: %s\n", written.status().ToString().c_str());
      return 1;
    }
    heldout = *written;
  }
  std::printf(
      "{\"rows\":%lld,\"heldout_rows\":%lld,\"teacher_auc\":%.6f,\"teacher_logloss\":%.6f,"
      "\"positive_rate\":%.6f,\"family\":\"%s\"}\n",
      static_cast<long long>(rows), static_cast<long long>(heldout_rows), heldout.teacher_auc,
      heldout.teacher_logloss,
      rows > 0 ? static_cast<double>(train->positives) / static_cast<double>(rows) : 0.0,
      config::Model::Type_Name(job->model().type()).c_str());
  return 0;
}

int Main() {
  if (!absl::GetFlag(FLAGS_job).empty()) return JobMain(absl::GetFlag(FLAGS_job));
  SyntheticOptions options;
  options.num_dense = absl::GetFlag(FLAGS_num_dense);
  options.num_sparse = absl::GetFlag(FLAGS_num_sparse);
  options.long_tail = absl::GetFlag(FLAGS_long_tail);
  options.zipf =
      absl::GetFlag(FLAGS_zipf).value_or(options.long_tail ? kLongTailZipf : kDefaultZipf);
  options.teacher_scale = absl::GetFlag(FLAGS_teacher_scale);
  options.dense_scale = absl::GetFlag(FLAGS_dense_scale);
  options.positive_rate = absl::GetFlag(FLAGS_positive_rate);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.cardinalities.clear();
  const std::string cardinalities =
      absl::GetFlag(FLAGS_cardinalities)
          .value_or(options.long_tail ? kLongTailCardinalities : kDefaultCardinalities);
  for (const absl::string_view part : absl::StrSplit(cardinalities, ',')) {
    int64_t c = 0;
    if (!absl::SimpleAtoi(part, &c)) {
      std::fprintf(stderr, "ps_datagen: --cardinalities: bad number \"%s\"\n",
                   std::string(part).c_str());
      return 2;
    }
    options.cardinalities.push_back(c);
  }
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int64_t heldout_rows = absl::GetFlag(FLAGS_heldout_rows);
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string heldout_out = absl::GetFlag(FLAGS_heldout_out);
  if (out.empty()) {
    std::fprintf(stderr, "ps_datagen: --out is required\n");
    return 2;
  }
  if (heldout_rows > 0 && heldout_out.empty()) {
    std::fprintf(stderr, "ps_datagen: --heldout_out is required when --heldout_rows > 0\n");
    return 2;
  }
  if (rows < 0 || heldout_rows < 0) {
    std::fprintf(stderr, "ps_datagen: --rows and --heldout_rows must be >= 0\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<SyntheticData>> data = SyntheticData::Create(options);
  if (!data.ok()) {
    std::fprintf(stderr, "ps_datagen: %s\n", data.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<SyntheticFileStats> train = WriteSyntheticFile(
      **data, SyntheticData::kTrainStream, rows, out, /*exact_auc=*/heldout_rows == 0);
  if (!train.ok()) {
    std::fprintf(stderr, "ps_datagen: %s\n", train.status().ToString().c_str());
    return 1;
  }
  SyntheticFileStats heldout = *train;
  if (heldout_rows > 0) {
    absl::StatusOr<SyntheticFileStats> written = WriteSyntheticFile(
        **data, SyntheticData::kHeldoutStream, heldout_rows, heldout_out, /*exact_auc=*/true);
    if (!written.ok()) {
      std::fprintf(stderr, "ps_datagen: %s\n", written.status().ToString().c_str());
      return 1;
    }
    heldout = *written;
  }
  const double positive_rate =
      rows > 0 ? static_cast<double>(train->positives) / static_cast<double>(rows) : 0.0;
  std::string line = absl::StrFormat(
      "{\"rows\":%d,\"heldout_rows\":%d,\"teacher_auc\":%.6f,\"teacher_logloss\":%.6f,"
      "\"positive_rate\":%.6f",
      rows, heldout_rows, heldout.teacher_auc, heldout.teacher_logloss, positive_rate);
  if (options.long_tail) {
    line += ",\"expected_distinct_per_field\":[";
    for (int f = 0; f < options.num_sparse; ++f) {
      absl::StrAppendFormat(&line, "%s%.0f", f > 0 ? "," : "",
                            std::round((*data)->ExpectedDistinct(f, rows)));
    }
    line += "]";
  }
  line += "}\n";
  std::fputs(line.c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace worker
}  // namespace ps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "writes synthetic Criteo-format data from a known teacher model; see datagen_main.cc");
  absl::ParseCommandLine(argc, argv);
  return ps::worker::Main();
}

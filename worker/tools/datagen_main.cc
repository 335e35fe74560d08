// ps_datagen: writes synthetic training and held-out data in Criteo's text format, drawn from a
// known teacher model (worker/data/synthetic.h describes the model and why its defaults).
//
//   ps_datagen --out=train.tsv --heldout_out=heldout.tsv [--rows=1000000] [--heldout_rows=100000]
//              [--seed=1] [--num_dense=13] [--num_sparse=26] [--cardinalities=10000]
//              [--zipf=1.1] [--teacher_scale=0.2] [--dense_scale=0.25] [--positive_rate=0.3]
//
// Prints one JSON line:
//   {"rows":N,"heldout_rows":M,"teacher_auc":A,"teacher_logloss":L,"positive_rate":P}
// where teacher_auc and teacher_logloss are those of the teacher's true probabilities on the
// held-out file (on the training file when --heldout_rows=0) and positive_rate is the training
// file's fraction of positive labels. The output depends only on the flags. Exit status: 0 on
// success, 1 when a file cannot be written, 2 for bad flags.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "worker/data/synthetic.h"

ABSL_FLAG(int64_t, rows, 1000000, "training rows to write to --out");
ABSL_FLAG(int64_t, heldout_rows, 100000, "held-out rows to write to --heldout_out");
ABSL_FLAG(std::string, out, "", "the training file to write (required)");
ABSL_FLAG(std::string, heldout_out, "", "the held-out file (required when --heldout_rows > 0)");
ABSL_FLAG(uint64_t, seed, 1, "seeds the distributions, the teacher and the samples");
ABSL_FLAG(int, num_dense, 13, "integer features per sample");
ABSL_FLAG(int, num_sparse, 26, "categorical fields per sample");
ABSL_FLAG(std::string, cardinalities, "10000",
          "distinct values per field: one number for all fields or a comma-separated list with "
          "one per field");
ABSL_FLAG(double, zipf, 1.1, "Zipf exponent of the categorical values' distribution (>= 0)");
ABSL_FLAG(double, teacher_scale, 0.2, "standard deviation of the teacher's categorical weights");
ABSL_FLAG(double, dense_scale, 0.25, "standard deviation of the teacher's dense weights");
ABSL_FLAG(double, positive_rate, 0.3, "the teacher's mean probability of a positive label");

namespace ps {
namespace worker {
namespace {

int Main() {
  SyntheticOptions options;
  options.num_dense = absl::GetFlag(FLAGS_num_dense);
  options.num_sparse = absl::GetFlag(FLAGS_num_sparse);
  options.zipf = absl::GetFlag(FLAGS_zipf);
  options.teacher_scale = absl::GetFlag(FLAGS_teacher_scale);
  options.dense_scale = absl::GetFlag(FLAGS_dense_scale);
  options.positive_rate = absl::GetFlag(FLAGS_positive_rate);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.cardinalities.clear();
  for (const absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_cardinalities), ',')) {
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
  absl::PrintF(
      "{\"rows\":%d,\"heldout_rows\":%d,\"teacher_auc\":%.6f,\"teacher_logloss\":%.6f,"
      "\"positive_rate\":%.6f}\n",
      rows, heldout_rows, heldout.teacher_auc, heldout.teacher_logloss, positive_rate);
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

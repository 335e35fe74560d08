// parse_bench: what the binary training format (worker/data/binary_format.h) saves a worker over
// Criteo text. Writes --rows synthetic Criteo lines (worker/data/synthetic.h, seed 1, 13 integer
// and 26 categorical features, plain text), converts them with ps_ctl convert's code
// (worker/data/binary_convert.h), then prints one JSON line per measurement:
//
//  - "convert": the conversion's seconds and samples per second (parse, write, read back whole).
//  - "parse" (format "text" and "binary"): one thread reading every sample in batches of --batch,
//    the files in the page cache: CriteoReader::Next for text, BinaryReader::Read for binary; the
//    best of --repeats passes (parse_samples_per_s).
//  - "parse_ratio": parse_ratio_binary_vs_text, binary's samples per second over text's (the
//    issue's target: >= 10).
//  - "read_bytes_per_worker" (format "text" and "binary", workers 1, 2 and 4): one epoch of steps
//    of --batch_size samples per worker through BatchReader, every worker reading its share of
//    every block as the trainer does; the mean and largest BatchReader::read_bytes() over the
//    workers, counted after CountBlocks() (which reads text through once more), and the data's
//    bytes on disk.
//
//   bazel run -c opt //tests/bench:parse_bench -- --rows=1000000
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "tests/testing/json_line.h"
#include "tests/testing/temp_dir.h"
#include "worker/batch_reader.h"
#include "worker/data/binary_convert.h"
#include "worker/data/binary_format.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/synthetic.h"

ABSL_FLAG(int64_t, rows, 1000000, "synthetic Criteo lines written and read");
ABSL_FLAG(int, batch, 4096, "samples per read when measuring parse speed");
ABSL_FLAG(int, repeats, 3, "passes per format when measuring parse speed (the best counts)");
ABSL_FLAG(int, chunk_samples, 65536, "samples per chunk of the binary file");
ABSL_FLAG(int, batch_size, 256, "read_bytes_per_worker: samples per worker per step");

namespace ps {
namespace {

using worker::Batch;

std::string Num(double x) { return testing::JsonNumber(x); }

void Die(const absl::Status& status, const char* what) {
  std::fprintf(stderr, "parse_bench: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

// Seconds of the best of `repeats` calls of `pass`, which returns the samples it read.
double BestSeconds(int repeats, int64_t rows, const std::function<int64_t()>& pass) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const absl::Time start = absl::Now();
    const int64_t read = pass();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (read != rows) {
      std::fprintf(stderr, "parse_bench: a pass read %lld samples, not %lld\n",
                   static_cast<long long>(read), static_cast<long long>(rows));
      std::exit(1);
    }
    best = std::min(best, seconds);
  }
  return best;
}

// One epoch of steps for each of `world` workers; prints the JSON line.
void ReadBytesPerWorker(const char* format, const config::Job& job, int world, int64_t data_bytes) {
  const int batch_size = absl::GetFlag(FLAGS_batch_size);
  const worker::SchemaOptions schema{13, 26};
  int64_t sum = 0, largest = 0, steps = 0;
  for (int rank = 0; rank < world; ++rank) {
    auto reader = worker::BatchReader::Open(job, schema, rank, world, batch_size, nullptr);
    if (!reader.ok()) Die(reader.status(), "BatchReader::Open");
    const absl::StatusOr<int64_t> blocks = (*reader)->CountBlocks();
    if (!blocks.ok()) Die(blocks.status(), "CountBlocks");
    steps = *blocks;
    const int64_t before = (*reader)->read_bytes();
    Batch batch;
    for (int64_t step = 0; step < steps; ++step) {
      const absl::Status status = (*reader)->Next(&batch);
      if (!status.ok()) Die(status, "BatchReader::Next");
    }
    const int64_t bytes = (*reader)->read_bytes() - before;
    sum += bytes;
    largest = std::max(largest, bytes);
  }
  std::printf(
      "{\"bench\":\"read_bytes_per_worker\",\"format\":\"%s\",\"workers\":%d,\"batch_size\":%d,"
      "\"steps\":%lld,\"read_bytes_per_worker\":%lld,\"max_read_bytes\":%lld,"
      "\"data_bytes\":%lld,\"fraction_of_data\":%s}\n",
      format, world, batch_size, static_cast<long long>(steps), static_cast<long long>(sum / world),
      static_cast<long long>(largest), static_cast<long long>(data_bytes),
      Num(double(sum) / world / data_bytes).c_str());
  std::fflush(stdout);
}

int Main() {
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int batch = absl::GetFlag(FLAGS_batch);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  auto scratch = testing::UseScopedTempDir("parse_bench");
  if (!scratch.ok()) Die(scratch.status(), "temporary folder");
  const std::string text = (*scratch)->path() + "/train.tsv";
  const std::string binary = (*scratch)->path() + "/train.bin";

  auto synthetic = worker::SyntheticData::Create({});
  if (!synthetic.ok()) Die(synthetic.status(), "SyntheticData");
  const auto written = worker::WriteSyntheticFile(**synthetic, worker::SyntheticData::kTrainStream,
                                                  rows, text, /*exact_auc=*/false);
  if (!written.ok()) Die(written.status(), "WriteSyntheticFile");

  const worker::SchemaOptions schema{13, 26};
  const absl::Time convert_start = absl::Now();
  const auto converted =
      worker::ConvertToBinary({text}, schema, binary, absl::GetFlag(FLAGS_chunk_samples));
  if (!converted.ok()) Die(converted.status(), "ConvertToBinary");
  const double convert_seconds = absl::ToDoubleSeconds(absl::Now() - convert_start);
  std::printf(
      "{\"bench\":\"convert\",\"rows\":%lld,\"text_bytes\":%lld,\"binary_bytes\":%lld,"
      "\"chunks\":%lld,\"seconds\":%s,\"samples_per_s\":%s}\n",
      static_cast<long long>(rows), static_cast<long long>(converted->input_bytes),
      static_cast<long long>(converted->bytes), static_cast<long long>(converted->chunks),
      Num(convert_seconds).c_str(), Num(rows / convert_seconds).c_str());

  Batch out;
  const double text_seconds = BestSeconds(repeats, rows, [&]() -> int64_t {
    auto reader = worker::CriteoReader::Open({text}, 0, 1, schema);
    if (!reader.ok()) Die(reader.status(), "CriteoReader::Open");
    int64_t read = 0;
    while (true) {
      const absl::StatusOr<int> n = (*reader)->Next(batch, &out);
      if (!n.ok()) Die(n.status(), "CriteoReader::Next");
      if (*n == 0) return read;
      read += *n;
    }
  });
  const double binary_seconds = BestSeconds(repeats, rows, [&]() -> int64_t {
    auto reader = worker::BinaryReader::Open({binary}, worker::BinarySchema::Of(schema));
    if (!reader.ok()) Die(reader.status(), "BinaryReader::Open");
    int64_t read = 0;
    while (read < rows) {
      const int64_t n = std::min<int64_t>(batch, rows - read);
      const absl::Status status = (*reader)->Read(read, n, &out);
      if (!status.ok()) Die(status, "BinaryReader::Read");
      read += n;
    }
    return read;
  });
  for (const auto& [format, seconds, bytes] :
       {std::make_tuple("text", text_seconds, converted->input_bytes),
        std::make_tuple("binary", binary_seconds, converted->bytes)}) {
    std::printf(
        "{\"bench\":\"parse\",\"format\":\"%s\",\"rows\":%lld,\"batch\":%d,\"threads\":1,"
        "\"seconds\":%s,\"parse_samples_per_s\":%s,\"file_bytes\":%lld}\n",
        format, static_cast<long long>(rows), batch, Num(seconds).c_str(),
        Num(rows / seconds).c_str(), static_cast<long long>(bytes));
  }
  const double ratio = text_seconds / binary_seconds;
  std::printf(
      "{\"bench\":\"parse_ratio\",\"parse_ratio_binary_vs_text\":%s,\"target\":10,"
      "\"meets_target\":%s}\n",
      Num(ratio).c_str(), ratio >= 10 ? "true" : "false");
  std::fflush(stdout);

  config::Job text_job, binary_job;
  text_job.mutable_data()->add_train_paths(text);
  binary_job.mutable_data()->add_train_paths(binary);
  binary_job.mutable_data()->set_format(config::Data::BINARY);
  for (int world : {1, 2, 4}) {
    ReadBytesPerWorker("binary", binary_job, world, converted->bytes);
    ReadBytesPerWorker("text", text_job, world, converted->input_bytes);
  }
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ps::Main();
}

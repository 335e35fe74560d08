#include "worker/data/binary_convert.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/data_paths.h"
#include "common/status_macros.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/schema.h"

namespace ps {
namespace worker {
namespace {

// Samples parsed per read: large enough that the writer's appends cost little.
constexpr int kReadSamples = 8192;

}  // namespace

absl::StatusOr<ConvertedFile> ConvertToBinary(const std::vector<std::string>& inputs,
                                              const SchemaOptions& schema, const std::string& out,
                                              int chunk_samples) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                      CriteoReader::Open(inputs, 0, 1, schema));
  BinaryWriterOptions options;
  options.chunk_samples = chunk_samples;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<BinaryWriter> writer,
                      BinaryWriter::Open(out, BinarySchema::Of(schema), options));
  Batch batch;
  while (true) {
    PS_ASSIGN_OR_RETURN(const int n, reader->Next(kReadSamples, &batch));
    if (n == 0) break;
    PS_RETURN_IF_ERROR(writer->Append(batch));
  }
  PS_ASSIGN_OR_RETURN(const BinaryWriteSummary written, writer->Close());
  // Read back what was written, every byte of it.
  BinaryReaderOptions verify;
  verify.verify = BinaryReaderOptions::Verify::kFull;
  absl::StatusOr<std::unique_ptr<BinaryReader>> check =
      BinaryReader::Open({out}, BinarySchema::Of(schema), verify);
  if (check.ok() && (*check)->samples() != written.samples) {
    check = absl::DataLossError(absl::StrCat(out, ": reads back ", (*check)->samples(),
                                             " samples, ", written.samples, " were written"));
  }
  if (!check.ok()) {
    ::unlink(out.c_str());
    return check.status();
  }
  ConvertedFile file;
  file.path = out;
  file.samples = written.samples;
  file.skipped_lines = reader->skipped_lines();
  file.skip_reports = reader->skip_reports();
  file.bytes = written.bytes;
  file.chunks = written.chunks;
  PS_ASSIGN_OR_RETURN(const std::vector<std::string> expanded, ExpandDataPaths(inputs));
  file.input_files = static_cast<int64_t>(expanded.size());
  for (const std::string& path : expanded) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) file.input_bytes += st.st_size;
  }
  return file;
}

absl::StatusOr<ConvertSummary> ConvertJobData(const config::Job& job,
                                              const ConvertOptions& options) {
  if (job.data().format() == config::Data::BINARY) {
    return absl::InvalidArgumentError(
        "the job's data.format is BINARY: its files are converted already");
  }
  PS_ASSIGN_OR_RETURN(const SchemaOptions schema, SchemaOf(job));
  if (job.data().train_paths_size() == 0) {
    return absl::InvalidArgumentError("the job has no data.train_paths to convert");
  }
  if (options.out_dir.empty()) return absl::InvalidArgumentError("no output folder given");
  if (::mkdir(options.out_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    const std::string message =
        absl::StrCat("cannot create ", options.out_dir, ": ", std::strerror(errno));
    if (errno == ENOENT) return absl::NotFoundError(message);
    if (errno == EACCES) return absl::PermissionDeniedError(message);
    return absl::UnavailableError(message);
  }
  ConvertSummary summary;
  const std::vector<std::string> train(job.data().train_paths().begin(),
                                       job.data().train_paths().end());
  PS_ASSIGN_OR_RETURN(summary.train, ConvertToBinary(train, schema, options.out_dir + "/train.bin",
                                                     options.chunk_samples));
  if (job.data().eval_paths_size() > 0) {
    const std::vector<std::string> eval(job.data().eval_paths().begin(),
                                        job.data().eval_paths().end());
    PS_ASSIGN_OR_RETURN(summary.eval, ConvertToBinary(eval, schema, options.out_dir + "/eval.bin",
                                                      options.chunk_samples));
  }
  return summary;
}

}  // namespace worker
}  // namespace ps

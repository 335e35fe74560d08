// Converting a job's text data (Criteo format, later the job's delimited schema) into the binary
// training format (binary_format.h): what `ps_ctl convert` does.
#ifndef PS_WORKER_DATA_BINARY_CONVERT_H_
#define PS_WORKER_DATA_BINARY_CONVERT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/data/binary_format.h"

namespace ps {
namespace worker {

// What converting one list of text files gave.
struct ConvertedFile {
  std::string path;                       // the binary file written
  int64_t samples = 0;                    // written: the lines that parsed
  int64_t skipped_lines = 0;              // malformed lines, left out
  std::vector<std::string> skip_reports;  // the first of them, "path:line: reason"
  int64_t input_files = 0;                // text files read (globs expanded)
  int64_t input_bytes = 0;                // their sizes, as stored (compressed)
  int64_t bytes = 0;                      // the binary file's size
  int64_t chunks = 0;
};

// Reads `inputs` (files or globs, plain or gzip) with `schema` and writes their samples, in
// order, to the binary file `out` with chunks of `chunk_samples`, then reads it back whole
// (every chunk's checksum). Malformed lines are skipped and counted. Errors:
// CriteoReader::Open's and Next's (NOT_FOUND for a missing input, DATA_LOSS for a corrupt gzip
// file, ...), BinaryWriter's (INVALID_ARGUMENT for chunk_samples out of range, ...), and
// BinaryReader::Open's for the file written; `out` is then not written.
absl::StatusOr<ConvertedFile> ConvertToBinary(const std::vector<std::string>& inputs,
                                              const SchemaOptions& schema, const std::string& out,
                                              int chunk_samples);

struct ConvertOptions {
  // The folder to write into (created if missing, not its parents). Required.
  std::string out_dir;
  // Samples per chunk of the files written, 1 to BinaryFormat::kMaxChunkSamples. Default 65536.
  int chunk_samples = BinaryFormat::kMaxChunkSamples;
};

struct ConvertSummary {
  ConvertedFile train;                // <out_dir>/train.bin, from data.train_paths
  std::optional<ConvertedFile> eval;  // <out_dir>/eval.bin, from data.eval_paths if any
};

// Converts the job's data.train_paths and data.eval_paths (CRITEO or DELIMITED text), each into
// one file, with the job's schema (schema.h's SchemaOf). Errors: INVALID_ARGUMENT for a BINARY
// job (its files are converted already); SchemaOf's; INVALID_ARGUMENT when the job has no
// train_paths or out_dir is empty; NOT_FOUND, PERMISSION_DENIED or UNAVAILABLE when out_dir cannot
// be created; ConvertToBinary's.
absl::StatusOr<ConvertSummary> ConvertJobData(const config::Job& job,
                                              const ConvertOptions& options);

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DATA_BINARY_CONVERT_H_

// Reading Criteo-format training data (plain or gzip text files), striped across workers by rank
// or split block by block into ranges (NextBlock).
//
// A line is tab-separated: the label (0 or 1), `num_dense` integer features, then `num_sparse`
// categorical features written as hex strings. Any feature may be empty. Lines end in "\n" or
// "\r\n"; the last line of a file may lack its newline.
//
// Fields are numbered from 1 as `cut -f` counts them: the label is field 1, integer feature I<d>
// (d = 1..num_dense) is field d + 1, and categorical feature C<c> (c = 1..num_sparse) is field
// num_dense + 1 + c. Error reports use these numbers and add the feature's name.
//
// Transformations (part of the model's contract; criteo_reader_test.cc pins them):
//   - integer x  ->  log(1 + x) for x > 0, and 0 for x <= 0 or an empty field;
//   - categorical value v of the field with 0-based index f  ->
//       CriteoKey(f, v) = XXH3_64bits_withSeed(v's bytes, v's length, f + 1)  (xxHash 0.8).
//     The bytes are hashed as written (no case folding, no leading-zero stripping); an empty value
//     hashes the empty string, which gives every field its own "missing" key.
#ifndef PS_WORKER_DATA_CRITEO_READER_H_
#define PS_WORKER_DATA_CRITEO_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/batch.h"
#include "xxhash.h"

namespace ps {
namespace worker {

// The key of categorical value `value` (its hex text as written) in field `field` (0-based among
// the categorical fields).
inline uint64_t CriteoKey(int field, absl::string_view value) {
  return XXH3_64bits_withSeed(value.data(), value.size(), static_cast<uint64_t>(field) + 1);
}

// Parses one line (without its "\n"; a trailing "\r" is allowed) into one sample: `*label`,
// `dense[0, num_dense)` and `keys[0, num_sparse)`. Returns OK, or INVALID_ARGUMENT with the reason
// alone (no path or line), one of:
//   "empty line"
//   "expected 40 fields, got 39"
//   "label must be 0 or 1, got 2"
//   "bad integer \"x1\" in field 3 (I2)"       (optional '-', then decimal digits, within int64)
//   "bad hex \"zz\" in field 17 (C3)"          (characters 0-9, a-f, A-F)
// Values in reasons are C-escaped and cut to 32 characters. On error the outputs are unspecified.
absl::Status ParseCriteoLine(absl::string_view line, const SchemaOptions& schema, float* label,
                             float* dense, uint64_t* keys);

// Where one file's columns are, for a delimited-text schema: the 0-based index of the label's
// column, then each dense column's, then each sparse field's (TextSchema's order), and how many
// columns a line must have.
struct ColumnMap {
  std::vector<int> index;
  int exact_columns = -1;  // > 0: exactly this many (a header's count)
  int min_columns = 0;     // otherwise at least this many
};

// The column map of `schema` for a file whose header line is `header` (delimited as the data;
// ignored without schema.header). INVALID_ARGUMENT when a column named by the schema is not in the
// header, is there twice, or lies beyond the header's columns, its message the byte column of the
// header where it is (HeaderColumns::Find) and the reason, for the caller to prefix with
// "path:1:": `12: the header names column "user" twice (columns 3 and 5) (sparse field user)`.
absl::StatusOr<ColumnMap> MapColumns(const TextSchema& schema, absl::string_view header);

// Parses one line of delimited text (without its "\n"; a trailing "\r" is allowed) into one
// sample: `*label`, `dense[0, schema.dense.size())`, and the keys of each sparse field appended
// to `*keys` with the end of each field's keys appended to `*offsets`. `scratch` is workspace.
// Returns OK, or INVALID_ARGUMENT with the reason alone, one of:
//   "empty line"
//   "expected 7 columns, got 6"  /  "expected at least 7 columns, got 6"
//   "label must be 0 or 1, got \"2\" in column 1"
//   "bad number \"x1\" in column 3 (price)"   (a decimal or scientific float, finite)
//   "column 9 (tags) has more than 64 values"  (a field with overflow SKIP)
// On error the outputs are unspecified: the caller truncates keys and offsets back.
absl::Status ParseDelimitedLine(absl::string_view line, const TextSchema& schema,
                                const ColumnMap& map, std::vector<absl::string_view>* scratch,
                                float* label, float* dense, std::vector<uint64_t>* keys,
                                std::vector<uint32_t>* offsets);

// A CriteoReader reads the samples of one worker from a list of Criteo-format files, or of
// delimited text files as schema.text describes (SchemaOptions). Sample i of the input (the lines
// of all files, in order, without their header lines) belongs to rank i % world_size.
//
// Striping is by physical line, before parsing: every line counts, malformed ones included, so
// ranks never need to agree on which lines parse, each rank reads (decompresses) every file but
// parses only its own lines, and each malformed line is reported by exactly one rank.
//
// A malformed line is skipped, counted and (the first kMaxSkipReports of them) reported as
// "path:line: reason" (line numbers from 1 within each file); it never ends the read. A line
// longer than kMaxLineBytes is malformed too. Plain and gzip files are told apart by their first
// two bytes (1f 8b); concatenated gzip members are read as one stream.
//
// Thread-compatible.
class CriteoReader {
 public:
  // Malformed lines reported in skip_reports(); the rest are only counted.
  static constexpr int kMaxSkipReports = 20;
  // The longest line accepted, in bytes, without its "\n".
  static constexpr size_t kMaxLineBytes = 1 << 20;
  // The largest batch Next() accepts.
  static constexpr int kMaxBatchSamples = 1 << 24;

  // Returns a reader of the samples of `rank` among `world_size` workers in `paths`, positioned
  // at the first sample. A path may be a shell-style glob, read as the files it matches in order
  // (common/data_paths.h). Every file is opened and its format detected now. Errors:
  //   INVALID_ARGUMENT: `paths` is empty, world_size < 1, rank outside [0, world_size), a
  //     negative count in `schema`, a path that is a directory or empty, or (schema.text with a
  //     header) a first file whose header disagrees with the schema, as "path:1: reason" (a later
  //     file's is returned by Next when the reader reaches it);
  //   NOT_FOUND: a file does not exist, or a glob matches none (the message names it);
  //   PERMISSION_DENIED or UNAVAILABLE: a file cannot be opened or read for another reason.
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(std::vector<std::string> paths,
                                                            int rank, int world_size,
                                                            SchemaOptions schema = {});

  ~CriteoReader();
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  // Reads up to `max_samples` of this rank's next samples into `*batch`, which is resized to
  // exactly the number read (batch->size). Returns that number: max_samples unless the data ends,
  // and 0 (with batch->size == 0) once every file is exhausted. Errors:
  //   INVALID_ARGUMENT: max_samples outside [1, kMaxBatchSamples], or a null batch; nothing is
  //     read;
  //   DATA_LOSS: a gzip file is corrupt or truncated; UNAVAILABLE: a read failed. The message
  //     starts with "path:line: ". Samples read before the error in the same call are returned
  //     first, and the error comes on the next call; the reader then keeps returning it until
  //     Rewind(). The rows of the bad file past the error are never returned.
  absl::StatusOr<int> Next(int max_samples, Batch* batch);

  // Reads the next block of `block_lines` of this rank's lines (fewer at the end of the data) and
  // parses lines [begin, begin + count) of it into `*batch` (resized to the samples parsed:
  // malformed lines are skipped and reported as by Next(); lines outside the range are neither
  // parsed nor reported). Workers that read the same lines split each block by their ranges, as
  // the trainer does with balanced batches. Returns the lines the block had (0, with
  // batch->size == 0, once the data is exhausted). Errors:
  //   INVALID_ARGUMENT: a null batch, block_lines < 1, or not 0 <= begin <= begin + count <=
  //     block_lines with count <= kMaxBatchSamples; nothing is read;
  //   DATA_LOSS, UNAVAILABLE: as Next(), returned by the call after the block they ended.
  absl::StatusOr<int64_t> NextBlock(int64_t block_lines, int64_t begin, int64_t count,
                                    Batch* batch);

  // Starts again from the first sample (for the next epoch), clears a pending error and resets
  // skipped_lines() and skip_reports(). Returns OK, or the error Open() would give if the first
  // file can no longer be opened; Next() then returns that error too, until a Rewind() succeeds.
  absl::Status Rewind();

  // Malformed lines of this rank skipped since Open() or the last Rewind().
  int64_t skipped_lines() const { return skipped_lines_; }

  // The first kMaxSkipReports of them, as "path:line: reason", in input order.
  std::vector<std::string> skip_reports() const { return skip_reports_; }

  const SchemaOptions& schema() const { return schema_; }

 private:
  class LineReader;

  CriteoReader(std::vector<std::string> paths, int rank, int world_size, SchemaOptions schema);

  // Reads up to `max_lines` of this rank's lines, parsing those at indexes [parse_begin,
  // parse_end) among them into `*batch`, which holds up to max_samples; with stop_when_full it
  // stops once the batch is full. Returns the lines read (0 with an error pending: the error).
  absl::StatusOr<int64_t> ReadLines(int64_t max_lines, int max_samples, int64_t parse_begin,
                                    int64_t parse_end, bool stop_when_full, Batch* batch);

  // Opens paths_[file_index_] into line_reader_.
  absl::Status OpenCurrentFile();
  void RecordSkip(int64_t line_number, absl::string_view reason);

  // Constant after construction.
  const std::vector<std::string> paths_;
  const int rank_;
  const int world_size_;
  const SchemaOptions schema_;
  // schema_.text's column map of the current file, and the split workspace.
  ColumnMap columns_;
  std::vector<absl::string_view> scratch_;

  // Read position.
  size_t file_index_ = 0;                    // paths_.size() once exhausted
  std::unique_ptr<LineReader> line_reader_;  // of paths_[file_index_]; null before it is opened
  int64_t global_line_ = 0;                  // lines of all files before the next one
  absl::Status pending_error_;               // returned by Next() until Rewind()

  int64_t skipped_lines_ = 0;
  std::vector<std::string> skip_reports_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DATA_CRITEO_READER_H_

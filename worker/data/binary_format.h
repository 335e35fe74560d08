// The binary training format that `ps_ctl convert` writes and the worker reads through mmap
// (format BINARY): samples already parsed, transformed and hashed, in chunks that a reader
// indexes by sample number, so that a worker reads exactly the samples of its share, touching
// only their bytes. worker/data/README.md gives the layout byte by byte.
//
// A file is a header (magic "PSBIN\0\0\0", version 1, the counts and names of the dense and
// sparse fields, which sparse fields are multi-valued, the sample count, an XXH3 of the header),
// chunks of up to chunk_samples samples (labels, dense, offsets and keys arrays, 64-byte
// aligned; no offsets when every field is single-valued), and a footer: an index of the chunks
// (offset, samples, keys, XXH3 of the chunk's bytes) and a trailer (index offset, chunk count,
// XXH3 of the index, magic "PSBINEND").
// Little-endian, fixed widths.
#ifndef PS_WORKER_DATA_BINARY_FORMAT_H_
#define PS_WORKER_DATA_BINARY_FORMAT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/batch.h"

namespace ps {
namespace worker {

// What a binary file holds per sample: the fields' counts, names and kinds.
struct BinarySchema {
  // Dense features per sample (>= 0) and their names (empty, or exactly num_dense names).
  int num_dense = 0;
  std::vector<std::string> dense_names;
  // Sparse fields per sample (>= 0), their names (empty, or exactly num_sparse names) and which
  // are multi-valued (empty: none; else num_sparse flags). A single-valued field has exactly one
  // key in every sample.
  int num_sparse = 0;
  std::vector<std::string> sparse_names;
  std::vector<bool> multi_valued;

  // The names that Criteo's text format gives (I1..I<d>, C1..C<s>), or a TextSchema's names and
  // kinds when `schema.text` is set.
  static BinarySchema Of(const SchemaOptions& schema);

  // Whether a sparse field is multi-valued (a file then has an offsets array per chunk).
  bool AnyMultiValued() const;
};

bool operator==(const BinarySchema& a, const BinarySchema& b);
inline bool operator!=(const BinarySchema& a, const BinarySchema& b) { return !(a == b); }

// The format's fixed numbers (README.md's layout).
struct BinaryFormat {
  static constexpr uint32_t kVersion = 1;
  // Every chunk, the footer and the header's end are aligned to this many bytes.
  static constexpr uint64_t kAlign = 64;
  // The most samples a chunk holds.
  static constexpr int kMaxChunkSamples = 1 << 16;
  // The most fields of a kind (dense or sparse) and the longest field name.
  static constexpr int kMaxFields = 1 << 16;
  static constexpr size_t kMaxNameBytes = 1024;
  // The most samples one BinaryReader::Read() returns (CriteoReader::kMaxBatchSamples).
  static constexpr int64_t kMaxReadSamples = 1 << 24;
};

// The outcome of writing one file.
struct BinaryWriteSummary {
  int64_t samples = 0;
  int64_t chunks = 0;
  int64_t bytes = 0;  // of the file, header to trailer
};

struct BinaryWriterOptions {
  // Samples per chunk (a reader's unit of checksumming), 1 to BinaryFormat::kMaxChunkSamples.
  // Default 65536. A chunk also ends early when its keys would pass 2^32 - 1.
  int chunk_samples = BinaryFormat::kMaxChunkSamples;
};

// A BinaryWriter writes one binary file from batches. The file appears at its path only when
// Close() succeeds (it is written as "<path>.tmp" and renamed); a writer destroyed unclosed
// removes its temporary file. Thread-compatible.
class BinaryWriter {
 public:
  // Creates "<path>.tmp" for samples of `schema`. Errors:
  //   INVALID_ARGUMENT: a negative or too large count in `schema`, names or flags whose number
  //     is neither 0 nor the count, a name longer than kMaxNameBytes, or chunk_samples outside
  //     [1, kMaxChunkSamples];
  //   NOT_FOUND, PERMISSION_DENIED, UNAVAILABLE: the file cannot be created (the message names
  //     it).
  static absl::StatusOr<std::unique_ptr<BinaryWriter>> Open(const std::string& path,
                                                            BinarySchema schema,
                                                            BinaryWriterOptions options = {});

  ~BinaryWriter();
  BinaryWriter(const BinaryWriter&) = delete;
  BinaryWriter& operator=(const BinaryWriter&) = delete;

  // Appends the batch's samples (whole chunks are written as they fill). Errors:
  //   INVALID_ARGUMENT: the batch's arrays do not have the sizes batch.h gives for the schema,
  //     its offsets do not start at 0 or decrease, or a single-valued field of a sample has not
  //     exactly one key; nothing of the batch is appended, and the writer stays usable;
  //   FAILED_PRECONDITION: the writer is closed;
  //   UNAVAILABLE or RESOURCE_EXHAUSTED: a write failed; the writer is then unusable (every
  //     later call returns this error, and Close() removes the temporary file).
  absl::Status Append(const Batch& batch);

  // Writes the last chunk and the footer, completes the header, syncs the file to disk and
  // renames it to the path. Returns what was written. Errors: an earlier error of Append(),
  // FAILED_PRECONDITION when already closed, UNAVAILABLE or RESOURCE_EXHAUSTED when a write,
  // sync or the rename failed (the temporary file is removed).
  absl::StatusOr<BinaryWriteSummary> Close();

  // Samples appended so far.
  int64_t samples() const { return samples_; }

 private:
  struct ChunkEntry;

  BinaryWriter(std::string path, int fd, BinarySchema schema, std::vector<char> header,
               BinaryWriterOptions options);

  // Writes the pending samples as one chunk.
  absl::Status FlushChunk();
  absl::Status WriteAll(const void* data, size_t bytes);
  void Fail(absl::Status status);

  // Constant after construction.
  const std::string path_;
  const std::string tmp_path_;
  const BinarySchema schema_;
  const BinaryWriterOptions options_;

  int fd_;                    // -1 once closed
  std::vector<char> header_;  // rewritten at Close() with the sample count
  uint64_t file_offset_ = 0;
  int64_t samples_ = 0;
  absl::Status error_;
  std::vector<ChunkEntry> index_;

  // The chunk being filled.
  int chunk_samples_ = 0;
  std::vector<float> labels_;
  std::vector<float> dense_;
  std::vector<uint32_t> offsets_;  // relative to the chunk, starting with 0
  std::vector<uint64_t> keys_;
};

struct BinaryReaderOptions {
  // What Open() checks. kStructure: each file's header, footer and index (their checksums, and
  // that every chunk lies where the index says, inside the file): a truncated file or damage to
  // those is refused; damage inside a chunk's arrays is found only where Read() checks offsets.
  // kFull: also every chunk's checksum, reading every byte once (for `ps_ctl convert` and
  // checks of whole files). Default kStructure: a worker reads only its share.
  enum class Verify { kStructure, kFull };
  Verify verify = Verify::kStructure;
};

// A BinaryReader reads samples by number from a sequence of binary files (one sequence: the
// samples of the first file, then the second's, ...), through read-only memory maps.
// Thread-compatible (Read() updates the count of bytes read).
class BinaryReader {
 public:
  // Maps the files `paths` names (each a file or a shell-style glob, common/data_paths.h), and
  // checks them as options.verify says and against `expected` (only its counts when its names
  // and flags are empty). Errors, each naming the file:
  //   INVALID_ARGUMENT: `paths` is empty; a file that is not of this format (no magic), of
  //     another version, or whose schema differs from `expected` or from the first file's;
  //   DATA_LOSS: a file truncated or damaged (a checksum or the structure disagrees: the message
  //     names the chunk where one is at fault);
  //   NOT_FOUND: a file does not exist or a glob matches none;
  //   PERMISSION_DENIED, UNAVAILABLE: a file cannot be opened or mapped.
  static absl::StatusOr<std::unique_ptr<BinaryReader>> Open(const std::vector<std::string>& paths,
                                                            const BinarySchema& expected,
                                                            BinaryReaderOptions options = {});

  ~BinaryReader();
  BinaryReader(const BinaryReader&) = delete;
  BinaryReader& operator=(const BinaryReader&) = delete;

  // Samples in all files.
  int64_t samples() const { return total_samples_; }
  const BinarySchema& schema() const { return schema_; }
  // The files read, globs expanded, in order.
  std::vector<std::string> paths() const;

  // Sets `*batch` to samples [begin, begin + count) of the sequence, exactly as CriteoReader
  // would parse their lines (batch->size == count; offsets from 0). Errors (`*batch` is then
  // unspecified):
  //   INVALID_ARGUMENT: a null batch, or not 0 <= begin <= begin + count <= samples(), or count
  //     > BinaryFormat::kMaxReadSamples;
  //   DATA_LOSS: a chunk's offsets are out of order or past its keys (a damaged chunk; the
  //     message names the file and chunk).
  absl::Status Read(int64_t begin, int64_t count, Batch* batch);

  // Bytes of the files' arrays that Read() copied since Open().
  int64_t read_bytes() const { return read_bytes_; }

 private:
  struct File;

  BinaryReader(std::vector<std::unique_ptr<File>> files, BinarySchema schema);

  // Appends samples [begin, begin + count) of chunk `chunk` of `file` to `*batch`, whose first
  // `row` rows are filled.
  absl::Status ReadChunk(const File& file, size_t chunk, int64_t begin, int64_t count, int64_t row,
                         Batch* batch);

  // Constant after construction.
  const std::vector<std::unique_ptr<File>> files_;
  const BinarySchema schema_;
  std::vector<int64_t> file_starts_;  // the first sample of each file, then the total
  int64_t total_samples_ = 0;

  int64_t read_bytes_ = 0;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DATA_BINARY_FORMAT_H_

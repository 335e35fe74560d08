#include "common/data_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/data_paths.h"
#include "common/job_config.h"
#include "common/schema_columns.h"
#include "common/text_lines.h"

namespace ps {
namespace {

// Bytes asked of a file per read.
constexpr unsigned kChunkBytes = 64 << 10;

// What reading the start (or all) of one file found.
struct Scan {
  bool gzip = false;
  int64_t size = 0;    // bytes on disk
  int64_t lines = 0;   // lines seen (at least the lines asked for, unless the file ended)
  int64_t data = 0;    // bytes of text read (uncompressed)
  int64_t raw = 0;     // bytes of the file consumed for them
  bool ended = false;  // the file was read to its end: `lines` are all of its lines
};

// Reads `file` until `max_lines` lines were seen (-1: to its end). The reason alone when it is not
// a readable file.
absl::StatusOr<Scan> ScanFile(const std::string& file, int64_t max_lines) {
  struct stat st;
  if (stat(file.c_str(), &st) != 0) return absl::NotFoundError(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return absl::InvalidArgumentError("it is a folder, not a file");
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::PermissionDeniedError(std::strerror(errno));
  Scan scan;
  scan.size = static_cast<int64_t>(st.st_size);
  // A binary training file (worker/data/README.md, "Layout, byte by byte") says how many samples
  // it holds: its header's u64 at offset 24, after the magic "PSBIN\0\0\0". The reader checks
  // the rest of the file.
  unsigned char header[32] = {0};
  if (pread(fd, header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header)) &&
      std::memcmp(header, "PSBIN\0\0\0", 8) == 0) {
    close(fd);
    uint64_t samples = 0;
    for (int b = 7; b >= 0; --b) samples = samples << 8 | header[24 + b];  // little-endian
    scan.lines = static_cast<int64_t>(samples);
    scan.data = scan.raw = scan.size;
    scan.ended = true;
    return scan;
  }
  unsigned char magic[2] = {0, 0};
  scan.gzip = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  gzFile in = gzdopen(fd, "rb");  // reads plain files as they are
  if (in == nullptr) {
    close(fd);
    return absl::ResourceExhaustedError("out of memory");
  }
  // zlib's own input buffer stays at its default (8 kB): gzoffset() then tells the bytes of the
  // file behind the text read to within it, which a larger one would blur.
  std::vector<char> buffer(kChunkBytes);
  char last = '\n';
  while (max_lines < 0 || scan.lines < max_lines) {
    const int n = gzread(in, buffer.data(), kChunkBytes);
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(in, &code);
      const std::string reason =
          code == Z_ERRNO ? std::strerror(errno) : absl::StrCat("corrupt gzip data: ", message);
      gzclose(in);
      return absl::DataLossError(reason);
    }
    if (n == 0) {
      scan.ended = true;
      break;
    }
    scan.data += n;
    scan.lines += std::count(buffer.data(), buffer.data() + n, '\n');
    last = buffer[n - 1];
  }
  if (scan.ended && last != '\n') ++scan.lines;  // the last line may lack its newline
  scan.raw = gzoffset(in);
  gzclose(in);
  return scan;
}

// The first line of `file` (plain or gzip), without its newline, read up to kChunkBytes.

std::string Bytes(int64_t bytes) {
  if (bytes >= 1000000000) return absl::StrFormat("%.1f GB", bytes / 1e9);
  if (bytes >= 1000000) return absl::StrFormat("%.1f MB", bytes / 1e6);
  if (bytes >= 1000) return absl::StrFormat("%.1f kB", bytes / 1e3);
  return absl::StrCat(bytes, " bytes");
}

int64_t CeilDiv(int64_t a, int64_t b) { return b <= 0 ? 0 : (a + b - 1) / b; }

// Messages of one check: where each field was written, and where relative paths are taken from.
class Reporter {
 public:
  explicit Reporter(const DataCheckOptions& options) : options_(options) {
    if (!options.job_path.empty()) {
      std::ifstream in(options.job_path, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      if (in) text_ = text.str();
    }
    char cwd[4096];
    cwd_ = getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : "?";
  }

  // "job.pbtxt:23:3" (or "job.pbtxt", or "job").
  std::string Where(absl::string_view field, int index = -1) const {
    if (options_.job_path.empty()) return "job";
    return JobFieldPosition(text_, options_.job_path, field, index);
  }

  // "data.train_paths[0]: cannot read "x" (relative to /d, the current directory of ps_ctl): ...".
  std::string FileError(absl::string_view field, int index, const std::string& pattern,
                        const std::string& file, absl::string_view reason) const {
    std::string what = absl::StrCat("cannot read \"", file, "\"");
    if (file != pattern) absl::StrAppend(&what, " (from \"", pattern, "\")");
    return absl::StrCat(Where(field, index), ": ", field, "[", index, "]: ", what, RelativeTo(file),
                        ": ", reason);
  }

  std::string GlobError(absl::string_view field, int index, const std::string& pattern,
                        absl::string_view reason) const {
    return absl::StrCat(Where(field, index), ": ", field, "[", index, "]: ", reason,
                        RelativeTo(pattern));
  }

 private:
  std::string RelativeTo(const std::string& path) const {
    if (!path.empty() && path[0] == '/') return "";
    return absl::StrCat(" (relative to ", cwd_, ", the current directory of ", options_.checker,
                        ")");
  }

  const DataCheckOptions& options_;
  std::string text_;
  std::string cwd_;
};

// The files of `field` (train_paths or eval_paths), each with the index of its path, or the
// errors of the paths that name none.
struct NamedFile {
  int index;
  std::string pattern;
  std::string file;
};

std::vector<NamedFile> FilesOf(const Reporter& reporter, absl::string_view field,
                               const google::protobuf::RepeatedPtrField<std::string>& paths,
                               std::vector<std::string>* errors) {
  std::vector<NamedFile> files;
  for (int i = 0; i < paths.size(); ++i) {
    absl::StatusOr<std::vector<std::string>> matched = ExpandDataPath(paths.Get(i));
    if (!matched.ok()) {
      errors->push_back(reporter.GlobError(field, i, paths.Get(i), matched.status().message()));
      continue;
    }
    for (std::string& file : *matched) files.push_back(NamedFile{i, paths.Get(i), std::move(file)});
  }
  return files;
}

// For a delimited schema with a header: that every column the schema reads is in `file`'s header
// line once. One error per column that is not, with the schema's field and the file's position:
//   job.pbtxt:48:3: data.schema.dense[0].column: data/train.tsv:1:1: the header has no column
//   "price" (its columns: click, dwell, age)
// Columns the job's validation refuses are left to it.
void CheckHeader(const Reporter& reporter, const config::Schema& schema, const std::string& file,
                 std::vector<std::string>* errors) {
  const absl::StatusOr<std::string> line = FirstLine(file);
  if (!line.ok()) return;  // ScanFile reported it
  const HeaderColumns header(*line, DelimiterOf(schema));
  const auto check = [&](absl::string_view field, int index, const std::string& text) {
    const absl::StatusOr<ColumnRef> ref = ParseColumnRef(text, true);
    if (!ref.ok()) return;
    int byte_column = 1;
    const absl::StatusOr<int> found = header.Find(*ref, &byte_column);
    if (found.ok()) return;
    errors->push_back(absl::StrCat(reporter.Where(field, index), ": ", field,
                                   index >= 0 ? absl::StrCat("[", index, "].column") : "", ": ",
                                   file, ":1:", byte_column, ": ", found.status().message(),
                                   " (its columns: ", header.Describe(), ")"));
  };
  check("data.schema.label", -1, schema.label());
  for (int i = 0; i < schema.dense_size(); ++i) {
    check("data.schema.dense", i, schema.dense(i).column());
  }
  for (int i = 0; i < schema.sparse_size(); ++i) {
    check("data.schema.sparse", i, schema.sparse(i).column());
  }
}

// The warning for a job of fewer than min_steps steps, with what to change.
std::string ShortJobWarning(const Reporter& reporter, const StepsEstimate& e, int64_t min_steps) {
  const std::string lines = absl::StrCat(e.exact ? "" : "about ", e.lines, " lines");
  const std::string advice = absl::StrCat("fewer than ", min_steps, " steps rarely trains well: ");
  if (e.epochs == 0) {  // training.steps
    return absl::StrCat(reporter.Where("training.steps"), ": ", e.total_steps,
                        " steps in all (training.steps; an epoch of the data, ", lines, " / (",
                        e.batch_size, " x ", e.workers, " workers), is ", e.steps_per_epoch,
                        " steps); ", advice, "raise training.steps");
  }
  std::string text =
      absl::StrCat(reporter.Where("training.batch_size"), ": ", e.exact ? "" : "about ",
                   e.total_steps, " steps in all (", lines, " / (", e.batch_size, " x ", e.workers,
                   " workers) x ", e.epochs, e.epochs == 1 ? " epoch" : " epochs", "); ", advice);
  // The largest power of two below the batch that makes enough steps, if any.
  int64_t batch = 1;
  while (batch * 2 < e.batch_size) batch *= 2;
  for (; batch >= 1; batch /= 2) {
    if (batch < e.batch_size && CeilDiv(e.lines, batch * e.workers) * e.epochs >= min_steps) break;
  }
  const int64_t epochs = CeilDiv(min_steps, std::max<int64_t>(1, e.steps_per_epoch));
  const std::string more_epochs = absl::StrCat("raise training.epochs (e.g. ", epochs, " gives ~",
                                               epochs * e.steps_per_epoch, " steps)");
  if (batch >= 1) {
    absl::StrAppend(&text, "lower training.batch_size (e.g. ", batch, " gives ~",
                    CeilDiv(e.lines, batch * e.workers) * e.epochs, " steps) or ", more_epochs);
  } else {
    absl::StrAppend(&text, more_epochs);
  }
  return text;
}

}  // namespace

std::string StepsEstimate::Describe() const {
  std::string text = absl::StrCat(exact ? "" : "about ", lines, " lines (",
                                  exact ? "counted" : "estimated from the first lines",
                                  gzip && !exact ? "; gzip: from their compression" : "", ") in ",
                                  files, files == 1 ? " file" : " files", " of ", Bytes(bytes),
                                  ": ", steps_per_epoch, " steps an epoch (", lines, " lines / (",
                                  batch_size, " x ", workers, " workers)), ");
  if (epochs == 0) {
    absl::StrAppend(&text, total_steps, " steps in all (training.steps)");
  } else {
    absl::StrAppend(&text, total_steps, " steps in all (", epochs,
                    epochs == 1 ? " epoch)" : " epochs)");
  }
  return text;
}

DataCheckResult CheckJobData(const config::Job& job, const DataCheckOptions& options) {
  DataCheckResult result;
  const Reporter reporter(options);
  const config::Data& data = job.data();
  const std::vector<NamedFile> train =
      FilesOf(reporter, "data.train_paths", data.train_paths(), &result.errors);
  const std::vector<NamedFile> eval =
      FilesOf(reporter, "data.eval_paths", data.eval_paths(), &result.errors);

  // Read whole when small; else the first file's first lines give the bytes per line of the plain
  // files, each gzip file's first lines its own lines per byte, and the other files are only
  // opened and read from.
  int64_t total_bytes = 0;
  for (const NamedFile& f : train) {
    struct stat st;
    if (stat(f.file.c_str(), &st) == 0) total_bytes += static_cast<int64_t>(st.st_size);
  }
  const bool whole = total_bytes <= options.count_bytes;
  const int64_t sample = std::max<int64_t>(1, options.sample_lines);
  std::vector<Scan> scans;
  bool readable = result.errors.empty();
  for (size_t i = 0; i < train.size(); ++i) {
    const NamedFile& f = train[i];
    absl::StatusOr<Scan> scan = ScanFile(f.file, whole ? -1 : i == 0 ? sample : 1);
    if (scan.ok() && !scan->ended && scan->gzip && i > 0) scan = ScanFile(f.file, sample);
    if (!scan.ok()) {
      result.errors.push_back(reporter.FileError("data.train_paths", f.index, f.pattern, f.file,
                                                 scan.status().message()));
      readable = false;
      continue;
    }
    scans.push_back(*scan);
  }
  const bool header = data.format() == config::Data::DELIMITED && data.schema().header();
  if (header) {
    for (size_t i = 0; i < scans.size() && readable; ++i) {
      CheckHeader(reporter, data.schema(), train[i].file, &result.errors);
    }
  }
  for (const NamedFile& f : eval) {
    const absl::StatusOr<Scan> scan = ScanFile(f.file, 1);
    if (!scan.ok()) {
      result.errors.push_back(reporter.FileError("data.eval_paths", f.index, f.pattern, f.file,
                                                 scan.status().message()));
    } else if (header) {
      CheckHeader(reporter, data.schema(), f.file, &result.errors);
    }
  }
  if (train.empty() || !readable) return result;

  StepsEstimate e;
  e.files = static_cast<int>(scans.size());
  e.exact = true;
  // The plain files' text bytes per line: the first file's that has lines.
  double bytes_per_line = 0;
  for (const Scan& s : scans) {
    if (s.lines > 0 && s.data > 0) {
      bytes_per_line = static_cast<double>(s.data) / s.lines;
      break;
    }
  }
  // A delimited schema with a header: every file's first line is not a sample.
  const int64_t header_lines = header ? 1 : 0;
  for (const Scan& s : scans) {
    e.bytes += s.size;
    e.gzip = e.gzip || s.gzip;
    e.lines -= std::min(header_lines, s.lines);
    if (s.ended) {
      e.lines += s.lines;
      continue;
    }
    e.exact = false;
    if (s.gzip) {  // this file's own lines per byte of the file
      e.lines +=
          s.raw > 0 ? static_cast<int64_t>(static_cast<double>(s.size) * s.lines / s.raw) : s.lines;
    } else if (bytes_per_line > 0) {
      e.lines += static_cast<int64_t>(s.size / bytes_per_line);
    }
  }
  if (e.lines == 0) {
    result.errors.push_back(absl::StrCat(reporter.Where("data.train_paths", 0),
                                         ": data.train_paths: the training files hold no line (",
                                         e.files, e.files == 1 ? " file, " : " files, ",
                                         Bytes(e.bytes), "): there is nothing to train on"));
    return result;
  }
  const config::Training& tr = job.training();
  e.batch_size = tr.batch_size();
  e.workers = job.cluster().num_workers();
  e.steps_per_epoch = CeilDiv(e.lines, e.batch_size * e.workers);
  if (tr.steps() > 0) {
    e.epochs = 0;
    e.total_steps = static_cast<int64_t>(tr.steps());
  } else {
    e.epochs = std::max<int64_t>(1, tr.epochs());
    e.total_steps = e.steps_per_epoch * e.epochs;
  }
  if (options.min_steps > 0 && e.total_steps < options.min_steps) {
    result.warnings.push_back(ShortJobWarning(reporter, e, options.min_steps));
  }
  result.estimate = e;
  return result;
}

}  // namespace ps

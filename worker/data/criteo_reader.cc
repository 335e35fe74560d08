#include "worker/data/criteo_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/data_paths.h"
#include "common/status_macros.h"

namespace ps {
namespace worker {

namespace {

// Bytes asked of a source per read.
constexpr size_t kChunkBytes = 256 << 10;
// Values quoted in error reasons are cut to this many characters.
constexpr size_t kMaxQuotedChars = 32;

// The status for a failed system call on `path`, after its errno.
absl::Status ErrnoStatus(int err, absl::string_view path, absl::string_view what) {
  const std::string message = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnavailableError(message);
  }
}

// `value` C-escaped and cut to kMaxQuotedChars, for error reasons.
std::string Shown(absl::string_view value) {
  if (value.size() <= kMaxQuotedChars) return absl::CHexEscape(value);
  return absl::StrCat(absl::CHexEscape(value.substr(0, kMaxQuotedChars)), "...");
}

// Strict decimal int64: an optional '-', then at least one digit, no spaces, within range.
bool ParseInt64(absl::string_view text, int64_t* out) {
  if (text.empty()) return false;
  const bool negative = text[0] == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty()) return false;
  const uint64_t limit =
      negative ? uint64_t{1} << 63 : static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (limit - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = negative ? static_cast<int64_t>(0 - value) : static_cast<int64_t>(value);
  return true;
}

// 1 for the bytes that are not hex digits.
struct NotHexTable {
  uint8_t bad[256];
  constexpr NotHexTable() : bad() {
    for (int c = 0; c < 256; ++c) {
      const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      bad[c] = hex ? 0 : 1;
    }
  }
};
constexpr NotHexTable kNotHex;

bool IsHex(absl::string_view text) {
  uint8_t bad = 0;  // no early exit: fields are short and valid ones the rule
  for (const char c : text) bad |= kNotHex.bad[static_cast<uint8_t>(c)];
  return bad == 0;
}

// log(1 + x) as float for small x, the common case, computed once (the same expression as for
// large x, so the result does not depend on the path).
constexpr int kLogTableSize = 4096;
const float* LogTable() {
  static const float* const table = [] {
    float* t = new float[kLogTableSize];
    for (int x = 0; x < kLogTableSize; ++x) t[x] = static_cast<float>(std::log1p(double{1.0} * x));
    return t;
  }();
  return table;
}

inline float Log1pOfPositive(int64_t x, const float* table) {
  return x < kLogTableSize ? table[x] : static_cast<float>(std::log1p(static_cast<double>(x)));
}

}  // namespace

absl::Status ParseCriteoLine(absl::string_view line, const SchemaOptions& schema, float* label,
                             float* dense, uint64_t* keys) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return absl::InvalidArgumentError("empty line");
  const int expected = 1 + schema.num_dense + schema.num_sparse;
  // One pass that parses as it splits. A wrong field count is reported before a bad value, so
  // value errors check the count first.
  const auto count_error = [&]() -> absl::Status {
    const int64_t fields = 1 + std::count(line.begin(), line.end(), '\t');
    if (fields == expected) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("expected ", expected, " fields, got ", fields));
  };
  const auto value_error = [&](std::string reason) -> absl::Status {
    absl::Status status = count_error();
    return status.ok() ? absl::InvalidArgumentError(std::move(reason)) : status;
  };
  const char* p = line.data();
  const char* const end = line.data() + line.size();
  bool more = true;  // whether a field starts at p
  const auto next_field = [&p, &more, end]() {
    const char* q = p;
    while (q < end && *q != '\t') ++q;
    const absl::string_view field(p, q - p);
    more = q < end;
    p = more ? q + 1 : end;
    return field;
  };

  const absl::string_view label_text = next_field();
  if (label_text == "0" || label_text == "1") {
    *label = label_text[0] == '1' ? 1.0f : 0.0f;
  } else {
    return value_error(absl::StrCat("label must be 0 or 1, got ",
                                    label_text.empty() ? "\"\"" : Shown(label_text)));
  }
  const float* const log_table = LogTable();
  for (int d = 0; d < schema.num_dense; ++d) {
    if (!more) return count_error();
    const absl::string_view text = next_field();
    int64_t x = 0;
    if (!text.empty() && !ParseInt64(text, &x)) {
      return value_error(
          absl::StrCat("bad integer \"", Shown(text), "\" in field ", d + 2, " (I", d + 1, ")"));
    }
    dense[d] = x > 0 ? Log1pOfPositive(x, log_table) : 0.0f;
  }
  for (int c = 0; c < schema.num_sparse; ++c) {
    if (!more) return count_error();
    const absl::string_view text = next_field();
    if (!IsHex(text)) {
      return value_error(absl::StrCat("bad hex \"", Shown(text), "\" in field ",
                                      schema.num_dense + 2 + c, " (C", c + 1, ")"));
    }
    keys[c] = CriteoKey(c, text);
  }
  if (more) return count_error();
  return absl::OkStatus();
}

namespace {

// `line`'s columns split at `delimiter` into `*out` (a trailing "\r" dropped first).
void SplitColumns(absl::string_view line, char delimiter, std::vector<absl::string_view>* out) {
  out->clear();
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const char* p = line.data();
  const char* const end = p + line.size();
  while (true) {
    const char* q = static_cast<const char*>(std::memchr(p, delimiter, end - p));
    if (q == nullptr) {
      out->emplace_back(p, end - p);
      return;
    }
    out->emplace_back(p, q - p);
    p = q + 1;
  }
}

}  // namespace

absl::StatusOr<ColumnMap> MapColumns(const TextSchema& schema, absl::string_view header) {
  ColumnMap map;
  const HeaderColumns names(schema.header ? header : absl::string_view(), schema.delimiter);
  const auto resolve = [&](const ColumnRef& ref, absl::string_view what) -> absl::StatusOr<int> {
    if (!schema.header) return ref.index;  // numbered: a line is checked for it when read
    int byte_column = 1;
    const absl::StatusOr<int> found = names.Find(ref, &byte_column);
    if (!found.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(byte_column, ": ", found.status().message(), " (", what, ")"));
    }
    return *found;
  };
  PS_ASSIGN_OR_RETURN(const int label, resolve(schema.label, "the label"));
  map.index.push_back(label);
  for (const DenseColumnSpec& d : schema.dense) {
    PS_ASSIGN_OR_RETURN(const int c, resolve(d.column, absl::StrCat("dense column ", d.name)));
    map.index.push_back(c);
  }
  for (const SparseFieldSpec& f : schema.sparse) {
    PS_ASSIGN_OR_RETURN(const int c, resolve(f.column, absl::StrCat("sparse field ", f.name)));
    map.index.push_back(c);
  }
  for (int c : map.index) map.min_columns = std::max(map.min_columns, c + 1);
  if (schema.header) map.exact_columns = names.size();
  return map;
}

absl::Status ParseDelimitedLine(absl::string_view line, const TextSchema& schema,
                                const ColumnMap& map, std::vector<absl::string_view>* scratch,
                                float* label, float* dense, std::vector<uint64_t>* keys,
                                std::vector<uint32_t>* offsets) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return absl::InvalidArgumentError("empty line");
  SplitColumns(line, schema.delimiter, scratch);
  const std::vector<absl::string_view>& cols = *scratch;
  const int got = static_cast<int>(cols.size());
  if (map.exact_columns > 0 && got != map.exact_columns) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", map.exact_columns, " columns, got ", got));
  }
  if (got < map.min_columns) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected at least ", map.min_columns, " columns, got ", got));
  }
  const absl::string_view label_text = cols[map.index[0]];
  if (label_text == "0" || label_text == "1") {
    *label = label_text[0] == '1' ? 1.0f : 0.0f;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "label must be 0 or 1, got \"", Shown(label_text), "\" in column ", map.index[0] + 1));
  }
  const size_t nd = schema.dense.size();
  for (size_t d = 0; d < nd; ++d) {
    const DenseColumnSpec& spec = schema.dense[d];
    const int c = map.index[1 + d];
    const absl::string_view text = cols[c];
    float x = 0;
    if (!text.empty() && (!absl::SimpleAtof(text, &x) || !std::isfinite(x))) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad number \"", Shown(text), "\" in column ", c + 1, " (", spec.name, ")"));
    }
    switch (spec.transform) {
      case DenseColumnSpec::Transform::kNone:
        dense[d] = x;
        break;
      case DenseColumnSpec::Transform::kLog1p:
        dense[d] = x > 0 ? static_cast<float>(std::log1p(double{x})) : 0.0f;
        break;
      case DenseColumnSpec::Transform::kStandardize:
        dense[d] = (x - spec.mean) / spec.stddev;
        break;
    }
  }
  for (size_t f = 0; f < schema.sparse.size(); ++f) {
    const SparseFieldSpec& spec = schema.sparse[f];
    const int c = map.index[1 + nd + f];
    const absl::string_view text = cols[c];
    if (spec.separator == 0) {
      keys->push_back(CriteoKey(static_cast<int>(f), text));
    } else {
      int values = 0;
      size_t start = 0;
      while (start <= text.size()) {
        size_t stop = text.find(spec.separator, start);
        if (stop == absl::string_view::npos) stop = text.size();
        if (stop > start) {
          if (values == spec.max_values) {
            if (spec.skip_overflow) {
              return absl::InvalidArgumentError(absl::StrCat("column ", c + 1, " (", spec.name,
                                                             ") has more than ", spec.max_values,
                                                             " values"));
            }
            break;
          }
          keys->push_back(CriteoKey(static_cast<int>(f), text.substr(start, stop - start)));
          ++values;
        }
        start = stop + 1;
      }
    }
    offsets->push_back(static_cast<uint32_t>(keys->size()));
  }
  return absl::OkStatus();
}

namespace {

// A file's bytes, decompressed if need be.
class Source {
 public:
  virtual ~Source() = default;
  // Reads up to `size` bytes into `buffer`; returns how many, 0 at the end. Error messages name
  // neither the file nor the line (the caller adds them).
  virtual absl::StatusOr<size_t> Read(char* buffer, size_t size) = 0;
};

class PlainSource final : public Source {
 public:
  explicit PlainSource(int fd) : fd_(fd) {}
  ~PlainSource() override { close(fd_); }

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    while (true) {
      const ssize_t n = read(fd_, buffer, size);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno != EINTR) {
        return absl::UnavailableError(absl::StrCat("read: ", std::strerror(errno)));
      }
    }
  }

 private:
  const int fd_;
};

class GzipSource final : public Source {
 public:
  explicit GzipSource(gzFile file) : file_(file) {}
  ~GzipSource() override { gzclose(file_); }

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    const int n = gzread(file_, buffer, static_cast<unsigned>(std::min<size_t>(size, 1u << 30)));
    int err = Z_OK;
    const char* message = gzerror(file_, &err);
    if (n < 0 || (err != Z_OK && err != Z_BUF_ERROR)) {
      if (err == Z_ERRNO) {
        return absl::UnavailableError(absl::StrCat("read: ", std::strerror(errno)));
      }
      return absl::DataLossError(absl::StrCat("corrupt gzip data: ", message));
    }
    // gzread() reports a stream cut short only through gzerror(), as Z_BUF_ERROR at the end.
    if (n == 0 && err == Z_BUF_ERROR) {
      return absl::DataLossError(absl::StrCat("truncated gzip data: ", message));
    }
    return static_cast<size_t>(n);
  }

 private:
  const gzFile file_;
};

// Opens `path` as a plain or gzip source, after its first two bytes.
absl::StatusOr<std::unique_ptr<Source>> OpenSource(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, path, "cannot open");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, path, "cannot stat");
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory"));
  }
  unsigned char magic[2] = {0, 0};
  ssize_t got;
  do {
    got = pread(fd, magic, sizeof(magic), 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, path, "read");
  }
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    gzFile file = gzdopen(fd, "rb");  // owns fd from here, even on failure
    if (file == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot start gzip reading"));
    }
    gzbuffer(file, kChunkBytes);
    return std::unique_ptr<Source>(new GzipSource(file));
  }
  return std::unique_ptr<Source>(new PlainSource(fd));
}

}  // namespace

// Splits a source into lines, with a buffer that grows to the longest line (up to kMaxLineBytes).
class CriteoReader::LineReader {
 public:
  LineReader(std::unique_ptr<Source> source, const std::string& path)
      : source_(std::move(source)),
        path_(path),
        buffer_(new char[kChunkBytes]),  // not zero-filled: a small file touches one page
        capacity_(kChunkBytes) {}

  // Sets `*line` to the next line, without its "\n", valid until the next call, and returns true;
  // returns false at the end of the file. A line longer than kMaxLineBytes is returned empty with
  // `*too_long` set. Errors are prefixed with "path:line: ".
  absl::StatusOr<bool> Next(absl::string_view* line, bool* too_long) {
    *too_long = false;
    size_t scan = begin_;
    while (true) {
      const char* newline =
          static_cast<const char*>(std::memchr(buffer_.get() + scan, '\n', end_ - scan));
      if (newline != nullptr) {
        const size_t stop = newline - buffer_.get();
        if (stop - begin_ > kMaxLineBytes) *too_long = true;
        *line = *too_long ? absl::string_view()
                          : absl::string_view(buffer_.get() + begin_, stop - begin_);
        begin_ = stop + 1;
        ++line_number_;
        return true;
      }
      if (eof_) {
        if (begin_ == end_ && !*too_long) return false;
        // The last line, without a newline.
        if (end_ - begin_ > kMaxLineBytes) *too_long = true;
        *line = *too_long ? absl::string_view()
                          : absl::string_view(buffer_.get() + begin_, end_ - begin_);
        begin_ = end_;
        ++line_number_;
        return true;
      }
      if (end_ - begin_ > kMaxLineBytes) {
        // Too long: drop what we have and look for the end of the line in what follows.
        *too_long = true;
        begin_ = end_ = 0;
      } else if (begin_ > 0) {
        std::memmove(buffer_.get(), buffer_.get() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
      }
      scan = end_;
      if (capacity_ - end_ < kChunkBytes) {
        std::unique_ptr<char[]> grown(new char[end_ + kChunkBytes]);
        std::memcpy(grown.get(), buffer_.get(), end_);
        buffer_ = std::move(grown);
        capacity_ = end_ + kChunkBytes;
      }
      absl::StatusOr<size_t> n = source_->Read(buffer_.get() + end_, capacity_ - end_);
      if (!n.ok()) {
        return absl::Status(n.status().code(),
                            absl::StrCat(path_, ":", line_number_ + 1, ": ", n.status().message()));
      }
      if (*n == 0) eof_ = true;
      end_ += *n;
    }
  }

  // The number (from 1) of the line last returned.
  int64_t line_number() const { return line_number_; }

 private:
  const std::unique_ptr<Source> source_;
  const std::string& path_;
  std::unique_ptr<char[]> buffer_;
  size_t capacity_;   // of buffer_
  size_t begin_ = 0;  // the unreturned bytes are buffer_[begin_, end_)
  size_t end_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(std::vector<std::string> paths,
                                                                 int rank, int world_size,
                                                                 SchemaOptions schema) {
  if (paths.empty()) return absl::InvalidArgumentError("CriteoReader: no input files");
  PS_ASSIGN_OR_RETURN(paths, ExpandDataPaths(paths));
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CriteoReader: world_size must be >= 1, got ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("CriteoReader: rank must be in [0, ", world_size, "), got ", rank));
  }
  if (schema.num_dense < 0 || schema.num_sparse < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CriteoReader: negative feature count (num_dense ", schema.num_dense,
                     ", num_sparse ", schema.num_sparse, ")"));
  }
  for (const std::string& path : paths) {
    PS_RETURN_IF_ERROR(OpenSource(path).status());
  }
  std::unique_ptr<CriteoReader> reader(
      new CriteoReader(std::move(paths), rank, world_size, schema));
  PS_RETURN_IF_ERROR(reader->OpenCurrentFile());
  return reader;
}

CriteoReader::CriteoReader(std::vector<std::string> paths, int rank, int world_size,
                           SchemaOptions schema)
    : paths_(std::move(paths)), rank_(rank), world_size_(world_size), schema_(schema) {}

CriteoReader::~CriteoReader() = default;

absl::Status CriteoReader::OpenCurrentFile() {
  line_reader_.reset();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Source> source, OpenSource(paths_[file_index_]));
  line_reader_ = std::make_unique<LineReader>(std::move(source), paths_[file_index_]);
  if (schema_.text == nullptr) return absl::OkStatus();
  absl::string_view header;
  bool too_long = false;
  if (schema_.text->header) {
    PS_ASSIGN_OR_RETURN(const bool got, line_reader_->Next(&header, &too_long));
    if (!got) header = absl::string_view();  // an empty file: no lines to read anyway
    if (too_long) {
      return absl::InvalidArgumentError(absl::StrCat(
          paths_[file_index_], ":1: the header line is longer than ", kMaxLineBytes, " bytes"));
    }
    if (!got) {
      columns_ = ColumnMap();
      return absl::OkStatus();
    }
  }
  absl::StatusOr<ColumnMap> map = MapColumns(*schema_.text, header);
  if (!map.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(paths_[file_index_], ":1:", map.status().message()));
  }
  columns_ = *std::move(map);
  return absl::OkStatus();
}

void CriteoReader::RecordSkip(int64_t line_number, absl::string_view reason) {
  ++skipped_lines_;
  if (skip_reports_.size() < static_cast<size_t>(kMaxSkipReports)) {
    skip_reports_.push_back(absl::StrCat(paths_[file_index_], ":", line_number, ": ", reason));
  }
}

absl::StatusOr<int> CriteoReader::Next(int max_samples, Batch* batch) {
  if (batch == nullptr) return absl::InvalidArgumentError("CriteoReader::Next: null batch");
  if (max_samples < 1 || max_samples > kMaxBatchSamples) {
    return absl::InvalidArgumentError(
        absl::StrCat("CriteoReader::Next: max_samples must be in [1, ", kMaxBatchSamples, "], got ",
                     max_samples));
  }
  constexpr int64_t kAll = std::numeric_limits<int64_t>::max();
  PS_RETURN_IF_ERROR(
      ReadLines(kAll, max_samples, 0, kAll, /*stop_when_full=*/true, batch).status());
  if (batch->size == 0 && !pending_error_.ok()) return pending_error_;
  return batch->size;
}

absl::StatusOr<int64_t> CriteoReader::NextBlock(int64_t block_lines, int64_t begin, int64_t count,
                                                Batch* batch) {
  if (batch == nullptr) return absl::InvalidArgumentError("CriteoReader::NextBlock: null batch");
  if (block_lines < 1 || begin < 0 || count < 0 || count > kMaxBatchSamples ||
      begin > block_lines - count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CriteoReader::NextBlock: lines [", begin, ", ", begin + count, ") of a block of ",
        block_lines,
        ": need 0 <= begin <= begin + count <= block_lines and count <= ", kMaxBatchSamples));
  }
  return ReadLines(block_lines, static_cast<int>(count), begin, begin + count,
                   /*stop_when_full=*/false, batch);
}

absl::StatusOr<int64_t> CriteoReader::ReadLines(int64_t max_lines, int max_samples,
                                                int64_t parse_begin, int64_t parse_end,
                                                bool stop_when_full, Batch* batch) {
  const size_t nd = static_cast<size_t>(schema_.num_dense);
  const size_t ns = static_cast<size_t>(schema_.num_sparse);
  const TextSchema* const text = schema_.text.get();
  batch->labels.resize(max_samples);
  batch->dense.resize(max_samples * nd);
  if (text == nullptr) {
    batch->keys.resize(max_samples * ns);
  } else {
    batch->keys.clear();
    batch->offsets.assign(1, 0);
  }

  int n = 0;
  int64_t lines = 0;  // of this rank's, read by this call
  absl::string_view line;
  bool too_long = false;
  while (lines < max_lines && pending_error_.ok() && file_index_ < paths_.size()) {
    if (stop_when_full && n == max_samples) break;
    if (line_reader_ == nullptr) {
      pending_error_ = OpenCurrentFile();
      if (!pending_error_.ok()) break;
    }
    absl::StatusOr<bool> got = line_reader_->Next(&line, &too_long);
    if (!got.ok()) {
      pending_error_ = got.status();
      break;
    }
    if (!*got) {
      line_reader_.reset();
      ++file_index_;
      continue;
    }
    if (global_line_++ % world_size_ != rank_) continue;
    const int64_t index = lines++;
    if (index < parse_begin || index >= parse_end) continue;
    if (too_long) {
      RecordSkip(line_reader_->line_number(),
                 absl::StrCat("line longer than ", kMaxLineBytes, " bytes"));
      continue;
    }
    if (text == nullptr) {
      const absl::Status parsed =
          ParseCriteoLine(line, schema_, &batch->labels[n], batch->dense.data() + n * nd,
                          batch->keys.data() + n * ns);
      if (!parsed.ok()) {
        RecordSkip(line_reader_->line_number(), parsed.message());
        continue;
      }
    } else {
      const size_t keys_before = batch->keys.size();
      const size_t offsets_before = batch->offsets.size();
      const absl::Status parsed =
          ParseDelimitedLine(line, *text, columns_, &scratch_, &batch->labels[n],
                             batch->dense.data() + n * nd, &batch->keys, &batch->offsets);
      if (!parsed.ok()) {
        batch->keys.resize(keys_before);
        batch->offsets.resize(offsets_before);
        RecordSkip(line_reader_->line_number(), parsed.message());
        continue;
      }
    }
    ++n;
  }

  batch->size = n;
  batch->labels.resize(n);
  batch->dense.resize(n * nd);
  if (text == nullptr) {
    batch->keys.resize(n * ns);
    SetSingleValuedOffsets(static_cast<int>(ns), batch);
  }
  if (lines == 0 && !pending_error_.ok()) return pending_error_;
  return lines;
}

absl::Status CriteoReader::Rewind() {
  line_reader_.reset();
  file_index_ = 0;
  global_line_ = 0;
  skipped_lines_ = 0;
  skip_reports_.clear();
  pending_error_ = OpenCurrentFile();
  return pending_error_;
}

}  // namespace worker
}  // namespace ps

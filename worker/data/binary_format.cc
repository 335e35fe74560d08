#include "worker/data/binary_format.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/data_paths.h"
#include "common/status_macros.h"
#include "xxhash.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "worker/data/binary_format.cc maps little-endian arrays as they lie: a little-endian host"
#endif

namespace ps {
namespace worker {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'B', 'I', 'N', 0, 0, 0};
constexpr char kEndMagic[8] = {'P', 'S', 'B', 'I', 'N', 'E', 'N', 'D'};
// Fixed part of the header: magic, version, header_bytes, num_dense, num_sparse, num_samples,
// chunk_samples, names_bytes, reserved.
constexpr size_t kHeaderFixedBytes = 48;
constexpr size_t kIndexEntryBytes = 32;
constexpr size_t kTrailerBytes = 32;

absl::Status Loss(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

uint64_t AlignUp(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

// Where a chunk's arrays lie, relative to its start.
struct ChunkLayout {
  uint64_t labels = 0, dense = 0, offsets = 0, keys = 0, end = 0;
};

// Files whose fields are all single-valued have no offsets array: sample r's field f has key
// r * num_sparse + f.
ChunkLayout LayoutOf(uint64_t samples, uint64_t keys, int num_dense, int num_sparse,
                     bool has_offsets) {
  ChunkLayout l;
  l.labels = 0;
  l.dense = AlignUp(l.labels + 4 * samples, 8);
  l.offsets = AlignUp(l.dense + 4 * samples * num_dense, 8);
  l.keys = has_offsets ? AlignUp(l.offsets + 4 * (samples * num_sparse + 1), 8) : l.offsets;
  l.end = l.keys + 8 * keys;
  return l;
}

template <typename T>
void Put(std::vector<char>* out, T value) {
  const char* p = reinterpret_cast<const char*>(&value);
  out->insert(out->end(), p, p + sizeof(T));
}

template <typename T>
T Get(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

absl::Status ErrnoStatus(int error, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

// Empty names and no multi-valued field read alike: as no names, no flags.
BinarySchema Normalized(BinarySchema s) {
  if (std::all_of(s.dense_names.begin(), s.dense_names.end(),
                  [](const std::string& n) { return n.empty(); })) {
    s.dense_names.clear();
  }
  if (std::all_of(s.sparse_names.begin(), s.sparse_names.end(),
                  [](const std::string& n) { return n.empty(); })) {
    s.sparse_names.clear();
  }
  if (std::none_of(s.multi_valued.begin(), s.multi_valued.end(), [](bool b) { return b; })) {
    s.multi_valued.clear();
  }
  return s;
}

std::string Describe(const BinarySchema& s) {
  return absl::StrCat(s.num_dense, " dense and ", s.num_sparse, " sparse fields");
}

absl::Status CheckSchema(const BinarySchema& s) {
  if (s.num_dense < 0 || s.num_sparse < 0 || s.num_dense > BinaryFormat::kMaxFields ||
      s.num_sparse > BinaryFormat::kMaxFields) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field counts must be in [0, ", BinaryFormat::kMaxFields, "], got ", Describe(s)));
  }
  if (!s.dense_names.empty() && s.dense_names.size() != size_t(s.num_dense)) {
    return absl::InvalidArgumentError("dense_names must be empty or one per dense feature");
  }
  if (!s.sparse_names.empty() && s.sparse_names.size() != size_t(s.num_sparse)) {
    return absl::InvalidArgumentError("sparse_names must be empty or one per sparse field");
  }
  if (!s.multi_valued.empty() && s.multi_valued.size() != size_t(s.num_sparse)) {
    return absl::InvalidArgumentError("multi_valued must be empty or one per sparse field");
  }
  for (const auto* names : {&s.dense_names, &s.sparse_names}) {
    for (const std::string& name : *names) {
      if (name.size() > BinaryFormat::kMaxNameBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("field name longer than ", BinaryFormat::kMaxNameBytes, " bytes"));
      }
    }
  }
  return absl::OkStatus();
}

// The header's bytes for `s`, with `samples` and `chunk_samples`, and its checksum.
std::vector<char> EncodeHeader(const BinarySchema& s, uint64_t samples, uint64_t chunk_samples) {
  std::vector<char> names;
  for (int d = 0; d < s.num_dense; ++d) {
    const std::string name = s.dense_names.empty() ? std::string() : s.dense_names[d];
    Put<uint16_t>(&names, static_cast<uint16_t>(name.size()));
    names.insert(names.end(), name.begin(), name.end());
  }
  for (int f = 0; f < s.num_sparse; ++f) {
    const std::string name = s.sparse_names.empty() ? std::string() : s.sparse_names[f];
    Put<uint16_t>(&names, static_cast<uint16_t>(name.size()));
    names.insert(names.end(), name.begin(), name.end());
  }
  for (int f = 0; f < s.num_sparse; ++f) {
    names.push_back(!s.multi_valued.empty() && s.multi_valued[f] ? 1 : 0);
  }
  const uint64_t header_bytes =
      AlignUp(kHeaderFixedBytes + names.size() + sizeof(uint64_t), BinaryFormat::kAlign);
  std::vector<char> out(kMagic, kMagic + 8);
  Put<uint32_t>(&out, BinaryFormat::kVersion);
  Put<uint32_t>(&out, static_cast<uint32_t>(header_bytes));
  Put<uint32_t>(&out, static_cast<uint32_t>(s.num_dense));
  Put<uint32_t>(&out, static_cast<uint32_t>(s.num_sparse));
  Put<uint64_t>(&out, samples);
  Put<uint64_t>(&out, chunk_samples);
  Put<uint32_t>(&out, static_cast<uint32_t>(names.size()));
  Put<uint32_t>(&out, 0);
  out.insert(out.end(), names.begin(), names.end());
  out.resize(header_bytes - sizeof(uint64_t), 0);
  Put<uint64_t>(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

}  // namespace

BinarySchema BinarySchema::Of(const SchemaOptions& schema) {
  BinarySchema s;
  s.num_dense = schema.num_dense;
  s.num_sparse = schema.num_sparse;
  if (schema.text != nullptr) {
    for (const DenseColumnSpec& d : schema.text->dense) s.dense_names.push_back(d.name);
    for (const SparseFieldSpec& f : schema.text->sparse) {
      s.sparse_names.push_back(f.name);
      s.multi_valued.push_back(f.separator != 0);
    }
    return s;
  }
  for (int d = 0; d < schema.num_dense; ++d) s.dense_names.push_back(absl::StrCat("I", d + 1));
  for (int f = 0; f < schema.num_sparse; ++f) s.sparse_names.push_back(absl::StrCat("C", f + 1));
  return s;
}

bool BinarySchema::AnyMultiValued() const {
  return std::any_of(multi_valued.begin(), multi_valued.end(), [](bool b) { return b; });
}

bool operator==(const BinarySchema& a, const BinarySchema& b) {
  const BinarySchema x = Normalized(a), y = Normalized(b);
  return x.num_dense == y.num_dense && x.num_sparse == y.num_sparse &&
         x.dense_names == y.dense_names && x.sparse_names == y.sparse_names &&
         x.multi_valued == y.multi_valued;
}

// ------------------------------------------------------------------------------------------------
// BinaryWriter

struct BinaryWriter::ChunkEntry {
  uint64_t offset;
  uint32_t samples;
  uint64_t keys;
  uint64_t checksum;
};

absl::StatusOr<std::unique_ptr<BinaryWriter>> BinaryWriter::Open(const std::string& path,
                                                                 BinarySchema schema,
                                                                 BinaryWriterOptions options) {
  PS_RETURN_IF_ERROR(CheckSchema(schema));
  if (options.chunk_samples < 1 || options.chunk_samples > BinaryFormat::kMaxChunkSamples) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_samples must be in [1, ",
                                                   BinaryFormat::kMaxChunkSamples, "], got ",
                                                   options.chunk_samples));
  }
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot create ", tmp));
  std::vector<char> header = EncodeHeader(schema, 0, options.chunk_samples);
  std::unique_ptr<BinaryWriter> writer(
      new BinaryWriter(path, fd, std::move(schema), std::move(header), options));
  PS_RETURN_IF_ERROR(writer->WriteAll(writer->header_.data(), writer->header_.size()));
  return writer;
}

BinaryWriter::BinaryWriter(std::string path, int fd, BinarySchema schema, std::vector<char> header,
                           BinaryWriterOptions options)
    : path_(std::move(path)),
      tmp_path_(path_ + ".tmp"),
      schema_(std::move(schema)),
      options_(options),
      fd_(fd),
      header_(std::move(header)) {
  offsets_.push_back(0);
}

BinaryWriter::~BinaryWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void BinaryWriter::Fail(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

absl::Status BinaryWriter::WriteAll(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      Fail(ErrnoStatus(errno, absl::StrCat("cannot write ", tmp_path_)));
      return error_;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    file_offset_ += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status BinaryWriter::Append(const Batch& batch) {
  if (!error_.ok()) return error_;
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  const size_t n = batch.size < 0 ? 0 : size_t(batch.size);
  const size_t nd = size_t(schema_.num_dense), ns = size_t(schema_.num_sparse);
  if (batch.size < 0 || batch.labels.size() != n || batch.dense.size() != n * nd ||
      batch.offsets.size() != n * ns + 1 || batch.offsets[0] != 0 ||
      batch.keys.size() != batch.offsets.back()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": a batch of ", batch.size, " samples with ", batch.labels.size(),
                     " labels, ", batch.dense.size(), " dense values, ", batch.offsets.size(),
                     " offsets and ", batch.keys.size(), " keys does not fit ", Describe(schema_)));
  }
  for (size_t i = 0; i < n * ns; ++i) {
    const uint32_t values = batch.offsets[i + 1] - batch.offsets[i];
    if (batch.offsets[i + 1] < batch.offsets[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": a batch's offsets decrease at position ", i + 1));
    }
    const size_t field = i % ns;
    const bool multi = !schema_.multi_valued.empty() && schema_.multi_valued[field];
    if (!multi && values != 1) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": sample ", i / ns, " of a batch has ",
                                                     values, " values in single-valued field ",
                                                     field));
    }
  }
  for (size_t r = 0; r < n; ++r) {
    const uint32_t first = batch.offsets[r * ns], last = batch.offsets[r * ns + ns];
    if (uint64_t{keys_.size()} + (last - first) > UINT32_MAX) PS_RETURN_IF_ERROR(FlushChunk());
    labels_.push_back(batch.labels[r]);
    dense_.insert(dense_.end(), batch.dense.begin() + r * nd, batch.dense.begin() + (r + 1) * nd);
    const uint32_t base = static_cast<uint32_t>(keys_.size());
    for (size_t f = 1; f <= ns; ++f) offsets_.push_back(base + batch.offsets[r * ns + f] - first);
    keys_.insert(keys_.end(), batch.keys.begin() + first, batch.keys.begin() + last);
    ++samples_;
    if (++chunk_samples_ == options_.chunk_samples) PS_RETURN_IF_ERROR(FlushChunk());
  }
  return absl::OkStatus();
}

absl::Status BinaryWriter::FlushChunk() {
  if (chunk_samples_ == 0) return absl::OkStatus();
  const ChunkLayout l = LayoutOf(chunk_samples_, keys_.size(), schema_.num_dense,
                                 schema_.num_sparse, schema_.AnyMultiValued());
  std::vector<char> chunk(l.end, 0);
  std::memcpy(chunk.data() + l.labels, labels_.data(), 4 * labels_.size());
  std::memcpy(chunk.data() + l.dense, dense_.data(), 4 * dense_.size());
  if (schema_.AnyMultiValued()) {
    std::memcpy(chunk.data() + l.offsets, offsets_.data(), 4 * offsets_.size());
  }
  std::memcpy(chunk.data() + l.keys, keys_.data(), 8 * keys_.size());
  const uint64_t offset = file_offset_;
  index_.push_back(ChunkEntry{offset, static_cast<uint32_t>(chunk_samples_), keys_.size(),
                              XXH3_64bits(chunk.data(), chunk.size())});
  chunk.resize(AlignUp(offset + l.end, BinaryFormat::kAlign) - offset, 0);
  PS_RETURN_IF_ERROR(WriteAll(chunk.data(), chunk.size()));
  chunk_samples_ = 0;
  labels_.clear();
  dense_.clear();
  offsets_.assign(1, 0);
  keys_.clear();
  return absl::OkStatus();
}

absl::StatusOr<BinaryWriteSummary> BinaryWriter::Close() {
  if (!error_.ok()) {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(tmp_path_.c_str());
      fd_ = -1;
    }
    return error_;
  }
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  absl::Status status = FlushChunk();
  BinaryWriteSummary summary;
  if (status.ok()) {
    std::vector<char> footer;
    for (const ChunkEntry& e : index_) {
      Put<uint64_t>(&footer, e.offset);
      Put<uint32_t>(&footer, e.samples);
      Put<uint32_t>(&footer, 0);
      Put<uint64_t>(&footer, e.keys);
      Put<uint64_t>(&footer, e.checksum);
    }
    const uint64_t index_checksum = XXH3_64bits(footer.data(), footer.size());
    Put<uint64_t>(&footer, file_offset_);
    Put<uint64_t>(&footer, index_.size());
    Put<uint64_t>(&footer, index_checksum);
    footer.insert(footer.end(), kEndMagic, kEndMagic + 8);
    status = WriteAll(footer.data(), footer.size());
  }
  if (status.ok()) {
    header_ = EncodeHeader(schema_, samples_, options_.chunk_samples);
    if (::pwrite(fd_, header_.data(), header_.size(), 0) != ssize_t(header_.size())) {
      status = ErrnoStatus(errno, absl::StrCat("cannot write ", tmp_path_));
    }
  }
  if (status.ok() && ::fsync(fd_) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("cannot sync ", tmp_path_));
  }
  if (::close(fd_) != 0 && status.ok()) {
    status = ErrnoStatus(errno, absl::StrCat("cannot close ", tmp_path_));
  }
  fd_ = -1;
  if (status.ok() && std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("cannot rename ", tmp_path_, " to ", path_));
  }
  if (!status.ok()) {
    ::unlink(tmp_path_.c_str());
    Fail(status);
    return status;
  }
  summary.samples = samples_;
  summary.chunks = static_cast<int64_t>(index_.size());
  summary.bytes = static_cast<int64_t>(file_offset_);
  return summary;
}

// ------------------------------------------------------------------------------------------------
// BinaryReader

struct BinaryReader::File {
  struct Chunk {
    uint64_t offset;
    uint64_t samples;
    uint64_t keys;
    uint64_t checksum;
    uint64_t first_sample;  // within the file
    ChunkLayout layout;
  };

  std::string path;
  const char* data = nullptr;  // the mapping; null for an empty file
  uint64_t size = 0;
  uint64_t header_bytes = 0;
  BinarySchema schema;
  uint64_t samples = 0;
  std::vector<Chunk> chunks;

  explicit File(std::string p) : path(std::move(p)) {}
  ~File() {
    if (data != nullptr) ::munmap(const_cast<char*>(data), size);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Maps the file whole.
  absl::Status Map() {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int error = errno;
      ::close(fd);
      return ErrnoStatus(error, absl::StrCat("cannot stat ", path));
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, " is a directory"));
    }
    size = static_cast<uint64_t>(st.st_size);
    if (size > 0) {
      void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (map == MAP_FAILED) {
        const int error = errno;
        ::close(fd);
        return ErrnoStatus(error, absl::StrCat("cannot map ", path));
      }
      data = static_cast<const char*>(map);
    }
    ::close(fd);
    return absl::OkStatus();
  }

  // Reads the header: header_bytes, schema, samples.
  absl::Status ParseHeader() {
    const char* d = data;
    const size_t magic_seen = std::min<uint64_t>(size, 8);
    if (magic_seen == 0 || std::memcmp(d, kMagic, magic_seen) != 0) {
      if (size == 0) return Loss(path, "empty file (truncated?), not a binary data file");
      return absl::InvalidArgumentError(
          absl::StrCat(path,
                       ": not a binary data file (no \"PSBIN\" magic; convert text with "
                       "`ps_ctl convert`)"));
    }
    if (size < kHeaderFixedBytes) return Loss(path, "truncated inside its header");
    const uint32_t version = Get<uint32_t>(d + 8);
    if (version != BinaryFormat::kVersion) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": binary format version ", version,
                                                     ", this build reads version ",
                                                     BinaryFormat::kVersion));
    }
    header_bytes = Get<uint32_t>(d + 12);
    if (header_bytes % BinaryFormat::kAlign != 0 || header_bytes < kHeaderFixedBytes + 8) {
      return Loss(path, absl::StrCat("damaged header (header size ", header_bytes, ")"));
    }
    if (header_bytes > size) return Loss(path, "truncated inside its header");
    if (XXH3_64bits(d, header_bytes - 8) != Get<uint64_t>(d + header_bytes - 8)) {
      return Loss(path, "damaged header (checksum mismatch)");
    }
    BinarySchema& s = schema;
    s.num_dense = static_cast<int>(Get<uint32_t>(d + 16));
    s.num_sparse = static_cast<int>(Get<uint32_t>(d + 20));
    samples = Get<uint64_t>(d + 24);
    const uint64_t names_bytes = Get<uint32_t>(d + 40);
    if (s.num_dense > BinaryFormat::kMaxFields || s.num_sparse > BinaryFormat::kMaxFields ||
        kHeaderFixedBytes + names_bytes > header_bytes - 8) {
      return Loss(path, "damaged header (field table)");
    }
    const char* p = d + kHeaderFixedBytes;
    const char* names_end = p + names_bytes;
    for (int i = 0; i < s.num_dense + s.num_sparse; ++i) {
      if (names_end - p < 2) return Loss(path, "damaged header (field names)");
      const uint16_t length = Get<uint16_t>(p);
      p += 2;
      if (names_end - p < length) return Loss(path, "damaged header (field names)");
      (i < s.num_dense ? s.dense_names : s.sparse_names).emplace_back(p, length);
      p += length;
    }
    if (names_end - p != s.num_sparse) return Loss(path, "damaged header (field kinds)");
    for (int f = 0; f < s.num_sparse; ++f) s.multi_valued.push_back(p[f] != 0);
    s = Normalized(std::move(s));

    return absl::OkStatus();
  }

  // Reads the footer and the index into chunks, checking that they agree with the header.
  absl::Status ParseFooter() {
    const char* d = data;
    const BinarySchema& s = schema;
    if (size < header_bytes + kTrailerBytes) return Loss(path, "truncated: it has no footer");
    const char* trailer = d + size - kTrailerBytes;
    if (std::memcmp(trailer + 24, kEndMagic, 8) != 0) {
      return Loss(path,
                  absl::StrCat("truncated or damaged: no footer at its end (", size, " bytes)"));
    }
    const uint64_t index_offset = Get<uint64_t>(trailer);
    const uint64_t num_chunks = Get<uint64_t>(trailer + 8);
    if (index_offset < header_bytes || index_offset % BinaryFormat::kAlign != 0 ||
        num_chunks > (size - index_offset) / kIndexEntryBytes ||
        index_offset + num_chunks * kIndexEntryBytes + kTrailerBytes != size) {
      return Loss(
          path, absl::StrCat("truncated or damaged: its footer does not fit its ", size, " bytes"));
    }
    if (XXH3_64bits(d + index_offset, num_chunks * kIndexEntryBytes) !=
        Get<uint64_t>(trailer + 16)) {
      return Loss(path, "damaged chunk index (checksum mismatch)");
    }
    uint64_t expected_offset = header_bytes, first_sample = 0;
    for (uint64_t c = 0; c < num_chunks; ++c) {
      const char* e = d + index_offset + c * kIndexEntryBytes;
      Chunk chunk;
      chunk.offset = Get<uint64_t>(e);
      chunk.samples = Get<uint32_t>(e + 8);
      chunk.keys = Get<uint64_t>(e + 16);
      chunk.checksum = Get<uint64_t>(e + 24);
      chunk.first_sample = first_sample;
      if (chunk.offset != expected_offset || chunk.samples == 0 ||
          chunk.samples > uint64_t{BinaryFormat::kMaxChunkSamples} || chunk.keys > UINT32_MAX) {
        return Loss(path, absl::StrCat("damaged chunk index (chunk ", c, ")"));
      }
      chunk.layout =
          LayoutOf(chunk.samples, chunk.keys, s.num_dense, s.num_sparse, s.AnyMultiValued());
      if (!s.AnyMultiValued() && chunk.keys != chunk.samples * s.num_sparse) {
        return Loss(path,
                    absl::StrCat("damaged chunk index (chunk ", c, ": ", chunk.keys, " keys for ",
                                 chunk.samples, " samples of single-valued fields)"));
      }
      if (chunk.offset + chunk.layout.end > index_offset) {
        return Loss(path, absl::StrCat("damaged chunk index (chunk ", c, " passes the index)"));
      }
      expected_offset = AlignUp(chunk.offset + chunk.layout.end, BinaryFormat::kAlign);
      first_sample += chunk.samples;
      chunks.push_back(chunk);
    }
    if (expected_offset != index_offset || first_sample != samples) {
      return Loss(path, absl::StrCat("damaged: its chunks hold ", first_sample,
                                     " samples up to byte ", expected_offset, ", its header says ",
                                     samples, " samples and its index starts at ", index_offset));
    }
    return absl::OkStatus();
  }

  // Checks every chunk's checksum.
  absl::Status VerifyChunks() const {
    const char* d = data;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Chunk& chunk = chunks[c];
      if (XXH3_64bits(d + chunk.offset, chunk.layout.end) != chunk.checksum) {
        return Loss(path, absl::StrCat("chunk ", c, " (samples ", chunk.first_sample, " to ",
                                       chunk.first_sample + chunk.samples - 1,
                                       ") is damaged (checksum mismatch)"));
      }
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<BinaryReader>> BinaryReader::Open(
    const std::vector<std::string>& paths, const BinarySchema& expected,
    BinaryReaderOptions options) {
  if (paths.empty()) return absl::InvalidArgumentError("no binary data files given");
  PS_ASSIGN_OR_RETURN(const std::vector<std::string> expanded, ExpandDataPaths(paths));
  std::vector<std::unique_ptr<File>> files;
  for (const std::string& path : expanded) {
    auto file = std::make_unique<File>(path);
    PS_RETURN_IF_ERROR(file->Map());
    PS_RETURN_IF_ERROR(file->ParseHeader());
    PS_RETURN_IF_ERROR(file->ParseFooter());
    if (options.verify == BinaryReaderOptions::Verify::kFull) {
      PS_RETURN_IF_ERROR(file->VerifyChunks());
    }
    const BinarySchema& s = file->schema;
    const BinarySchema want = Normalized(expected);
    const bool counts_only =
        want.dense_names.empty() && want.sparse_names.empty() && want.multi_valued.empty();
    const bool agrees =
        counts_only ? s.num_dense == want.num_dense && s.num_sparse == want.num_sparse : s == want;
    if (!agrees) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": written with ", Describe(s), counts_only ? "" : " (or other names or kinds)",
          ", expected ", Describe(want)));
    }
    if (!files.empty() && s != files.front()->schema) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": its fields differ from those of ", files.front()->path));
    }
    files.push_back(std::move(file));
  }
  BinarySchema schema = files.front()->schema;
  return std::unique_ptr<BinaryReader>(new BinaryReader(std::move(files), std::move(schema)));
}

BinaryReader::BinaryReader(std::vector<std::unique_ptr<File>> files, BinarySchema schema)
    : files_(std::move(files)), schema_(std::move(schema)) {
  for (const auto& file : files_) {
    file_starts_.push_back(total_samples_);
    total_samples_ += static_cast<int64_t>(file->samples);
  }
  file_starts_.push_back(total_samples_);
}

BinaryReader::~BinaryReader() = default;

std::vector<std::string> BinaryReader::paths() const {
  std::vector<std::string> paths;
  for (const auto& file : files_) paths.push_back(file->path);
  return paths;
}

absl::Status BinaryReader::Read(int64_t begin, int64_t count, Batch* batch) {
  if (batch == nullptr) return absl::InvalidArgumentError("Read: null batch");
  if (begin < 0 || count < 0 || count > BinaryFormat::kMaxReadSamples ||
      begin > total_samples_ - count) {
    return absl::InvalidArgumentError(absl::StrCat("Read: samples [", begin, ", ", begin + count,
                                                   ") are not within [0, ", total_samples_, ")"));
  }
  const size_t nd = size_t(schema_.num_dense), ns = size_t(schema_.num_sparse);
  batch->size = static_cast<int>(count);
  batch->labels.resize(count);
  batch->dense.resize(count * nd);
  batch->offsets.resize(count * ns + 1);
  batch->offsets[0] = 0;
  // Single-valued fields: the keys are filled in place (resizing a reused batch to its size
  // writes nothing); else appended chunk by chunk.
  if (schema_.AnyMultiValued()) {
    batch->keys.clear();
  } else {
    batch->keys.resize(count * ns);
  }
  int64_t row = 0;
  // The file holding `begin`: the last whose start is <= begin (files may be empty).
  size_t f = std::upper_bound(file_starts_.begin(), file_starts_.end() - 1, begin) -
             file_starts_.begin() - 1;
  while (row < count) {
    const File& file = *files_[f];
    const int64_t in_file = begin + row - file_starts_[f];
    if (in_file >= static_cast<int64_t>(file.samples)) {
      ++f;
      continue;
    }
    size_t c =
        std::upper_bound(file.chunks.begin(), file.chunks.end(), uint64_t(in_file),
                         [](uint64_t s, const File::Chunk& ch) { return s < ch.first_sample; }) -
        file.chunks.begin() - 1;
    while (row < count && c < file.chunks.size()) {
      const File::Chunk& chunk = file.chunks[c];
      const int64_t first = begin + row - file_starts_[f] - int64_t(chunk.first_sample);
      const int64_t n = std::min<int64_t>(count - row, int64_t(chunk.samples) - first);
      PS_RETURN_IF_ERROR(ReadChunk(file, c, first, n, row, batch));
      row += n;
      ++c;
    }
    ++f;
  }
  return absl::OkStatus();
}

absl::Status BinaryReader::ReadChunk(const File& file, size_t chunk_index, int64_t first, int64_t n,
                                     int64_t row, Batch* batch) {
  const File::Chunk& chunk = file.chunks[chunk_index];
  const char* base = file.data + chunk.offset;
  const size_t nd = size_t(schema_.num_dense), ns = size_t(schema_.num_sparse);
  std::memcpy(batch->labels.data() + row, base + chunk.layout.labels + 4 * first, 4 * n);
  std::memcpy(batch->dense.data() + row * nd, base + chunk.layout.dense + 4 * first * nd,
              4 * n * nd);
  const uint32_t batch_base = static_cast<uint32_t>(batch->keys.size());
  uint32_t* out = batch->offsets.data() + row * ns + 1;
  if (!schema_.AnyMultiValued()) {  // no offsets array: one key per field
    const size_t keys = size_t(n) * ns;
    const uint32_t first_key = static_cast<uint32_t>(row * ns);
    for (size_t i = 1; i <= keys; ++i) out[i - 1] = first_key + static_cast<uint32_t>(i);
    std::memcpy(batch->keys.data() + first_key, base + chunk.layout.keys + 8 * first * ns,
                8 * keys);
    read_bytes_ += static_cast<int64_t>(4 * n + 4 * n * nd + 8 * keys);
    return absl::OkStatus();
  }
  const char* offsets = base + chunk.layout.offsets + 4 * first * ns;
  const uint32_t key_begin = Get<uint32_t>(offsets);
  uint32_t previous = key_begin;
  for (size_t i = 1; i <= size_t(n) * ns; ++i) {
    const uint32_t o = Get<uint32_t>(offsets + 4 * i);
    if (o < previous || o > chunk.keys) {
      return Loss(file.path,
                  absl::StrCat("chunk ", chunk_index, " is damaged: offset ", first * ns + i,
                               " is out of order or past its ", chunk.keys, " keys"));
    }
    previous = o;
    out[i - 1] = batch_base + (o - key_begin);
  }
  if (key_begin > chunk.keys) {
    return Loss(file.path,
                absl::StrCat("chunk ", chunk_index, " is damaged: offset past its keys"));
  }
  const size_t keys = previous - key_begin;
  batch->keys.resize(batch_base + keys);
  std::memcpy(batch->keys.data() + batch_base, base + chunk.layout.keys + 8 * size_t(key_begin),
              8 * keys);
  read_bytes_ += static_cast<int64_t>(4 * n + 4 * n * nd + 4 * (n * ns + 1) + 8 * keys);
  return absl::OkStatus();
}

}  // namespace worker
}  // namespace ps

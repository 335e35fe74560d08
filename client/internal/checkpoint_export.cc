#include "client/internal/checkpoint_export.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <queue>
#include <utility>
#include <vector>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"
#include "common/status_macros.h"
#include "proto/checkpoint.pb.h"

#ifndef ABSL_IS_LITTLE_ENDIAN
#error "the .npy output is little-endian, written from memory as it is"
#endif

namespace ps {
namespace client_internal {
namespace {

// A file written front to back (then its start again, for the .npy header); the first error is
// kept and returned by Rewind or Close.
class Output {
 public:
  explicit Output(std::string path) : path_(std::move(path)) {}
  ~Output() {
    if (f_ != nullptr) std::fclose(f_);
  }

  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  absl::Status Open() {
    f_ = std::fopen(path_.c_str(), "wb");
    if (f_ == nullptr) return absl::InternalError(absl::StrCat("open ", path_, ": ", Errno()));
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
    return absl::OkStatus();
  }

  void Write(const void* data, size_t n) {
    if (error_.empty() && std::fwrite(data, 1, n, f_) != n) error_ = Errno();
  }
  void Write(absl::string_view s) { Write(s.data(), s.size()); }

  absl::Status Rewind() {
    if (error_.empty() && std::fseek(f_, 0, SEEK_SET) != 0) error_ = Errno();
    return Status();
  }

  absl::Status Close() {
    if (error_.empty() && std::fflush(f_) != 0) error_ = Errno();
    if (std::fclose(f_) != 0 && error_.empty()) error_ = Errno();
    f_ = nullptr;
    return Status();
  }

 private:
  static std::string Errno() { return std::strerror(errno); }
  absl::Status Status() const {
    if (error_.empty()) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("write ", path_, ": ", error_));
  }

  const std::string path_;
  std::FILE* f_ = nullptr;
  std::string error_;  // the first error; empty while there is none
};

// A .npy file's first bytes: the magic string, version 1.0, the header's length, and the header
// (a Python dict literal) padded with spaces to a multiple of 64 bytes in all and ending with a
// newline. `rows` sets the shape; `width` is the most digits it may have, so that the header can
// be written first with a guess and again with the count once known, at the same length.
std::string NpyPrefix(uint32_t dim, uint64_t rows, size_t width) {
  std::string header = absl::StrFormat(
      "{'descr': [('id', '<u8'), ('emb', '<f4', (%d,))], 'fortran_order': False, 'shape': (%d,), }",
      dim, rows);
  const size_t digits = absl::StrCat(rows).size();
  const size_t unpadded = 10 + header.size() + (width - digits) + 1;  // magic..length, then '\n'
  header.append((64 - unpadded % 64) % 64 + (width - digits), ' ');
  header.push_back('\n');
  std::string prefix("\x93NUMPY\x01\x00", 8);
  const uint16_t length = static_cast<uint16_t>(header.size());
  prefix.push_back(static_cast<char>(length & 0xff));
  prefix.push_back(static_cast<char>(length >> 8));
  return prefix + header;
}

// Appends `f` with the fewest digits that read back as the same float.
void AppendFloat(float f, std::string* out) {
  char buffer[32];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), f);
  out->append(buffer, r.ptr);
}

// One shard's cursor in the merge, ordered by its current id (smallest first).
struct Head {
  uint64_t id;
  ShardChainCursor* cursor;
  bool operator>(const Head& other) const { return id > other.id; }
};
using Heads = std::priority_queue<Head, std::vector<Head>, std::greater<Head>>;

// Writes the rows of the cursors in `heads`, merged by id, to the file `path`.
absl::StatusOr<ExportSummary> WriteRows(const std::string& folder, const std::string& table,
                                        uint32_t dim, ExportFormat format, Heads* heads,
                                        const std::string& path) {
  Output output(path);
  PS_RETURN_IF_ERROR(output.Open());
  constexpr size_t kRowsWidth = 20;  // digits of the largest uint64
  if (format == ExportFormat::kNpy) output.Write(NpyPrefix(dim, 0, kRowsWidth));
  ExportSummary summary;
  summary.dim = dim;
  std::string line;
  uint64_t last = 0;
  while (!heads->empty()) {
    const Head head = heads->top();
    heads->pop();
    if (summary.rows > 0 && head.id == last) {
      return absl::DataLossError(absl::StrFormat(
          "checkpoint %s: id %d of table \"%s\" is in two shard files", folder, head.id, table));
    }
    const absl::Span<const float> embedding = head.cursor->row().subspan(0, dim);
    if (format == ExportFormat::kTsv) {
      line.clear();
      char id[24];
      line.append(id, std::to_chars(id, id + sizeof(id), head.id).ptr);
      for (const float f : embedding) {
        line.push_back('\t');
        AppendFloat(f, &line);
      }
      line.push_back('\n');
      output.Write(line);
    } else {
      output.Write(&head.id, sizeof(head.id));
      output.Write(embedding.data(), embedding.size() * sizeof(float));
    }
    ++summary.rows;
    last = head.id;
    head.cursor->Next();
    if (head.cursor->Valid()) {
      heads->push({head.cursor->id(), head.cursor});
    } else if (!head.cursor->status().ok()) {
      return head.cursor->status();
    }
  }
  if (format == ExportFormat::kNpy) {
    PS_RETURN_IF_ERROR(output.Rewind());
    output.Write(NpyPrefix(dim, summary.rows, kRowsWidth));
  }
  PS_RETURN_IF_ERROR(output.Close());
  return summary;
}

}  // namespace

absl::StatusOr<ExportFormat> ParseExportFormat(absl::string_view name) {
  if (name == "tsv") return ExportFormat::kTsv;
  if (name == "npy") return ExportFormat::kNpy;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown export format \"", name, "\" (tsv or npy)"));
}

absl::StatusOr<ExportSummary> ExportTable(const std::string& folder, const std::string& table,
                                          ExportFormat format, const std::string& out) {
  PS_ASSIGN_OR_RETURN(const rpc::CheckpointManifest manifest, ReadCheckpointManifest(folder));
  const config::Table* spec = nullptr;
  std::vector<std::string> names;
  for (const config::Table& t : manifest.tables()) {
    names.push_back(t.name());
    if (t.name() == table) spec = &t;
  }
  if (spec == nullptr) {
    return absl::NotFoundError(absl::StrFormat("checkpoint %s has no table \"%s\" (it has: %s)",
                                               folder, table, absl::StrJoin(names, ", ")));
  }
  const uint32_t dim = spec->dim();

  // An incremental checkpoint is read with its chain; every file of it is checked whole before
  // anything is written.
  PS_ASSIGN_OR_RETURN(const std::vector<CheckpointLink> chain,
                      ReadCheckpointChain(folder, manifest));
  for (const CheckpointLink& link : chain) {
    for (const rpc::CheckpointShardFile& file : link.manifest.shards()) {
      PS_RETURN_IF_ERROR(
          VerifyShardFile((std::filesystem::path(link.folder) / file.file()).string(), file));
    }
  }
  // One cursor a shard, over its chain's files (the newest row of an id wins).
  std::vector<std::unique_ptr<ShardChainCursor>> cursors;
  Heads heads;
  for (const rpc::CheckpointShardFile& file : manifest.shards()) {
    PS_ASSIGN_OR_RETURN(const std::vector<ShardFileRef> files, ShardFileChain(chain, file.shard()));
    std::vector<std::string> paths;
    for (const ShardFileRef& ref : files) paths.push_back(ref.path);
    absl::StatusOr<std::unique_ptr<ShardChainCursor>> cursor = ShardChainCursor::Open(paths, table);
    if (!cursor.ok()) return absl::DataLossError(cursor.status().message());
    if ((*cursor)->layout().dim() != dim) {
      return absl::DataLossError(
          absl::StrFormat("checkpoint file %s: table \"%s\" has dim %d, the manifest says %d",
                          paths.back(), table, (*cursor)->layout().dim(), dim));
    }
    PS_RETURN_IF_ERROR((*cursor)->status());
    if ((*cursor)->Valid()) heads.push({(*cursor)->id(), cursor->get()});
    cursors.push_back(*std::move(cursor));
  }

  const std::string tmp = out + ".tmp";
  absl::StatusOr<ExportSummary> summary = WriteRows(folder, table, dim, format, &heads, tmp);
  std::error_code ec;
  if (summary.ok()) {
    std::filesystem::rename(tmp, out, ec);
    if (!ec) return summary;
    summary = absl::InternalError(absl::StrCat("rename ", tmp, " to ", out, ": ", ec.message()));
  }
  std::filesystem::remove(tmp, ec);
  return summary;
}

}  // namespace client_internal
}  // namespace ps

#include "common/text_lines.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status ForEachLine(const std::string& path, absl::FunctionRef<bool(const std::string&)> fn) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) {
    const int error = errno;
    const std::string message = absl::StrCat("cannot read ", path, ": ", std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  gzbuffer(in, 1 << 16);
  std::string line;
  char buffer[1 << 16];
  bool more = true;
  while (more) {
    line.clear();
    bool ended = false;
    while (gzgets(in, buffer, sizeof(buffer)) != nullptr) {
      line += buffer;
      if (!line.empty() && line.back() == '\n') {
        line.pop_back();
        ended = true;
        break;
      }
    }
    if (!ended && line.empty()) break;  // the end of the file, or an error
    if (!line.empty() && line.back() == '\r') line.pop_back();
    more = fn(line);
  }
  int code = Z_OK;
  const char* message = gzerror(in, &code);
  const std::string reason = code != Z_OK && code != Z_STREAM_END ? message : "";
  gzclose(in);
  if (!reason.empty()) {
    return absl::DataLossError(absl::StrCat("cannot read ", path, ": ", reason));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FirstLine(const std::string& path) {
  std::string first;
  absl::Status status = ForEachLine(path, [&](const std::string& line) {
    first = line;
    return false;
  });
  if (!status.ok()) return status;
  return first;
}

}  // namespace ps

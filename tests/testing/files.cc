#include "tests/testing/files.h"

#include <zlib.h>

#include <fstream>

#include "absl/strings/str_cat.h"

namespace ps {
namespace testing {

absl::Status WriteFile(const std::string& path, absl::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status WriteGzipFile(const std::string& path, absl::string_view text) {
  gzFile out = gzopen(path.c_str(), "wb");
  if (out == nullptr) return absl::InternalError(absl::StrCat("cannot write ", path));
  const bool written =
      text.empty() || gzwrite(out, text.data(), static_cast<unsigned>(text.size())) ==
                          static_cast<int>(text.size());
  if (gzclose(out) != Z_OK || !written) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace ps

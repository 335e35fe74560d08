#include "common/data_paths.h"

#include <glob.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {

bool IsDataGlob(absl::string_view path) {
  return path.find_first_of("*?[") != absl::string_view::npos;
}

absl::StatusOr<std::vector<std::string>> ExpandDataPath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty data path");
  if (!IsDataGlob(path)) return std::vector<std::string>{path};
  glob_t found{};
  const int rc = glob(path.c_str(), 0, nullptr, &found);
  std::vector<std::string> files;
  if (rc == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) files.emplace_back(found.gl_pathv[i]);
  }
  globfree(&found);
  if (rc == GLOB_NOSPACE) {
    return absl::UnavailableError(
        absl::StrCat("the pattern \"", path, "\" could not be matched: out of memory"));
  }
  if (files.empty()) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0) return std::vector<std::string>{path};  // a literal name
    return absl::NotFoundError(absl::StrCat("the pattern \"", path, "\" matches no file"));
  }
  return files;
}

absl::StatusOr<std::vector<std::string>> ExpandDataPaths(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    PS_ASSIGN_OR_RETURN(std::vector<std::string> matched, ExpandDataPath(path));
    files.insert(files.end(), matched.begin(), matched.end());
  }
  return files;
}

}  // namespace ps

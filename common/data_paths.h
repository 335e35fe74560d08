// The files a job's data paths name (data.train_paths, data.eval_paths): each path is a file, or
// a shell-style glob (`*`, `?`, `[...]`) standing for the files it matches. The worker reads what
// these functions expand (worker/data/criteo_reader.h), and the checks before a job starts
// (common/data_check.h) look at the same files. Relative paths and patterns are taken from the
// process's current directory.
#ifndef PS_COMMON_DATA_PATHS_H_
#define PS_COMMON_DATA_PATHS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// Whether `path` holds a glob character (`*`, `?` or `[`).
bool IsDataGlob(absl::string_view path);

// The files `path` names: itself when it is not a glob (whether or not it exists: opening it
// says), else the paths that match it, sorted as the shell sorts them (glob(3)). A glob that
// matches nothing names itself when a file of exactly that name exists. Errors:
//   INVALID_ARGUMENT: an empty path;
//   NOT_FOUND: a glob that matches nothing ("... matches no file"; folders that cannot be read
//     match nothing);
//   UNAVAILABLE: out of memory while matching.
absl::StatusOr<std::vector<std::string>> ExpandDataPath(const std::string& path);

// Every path of `paths` expanded by ExpandDataPath, in order. The first error.
absl::StatusOr<std::vector<std::string>> ExpandDataPaths(const std::vector<std::string>& paths);

}  // namespace ps

#endif  // PS_COMMON_DATA_PATHS_H_

// How a benchmark (a cc_binary, run by `bazel run`, from bazel-bin or from the workspace) finds
// the project's binaries: in its runfiles, "<its path>.runfiles/ps", when they hold them.
#ifndef PS_TESTS_TESTING_RUNFILES_H_
#define PS_TESTS_TESTING_RUNFILES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ps {
namespace testing {

// This binary's path, given main()'s argv[0]: argv0 itself when "<argv0>.runfiles" exists (under
// `bazel run` the runfiles sit beside argv[0], which may be a symlink to the binary), else
// /proc/self/exe resolved, else argv0.
std::string SelfPath(const char* argv0);

// "<self>.runfiles/ps" when it holds the executable `probe` (a path in the workspace such as
// "worker/ps_worker"), else "".
std::string RunfilesRoot(absl::string_view self, absl::string_view probe);

// The folder of the project's binaries for the binary at `self`: `flag` (a --bin_dir) when it is
// not empty, else RunfilesRoot(self, probe) when that is found, else `fallback` (e.g. "bazel-bin",
// relative to the workspace).
std::string FindBinDir(absl::string_view flag, absl::string_view self, absl::string_view probe,
                       absl::string_view fallback);

// A data file of the workspace, `relative` to its root (e.g. "deploy/jobs/quickstart.pbtxt"), for
// the binary at `self`: `flag` when it is not empty, else that file in RunfilesRoot(self, probe)
// when that is found, else `relative` itself (the binary runs in the workspace).
std::string FindWorkspaceFile(absl::string_view flag, absl::string_view self,
                              absl::string_view probe, absl::string_view relative);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_RUNFILES_H_

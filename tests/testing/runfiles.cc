#include "tests/testing/runfiles.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace ps {
namespace testing {

std::string SelfPath(const char* argv0) {
  if (access(absl::StrCat(argv0, ".runfiles").c_str(), F_OK) == 0) return argv0;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? std::string(self, n) : argv0;
}

std::string RunfilesRoot(absl::string_view self, absl::string_view probe) {
  std::string runfiles = absl::StrCat(self, ".runfiles/ps");
  if (access(absl::StrCat(runfiles, "/", probe).c_str(), X_OK) == 0) return runfiles;
  return "";
}

std::string FindBinDir(absl::string_view flag, absl::string_view self, absl::string_view probe,
                       absl::string_view fallback) {
  if (!flag.empty()) return std::string(flag);
  const std::string runfiles = RunfilesRoot(self, probe);
  return runfiles.empty() ? std::string(fallback) : runfiles;
}

std::string FindWorkspaceFile(absl::string_view flag, absl::string_view self,
                              absl::string_view probe, absl::string_view relative) {
  if (!flag.empty()) return std::string(flag);
  const std::string runfiles = RunfilesRoot(self, probe);
  return runfiles.empty() ? std::string(relative) : absl::StrCat(runfiles, "/", relative);
}

}  // namespace testing
}  // namespace ps

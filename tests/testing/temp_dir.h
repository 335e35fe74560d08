// Temporary folders for tests and benchmarks.
#ifndef PS_TESTS_TESTING_TEMP_DIR_H_
#define PS_TESTS_TESTING_TEMP_DIR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {
namespace testing {

// The folder for a test's files: $TEST_TMPDIR, which Bazel gives each test and removes after it;
// else $TMPDIR (a benchmark's, see UseScopedTempDir); else /tmp. Unset and empty are alike.
std::string TempDir();

// A new folder of its own, removed with everything in it when this goes away: for a benchmark's
// data, which Bazel does not clean up. Thread-compatible.
class ScopedTempDir {
 public:
  // Creates "<base>/<prefix>.XXXXXX" (mkdtemp), where base is the first set and non-empty of
  // $TEST_TMPDIR and $TMPDIR, else /tmp. FAILED_PRECONDITION naming the pattern if it cannot.
  static absl::StatusOr<std::unique_ptr<ScopedTempDir>> Create(absl::string_view prefix);

  ~ScopedTempDir();

  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  // The folder, without a trailing '/'.
  const std::string& path() const { return path_; }

 private:
  explicit ScopedTempDir(std::string path) : path_(std::move(path)) {}

  const std::string path_;
};

// For a benchmark, which Bazel does not clean up after: creates a ScopedTempDir named after
// `prefix` and points $TMPDIR at it, so that TempDir(), and every process started from here
// (daemons, workers), put their files (logs, ports, jobs) in it, and nothing is left behind in the
// system's temporary folder. Call it first in main, before any thread starts (it calls setenv),
// and keep the result until the processes are gone. FAILED_PRECONDITION as ScopedTempDir::Create.
absl::StatusOr<std::unique_ptr<ScopedTempDir>> UseScopedTempDir(absl::string_view prefix);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_TEMP_DIR_H_

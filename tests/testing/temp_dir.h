// Temporary folders for tests and benchmarks.
#ifndef PS_TESTS_TESTING_TEMP_DIR_H_
#define PS_TESTS_TESTING_TEMP_DIR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {
namespace testing {

// The folder for a test's files: $TEST_TMPDIR, which Bazel gives each test and removes after it,
// or /tmp when that is unset or empty (a test binary run by hand).
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

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_TEMP_DIR_H_

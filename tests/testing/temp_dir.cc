#include "tests/testing/temp_dir.h"

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace testing {
namespace {

bool IsSet(const char* value) { return value != nullptr && *value != '\0'; }

}  // namespace

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  if (!IsSet(dir)) dir = std::getenv("TMPDIR");
  return IsSet(dir) ? dir : "/tmp";
}

absl::StatusOr<std::unique_ptr<ScopedTempDir>> ScopedTempDir::Create(absl::string_view prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  if (!IsSet(base)) base = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(IsSet(base) ? base : "/tmp", "/", prefix, ".XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create ", pattern));
  }
  return std::unique_ptr<ScopedTempDir>(new ScopedTempDir(std::move(pattern)));
}

ScopedTempDir::~ScopedTempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

absl::StatusOr<std::unique_ptr<ScopedTempDir>> UseScopedTempDir(absl::string_view prefix) {
  absl::StatusOr<std::unique_ptr<ScopedTempDir>> dir = ScopedTempDir::Create(prefix);
  if (dir.ok()) setenv("TMPDIR", (*dir)->path().c_str(), /*overwrite=*/1);
  return dir;
}

}  // namespace testing
}  // namespace ps

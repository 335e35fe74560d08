// Files for tests: data written whole, plain or gzip-compressed.
#ifndef PS_TESTS_TESTING_FILES_H_
#define PS_TESTS_TESTING_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ps {
namespace testing {

// Writes `text` to `path`, replacing it. INTERNAL naming the path when it cannot be written.
absl::Status WriteFile(const std::string& path, absl::string_view text);

// Writes `text` gzip-compressed to `path`, replacing it. INTERNAL naming the path when it cannot.
absl::Status WriteGzipFile(const std::string& path, absl::string_view text);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_FILES_H_

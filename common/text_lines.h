// Reading a text file, plain or gzip-compressed (zlib reads either), line by line: the job checks
// that look at training data before a run (the header in common/data_check, the dense columns'
// moments in common/dense_moments) read their lines alike. Lines end at '\n'; a '\r' before it
// is dropped, and a last line without '\n' is a line too. Lines of any length are read whole.
#ifndef PS_COMMON_TEXT_LINES_H_
#define PS_COMMON_TEXT_LINES_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

// Calls `fn(line)` for each line of `path` in order, until it returns false or the file ends.
// NOT_FOUND for a missing file, PERMISSION_DENIED for one that cannot be opened otherwise (the
// message names the file and the reason); DATA_LOSS for a compressed file that is damaged or
// cut short, after the lines read before.
absl::Status ForEachLine(const std::string& path, absl::FunctionRef<bool(const std::string&)> fn);

// The first line of `path` ("" for an empty file). Errors as ForEachLine.
absl::StatusOr<std::string> FirstLine(const std::string& path);

}  // namespace ps

#endif  // PS_COMMON_TEXT_LINES_H_

// The columns of delimited text as a job's data.schema names them: by number ("3", from 1) or by
// name, looked up in the header line every file of a schema with `header: true` starts with.
// Shared by the job's validation (common/job_config), the check of its files before a run
// (common/data_check) and the worker's reader (worker/data/criteo_reader), so that all three
// read a column reference and a header alike.
#ifndef PS_COMMON_SCHEMA_COLUMNS_H_
#define PS_COMMON_SCHEMA_COLUMNS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace ps {

// A column of delimited text: by its 0-based index, or (index -1) by its name in the files'
// header line.
struct ColumnRef {
  int index = -1;
  std::string name;
};

// The most columns a schema may number.
constexpr int kMaxColumns = 1 << 20;

// Reads a schema's column: all digits is a number from 1 to kMaxColumns (index = number - 1),
// anything else a name, which needs a header. INVALID_ARGUMENT, saying which, for an empty text, a
// number out of range, or a name without a header.
absl::StatusOr<ColumnRef> ParseColumnRef(absl::string_view text, bool header);

// The byte between a schema's columns: '\t' or ','.
char DelimiterOf(const config::Schema& schema);

// The names a header line gives its columns. Thread-compatible.
class HeaderColumns {
 public:
  // Splits `line` (without its '\n'; a trailing '\r' is dropped) at `delimiter`. An empty line
  // names one column, "".
  HeaderColumns(absl::string_view line, char delimiter);

  int size() const { return static_cast<int>(names_.size()); }
  const std::string& name(int i) const { return names_[i]; }
  // The 1-based byte column of the line where column i starts; for i == size(), one past the
  // line's end (where a missing column would go).
  int byte_column(int i) const { return starts_[i] + 1; }

  // The 0-based index of `ref`: its index when numbered (OUT_OF_RANGE "the header has N columns;
  // the schema reads column M" when it is not below size()), else the one column with its name
  // (NOT_FOUND "the header has no column "x"", or ALREADY_EXISTS "the header names column "x"
  // twice (columns 2 and 5)"). On an error, *byte_column (when not null) is where in the line it
  // is: the second column of a name given twice, one past the end for a missing column, 1 for a
  // missing name.
  absl::StatusOr<int> Find(const ColumnRef& ref, int* byte_column = nullptr) const;

  // The names joined by ", ", cut after `max_bytes` with "...": for messages.
  std::string Describe(size_t max_bytes = 200) const;

 private:
  std::vector<std::string> names_;
  std::vector<int> starts_;  // byte offsets of each column, then the line's length + 1
};

}  // namespace ps

#endif  // PS_COMMON_SCHEMA_COLUMNS_H_

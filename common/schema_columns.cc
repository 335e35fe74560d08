#include "common/schema_columns.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// A name as a message shows it: printable, and not longer than a message wants.
std::string Shown(absl::string_view name) {
  std::string out;
  for (char ch : name.substr(0, 64)) {
    out += absl::ascii_isprint(static_cast<unsigned char>(ch)) ? ch : '?';
  }
  if (name.size() > 64) out += "...";
  return out;
}

}  // namespace

absl::StatusOr<ColumnRef> ParseColumnRef(absl::string_view text, bool header) {
  if (text.empty()) {
    return absl::InvalidArgumentError("must name a column (a number from 1, or a name)");
  }
  ColumnRef ref;
  if (text.find_first_not_of("0123456789") == absl::string_view::npos) {
    int number = 0;
    if (text.size() > 7 || !absl::SimpleAtoi(text, &number) || number < 1 || number > kMaxColumns) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown column \"", text, "\": columns are numbered from 1 (to ", kMaxColumns, ")"));
    }
    ref.index = number - 1;
    return ref;
  }
  if (!header) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown column \"", Shown(text),
                     "\": a column is named only by a header (set data.schema.header: true) or "
                     "by its number"));
  }
  ref.name = std::string(text);
  return ref;
}

char DelimiterOf(const config::Schema& schema) {
  return schema.delimiter() == config::Schema::COMMA ? ',' : '\t';
}

HeaderColumns::HeaderColumns(absl::string_view line, char delimiter) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t start = 0;
  while (true) {
    const size_t end = line.find(delimiter, start);
    starts_.push_back(static_cast<int>(start));
    names_.emplace_back(line.substr(start, end == absl::string_view::npos ? end : end - start));
    if (end == absl::string_view::npos) break;
    start = end + 1;
  }
  starts_.push_back(static_cast<int>(line.size()) + 1);
}

absl::StatusOr<int> HeaderColumns::Find(const ColumnRef& ref, int* where_out) const {
  int where = 1;
  absl::StatusOr<int> found = [&]() -> absl::StatusOr<int> {
    if (ref.index >= 0) {
      if (ref.index < size()) return ref.index;
      where = starts_.back();
      return absl::OutOfRangeError(absl::StrCat(
          "the header has ", size(), " columns; the schema reads column ", ref.index + 1));
    }
    int first = -1;
    for (int i = 0; i < size(); ++i) {
      if (names_[i] != ref.name) continue;
      if (first >= 0) {
        where = byte_column(i);
        return absl::AlreadyExistsError(absl::StrCat("the header names column \"", Shown(ref.name),
                                                     "\" twice (columns ", first + 1, " and ",
                                                     i + 1, ")"));
      }
      first = i;
    }
    if (first < 0) {
      return absl::NotFoundError(
          absl::StrCat("the header has no column \"", Shown(ref.name), "\""));
    }
    return first;
  }();
  if (!found.ok() && where_out != nullptr) *where_out = where;
  return found;
}

std::string HeaderColumns::Describe(size_t max_bytes) const {
  std::string all;
  for (int i = 0; i < size(); ++i) {
    if (i > 0) all += ", ";
    all += Shown(names_[i]);
    if (all.size() > max_bytes) return all.substr(0, max_bytes) + "...";
  }
  return all;
}

}  // namespace ps

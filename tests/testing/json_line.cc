#include "tests/testing/json_line.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace testing {

double JsonField(absl::string_view json, absl::string_view key) {
  const std::string needle = absl::StrCat("\"", key, "\":");
  const size_t at = json.find(needle);
  if (at == absl::string_view::npos) return std::nan("");
  const size_t begin = at + needle.size();
  const size_t end = json.find_first_of(",}", begin);
  double value = 0;
  if (!absl::SimpleAtod(json.substr(begin, end - begin), &value)) return std::nan("");
  return value;
}

std::string JsonNumber(double x) {
  return std::isfinite(x) ? absl::StrFormat("%.6g", x) : std::string("null");
}

}  // namespace testing
}  // namespace ps

// Reading and writing the one-line JSON objects that the project's binaries and benchmarks print
// (ps_worker's `RESULT {json}`, ps_datagen's summary, a benchmark's measurements), without a JSON
// library: the objects are flat and their numbers are what tests and benchmarks look at.
#ifndef PS_TESTS_TESTING_JSON_LINE_H_
#define PS_TESTS_TESTING_JSON_LINE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ps {
namespace testing {

// The number in `"key":number` of the flat one-line JSON object `json`. NaN when the key is
// absent, when its value is not a number (null, a string, an object), or when `json` is empty.
// The first occurrence of `"key":` counts, so keys must not appear inside string values.
double JsonField(absl::string_view json, absl::string_view key);

// `x` as a JSON value: "%.6g", or "null" when it is not finite (JSON has no NaN or infinity).
std::string JsonNumber(double x);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_JSON_LINE_H_

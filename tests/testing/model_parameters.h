// What the end-to-end training tests compare: a trained job's parameters as the servers hold them
// (the dense master copy and the rows of given keys), and how far two such sets are apart.
#ifndef PS_TESTS_TESTING_MODEL_PARAMETERS_H_
#define PS_TESTS_TESTING_MODEL_PARAMETERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {
namespace testing {

struct ModelParameters {
  // The model's dense parameters ("dense/model").
  std::vector<float> dense;
  // The rows of the keys asked for, dim floats each, in their order.
  std::vector<float> rows;
};

// Every key of the sparse features of a Criteo-format file, sorted and unique. Errors of opening
// or reading the file.
absl::StatusOr<std::vector<uint64_t>> KeysOfFile(const std::string& path);

// Connects to the cluster at `coordinator` and pulls the dense master copy (the size of the job's
// model) and the rows of `keys` of `table`. Errors of connecting and pulling.
absl::StatusOr<ModelParameters> PullModelParameters(const std::string& coordinator,
                                                    const std::string& table,
                                                    const std::vector<uint64_t>& keys);

// The largest |a - b| / max(|a|, |b|, 1e-3) over the elements (of equal-length vectors).
double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_MODEL_PARAMETERS_H_

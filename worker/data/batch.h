// The unit of training data that readers hand to the worker's step, and the schema that sizes it.
#ifndef PS_WORKER_DATA_BATCH_H_
#define PS_WORKER_DATA_BATCH_H_

#include <cstdint>
#include <vector>

namespace ps {
namespace worker {

// How many features a sample has. Criteo's click logs have 13 integer and 26 categorical ones.
struct SchemaOptions {
  // Integer ("dense") features per sample, after the label. Default 13; must be >= 0.
  int num_dense = 13;
  // Categorical ("sparse") features per sample, after the dense ones. Default 26; must be >= 0.
  int num_sparse = 26;
};

// A batch of samples laid out for the compute backends: one flat row-major array per kind of value.
// Readers resize the vectors to exactly `size` rows and reuse their capacity from batch to batch.
struct Batch {
  // Number of samples (rows).
  int size = 0;
  // size values, 0 or 1.
  std::vector<float> labels;
  // size x num_dense, row-major: the transformed integer features (see CriteoReader).
  std::vector<float> dense;
  // size x num_sparse, row-major: one hashed key per categorical field.
  std::vector<uint64_t> keys;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DATA_BATCH_H_

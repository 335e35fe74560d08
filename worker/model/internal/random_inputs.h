// Seeded random batches for the model's tests: the CPU network's own and the GPU's against it.
#ifndef PS_WORKER_MODEL_INTERNAL_RANDOM_INPUTS_H_
#define PS_WORKER_MODEL_INTERNAL_RANDOM_INPUTS_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "worker/model/model_spec.h"

namespace ps {
namespace worker {
namespace testing {

// One batch: dense features (batch x num_dense), pooled embeddings (batch x emb_width(), as
// model_spec.h lays them out) and labels (batch).
struct Inputs {
  int batch;
  std::vector<float> dense, emb, labels;
};

// A batch of `shape` from `seed`: dense features |N(0, 1)|, embeddings (and linear inputs)
// N(0, 0.3^2), labels 0 or 1 at random. The same seed gives the same batch.
inline Inputs RandomInputs(const ModelSpec& shape, int batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Inputs in{batch, {}, {}, {}};
  for (int i = 0; i < batch * shape.num_dense; ++i) in.dense.push_back(std::fabs(n(rng)));
  for (int i = 0; i < batch * shape.emb_width(); ++i) {
    in.emb.push_back(n(rng) * 0.3f);
  }
  for (int i = 0; i < batch; ++i) in.labels.push_back(static_cast<float>(rng() % 2));
  return in;
}

}  // namespace testing
}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_INTERNAL_RANDOM_INPUTS_H_

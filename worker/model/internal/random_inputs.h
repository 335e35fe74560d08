// Seeded random batches for the model's tests: the CPU network's own and the GPU's against it.
#ifndef PS_WORKER_MODEL_INTERNAL_RANDOM_INPUTS_H_
#define PS_WORKER_MODEL_INTERNAL_RANDOM_INPUTS_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "worker/model/model_spec.h"
#include "worker/model/pooled_input.h"

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

// A batch as distinct rows and bags (pooled_input.h) for `shape`, from `seed`: `tables` tables
// (1 <= tables <= shape's slots; slot i, the fields then the linear inputs, reads table i %
// tables, so tables are read by several slots of different offsets, and all slots of one table
// have that table's dim: the caller picks a shape whose slots i, i + tables, ... share a dim) of
// `num_rows` distinct rows N(0, 0.3^2) each; every bag has 0 to max_values values (about one in
// five empty), keys drawn from the table's rows so that samples share them; slots pool by MEAN
// when `mean` says so for their index (mean(i)). The pooled emb of `in.dense`/`labels` comes
// from HostPool.
struct RowInputs {
  Inputs base;  // dense, labels; emb unused
  std::vector<std::vector<float>> rows;
  std::vector<std::vector<uint32_t>> index, ends;
  PooledInput in;
};

inline RowInputs RandomRowInputs(const ModelSpec& shape, int batch, int tables, int num_rows,
                                 int max_values, bool mean_sum_mix, bool all_mean, uint64_t seed) {
  RowInputs r;
  r.base = RandomInputs(shape, batch, seed);
  std::mt19937_64 rng(seed * 7919 + 1);
  std::normal_distribution<float> n(0.0f, 0.3f);
  std::vector<int> dims = shape.field_dims;
  for (int i = 0; i < shape.num_linear; ++i) dims.push_back(1);
  const int slots = static_cast<int>(dims.size());
  r.rows.resize(tables);
  r.index.resize(tables);
  r.ends.resize(tables);
  r.in.tables.resize(tables);
  int offset = 0;
  for (int i = 0; i < slots; ++i) {
    PooledTable& t = r.in.tables[i % tables];
    t.dim = dims[i];
    t.slot_offset.push_back(offset);
    t.slot_mean.push_back(all_mean || (mean_sum_mix && i % 2 == 1));
    offset += dims[i];
  }
  for (int g = 0; g < tables; ++g) {
    PooledTable& t = r.in.tables[g];
    for (int64_t k = 0; k < int64_t(num_rows) * t.dim; ++k) r.rows[g].push_back(n(rng));
    for (int s = 0; s < batch; ++s) {
      for (int j = 0; j < t.slots(); ++j) {
        const int values = rng() % 5 == 0 ? 0 : 1 + static_cast<int>(rng() % max_values);
        for (int k = 0; k < values; ++k) {
          r.index[g].push_back(static_cast<uint32_t>(rng() % num_rows));
        }
        r.ends[g].push_back(static_cast<uint32_t>(r.index[g].size()));
      }
    }
    t.rows = r.rows[g];
    t.index = r.index[g];
    t.ends = r.ends[g];
  }
  r.in.batch = batch;
  r.in.dense = r.base.dense.data();
  r.in.labels = r.base.labels.data();
  return r;
}

// The host's pooling of `in` into batch x emb_width floats, in the order and arithmetic of the
// worker's PoolRows (worker/embedding_io.cc): a bag of one value copies its row, else the sum
// from 0 in the values' order, times 1.0f / count for MEAN.
inline std::vector<float> HostPool(const PooledInput& in, int emb_width) {
  std::vector<float> emb(size_t(in.batch) * emb_width, 0.0f);
  for (const PooledTable& t : in.tables) {
    uint32_t begin = 0;
    for (int s = 0; s < in.batch; ++s) {
      for (int j = 0; j < t.slots(); ++j) {
        const uint32_t end = t.ends[size_t(s) * t.slots() + j];
        float* out = emb.data() + size_t(s) * emb_width + t.slot_offset[j];
        for (uint32_t k = begin; k < end; ++k) {
          const float* row = t.rows.data() + size_t(t.index[k]) * t.dim;
          for (int c = 0; c < t.dim; ++c) out[c] = end - begin == 1 ? row[c] : out[c] + row[c];
        }
        if (t.slot_mean[j] && end - begin > 1) {
          const float scale = 1.0f / static_cast<float>(end - begin);
          for (int c = 0; c < t.dim; ++c) out[c] *= scale;
        }
        begin = end;
      }
    }
  }
  return emb;
}

// The host's spreading of `emb_grad` (batch x emb_width) over the rows of `in`, as the worker's
// SpreadGrads: per table, rows x dim floats, each value adding its bag's gradient times the
// bag's scale to its row, in the values' order.
inline std::vector<std::vector<float>> HostSpread(const PooledInput& in, int emb_width,
                                                  const std::vector<float>& emb_grad) {
  std::vector<std::vector<float>> grads;
  for (const PooledTable& t : in.tables) {
    std::vector<float> g(t.rows.size(), 0.0f);
    uint32_t begin = 0;
    for (int s = 0; s < in.batch; ++s) {
      for (int j = 0; j < t.slots(); ++j) {
        const uint32_t end = t.ends[size_t(s) * t.slots() + j];
        const float* bag = emb_grad.data() + size_t(s) * emb_width + t.slot_offset[j];
        const float scale =
            t.slot_mean[j] && end - begin > 1 ? 1.0f / static_cast<float>(end - begin) : 1.0f;
        for (uint32_t k = begin; k < end; ++k) {
          float* out = g.data() + size_t(t.index[k]) * t.dim;
          for (int c = 0; c < t.dim; ++c) out[c] += bag[c] * scale;
        }
        begin = end;
      }
    }
    grads.push_back(std::move(g));
  }
  return grads;
}

}  // namespace testing
}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_INTERNAL_RANDOM_INPUTS_H_

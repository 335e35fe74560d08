#include "worker/model/dlrm.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace ps {
namespace worker {

void SetCpuThreads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}

namespace {

// splitmix64: a platform-independent stream for the initial weights.
uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float Uniform(uint64_t* state) {  // [0, 1)
  return static_cast<float>(SplitMix(state) >> 40) * (1.0f / 16777216.0f);
}

float Sigmoid(float z) {
  return z >= 0 ? 1.0f / (1.0f + std::exp(-z)) : std::exp(z) / (1.0f + std::exp(z));
}

}  // namespace

absl::StatusOr<DlrmShape> DlrmShape::FromJob(const config::Job& job) {
  DlrmShape shape;
  const config::Model& m = job.model();
  shape.num_dense = static_cast<int>(m.num_dense_features());
  shape.num_sparse = static_cast<int>(m.num_sparse_features());
  if (m.bottom_mlp_size() > 0) shape.bottom.assign(m.bottom_mlp().begin(), m.bottom_mlp().end());
  if (m.top_mlp_size() > 0) shape.top.assign(m.top_mlp().begin(), m.top_mlp().end());
  if (m.dot_interaction()) {
    return absl::UnimplementedError("model.dot_interaction is not implemented yet");
  }
  if (job.tables_size() == 0) return absl::InvalidArgumentError("the job has no tables");
  int dim = -1;
  for (int f = 0; f < shape.num_sparse; ++f) {
    const std::string& name =
        m.has_shared_table() ? m.shared_table() : job.tables(std::min(f, job.tables_size() - 1)).name();
    for (const config::Table& t : job.tables()) {
      if (t.name() != name) continue;
      if (dim >= 0 && static_cast<int>(t.dim()) != dim) {
        return absl::InvalidArgumentError(
            "the tables of the sparse fields must all have the same dim");
      }
      dim = static_cast<int>(t.dim());
    }
  }
  shape.emb_dim = dim > 0 ? dim : static_cast<int>(job.tables(0).dim());
  if (shape.bottom.empty() || shape.bottom.back() != shape.emb_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model.bottom_mlp must end with the embedding dim %d", shape.emb_dim));
  }
  return shape;
}

DlrmLayout LayoutOf(const DlrmShape& shape) {
  DlrmLayout layout;
  size_t n = 0;
  int in = shape.num_dense;
  for (int out : shape.bottom) {
    layout.bottom.push_back(DlrmLayer{in, out, n, true});
    n += size_t(out) * in + out;
    in = out;
  }
  in = shape.emb_dim * (1 + shape.num_sparse);
  std::vector<int> top_sizes = shape.top;
  top_sizes.push_back(1);
  for (size_t i = 0; i < top_sizes.size(); ++i) {
    const bool last = i + 1 == top_sizes.size();
    layout.top.push_back(DlrmLayer{in, top_sizes[i], n, !last});
    n += size_t(top_sizes[i]) * in + top_sizes[i];
    in = top_sizes[i];
  }
  layout.num_params = n;
  return layout;
}

absl::StatusOr<std::unique_ptr<Dlrm>> Dlrm::Create(const DlrmShape& shape, uint64_t seed) {
  if (shape.num_dense < 1 || shape.num_sparse < 0 || shape.emb_dim < 1) {
    return absl::InvalidArgumentError("the model needs dense features and a positive emb_dim");
  }
  DlrmLayout layout = LayoutOf(shape);
  auto model = std::unique_ptr<Dlrm>(new Dlrm(shape, std::move(layout.bottom),
                                              std::move(layout.top), layout.num_params));
  uint64_t state = seed ^ 0x5eed0f0d1e5ull;
  for (const auto* layers : {&model->bottom_, &model->top_}) {
    for (const Layer& l : *layers) {
      const float limit = std::sqrt(6.0f / static_cast<float>(l.in + l.out));
      float* w = model->params_.data() + l.weight;
      for (size_t i = 0; i < size_t(l.out) * l.in; ++i) w[i] = (2 * Uniform(&state) - 1) * limit;
    }
  }
  return model;
}

Dlrm::Dlrm(const DlrmShape& shape, std::vector<Layer> bottom, std::vector<Layer> top, size_t n)
    : shape_(shape), bottom_(std::move(bottom)), top_(std::move(top)), params_(n, 0.0f) {
  bottom_acts_.resize(bottom_.size() + 1);
  top_acts_.resize(top_.size() + 1);
}

void Dlrm::Forward(const std::vector<Layer>& layers, int batch,
                   std::vector<std::vector<float>>* acts) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    const float* x = (*acts)[i].data();
    std::vector<float>& y = (*acts)[i + 1];
    y.resize(size_t(batch) * l.out);
    const float* w = params_.data() + l.weight;
    const float* b = w + size_t(l.out) * l.in;
    // y = x w^T + b
    for (int r = 0; r < batch; ++r) std::memcpy(&y[size_t(r) * l.out], b, l.out * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, l.out, l.in, 1.0f, x, l.in, w,
                l.in, 1.0f, y.data(), l.out);
    if (l.relu) {
      for (float& v : y) v = std::max(v, 0.0f);
    }
  }
}

void Dlrm::Backward(const std::vector<Layer>& layers, int batch,
                    const std::vector<std::vector<float>>& acts, std::vector<float>* grad,
                    float* dense_grad) {
  for (size_t i = layers.size(); i-- > 0;) {
    const Layer& l = layers[i];
    const std::vector<float>& y = acts[i + 1];
    const float* x = acts[i].data();
    if (l.relu) {
      for (size_t j = 0; j < grad->size(); ++j) {
        if (y[j] <= 0.0f) (*grad)[j] = 0.0f;
      }
    }
    float* dw = dense_grad + l.weight;
    float* db = dw + size_t(l.out) * l.in;
    // dW = dY^T x; db = column sums of dY; dX = dY W
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l.out, l.in, batch, 1.0f, grad->data(),
                l.out, x, l.in, 0.0f, dw, l.in);
    std::fill(db, db + l.out, 0.0f);
    for (int r = 0; r < batch; ++r) {
      const float* g = grad->data() + size_t(r) * l.out;
      for (int c = 0; c < l.out; ++c) db[c] += g[c];
    }
    grad2_.resize(size_t(batch) * l.in);
    const float* w = params_.data() + l.weight;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, l.in, l.out, 1.0f, grad->data(),
                l.out, w, l.in, 0.0f, grad2_.data(), l.in);
    std::swap(*grad, grad2_);
  }
}

void Dlrm::ForwardAll(int batch, const float* dense, const float* emb) {
  bottom_acts_[0].assign(dense, dense + size_t(batch) * shape_.num_dense);
  Forward(bottom_, batch, &bottom_acts_);
  // Concatenate the bottom output with the embeddings: [z, e_0, ..., e_{S-1}] per sample.
  const int e = shape_.emb_dim;
  const int width = e * (1 + shape_.num_sparse);
  std::vector<float>& cat = top_acts_[0];
  cat.resize(size_t(batch) * width);
  const std::vector<float>& z = bottom_acts_.back();
  for (int r = 0; r < batch; ++r) {
    float* row = cat.data() + size_t(r) * width;
    std::memcpy(row, z.data() + size_t(r) * e, e * sizeof(float));
    std::memcpy(row + e, emb + size_t(r) * shape_.num_sparse * e,
                size_t(shape_.num_sparse) * e * sizeof(float));
  }
  Forward(top_, batch, &top_acts_);
}

float Dlrm::ForwardBackward(int batch, const float* dense, const float* emb, const float* labels,
                            float loss_scale, float* dense_grad, float* emb_grad, float* probs) {
  ForwardAll(batch, dense, emb);
  const std::vector<float>& logits = top_acts_.back();
  double loss = 0;
  grad_.resize(batch);
  for (int r = 0; r < batch; ++r) {
    const float z = logits[r];
    const float y = labels[r];
    probs[r] = Sigmoid(z);
    // log(1 + exp(z)) - y z, computed stably.
    loss += std::max(z, 0.0f) + std::log1p(std::exp(-std::fabs(z))) - y * z;
    grad_[r] = (probs[r] - y) * loss_scale / batch;
  }
  Backward(top_, batch, top_acts_, &grad_, dense_grad);
  // grad_ is now d(loss)/d(concatenation): split it into the bottom output and the embeddings.
  const int e = shape_.emb_dim;
  const int width = e * (1 + shape_.num_sparse);
  std::vector<float> dz(size_t(batch) * e);
  for (int r = 0; r < batch; ++r) {
    const float* row = grad_.data() + size_t(r) * width;
    std::memcpy(dz.data() + size_t(r) * e, row, e * sizeof(float));
    std::memcpy(emb_grad + size_t(r) * shape_.num_sparse * e, row + e,
                size_t(shape_.num_sparse) * e * sizeof(float));
  }
  Backward(bottom_, batch, bottom_acts_, &dz, dense_grad);
  return static_cast<float>(loss / batch);
}

void Dlrm::Predict(int batch, const float* dense, const float* emb, float* probs) {
  ForwardAll(batch, dense, emb);
  const std::vector<float>& logits = top_acts_.back();
  for (int r = 0; r < batch; ++r) probs[r] = Sigmoid(logits[r]);
}

}  // namespace worker
}  // namespace ps

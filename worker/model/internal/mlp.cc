#include "worker/model/internal/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <utility>

namespace ps {
namespace worker {
namespace internal {
namespace {

// Grows `v` to at least n floats; never shrinks, so a smaller batch reuses the buffer.
float* Reserve(std::vector<float>* v, size_t n) {
  if (v->size() < n) v->resize(n);
  return v->data();
}

}  // namespace

void Gemm::operator()(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                      const float* b, int ldb, float beta, float* c, int ldc) const {
  if (trace_ != nullptr) trace_->push_back(GemmShape{trans_a, trans_b, m, n, k});
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

Mlp::Mlp(std::vector<DenseLayer> layers, const Gemm* gemm)
    : layers_(std::move(layers)), gemm_(gemm), acts_(layers_.size()) {}

const float* Mlp::Forward(const float* params, int batch, absl::Span<const InputBlock> input) {
  input_.assign(input.begin(), input.end());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DenseLayer& l = layers_[i];
    const float* w = params + l.weight;
    const float* b = w + size_t(l.out) * l.in;
    float* y = Reserve(&acts_[i], size_t(batch) * l.out);
    // y = x W^T, block by block of x's columns (and of W's), then + b and ReLU in one pass.
    if (i == 0) {
      int col = 0;
      for (size_t s = 0; s < input_.size(); ++s) {
        const InputBlock& x = input_[s];
        (*gemm_)(false, true, batch, l.out, x.width, x.data, x.ld, w + col, l.in,
                 s == 0 ? 0.0f : 1.0f, y, l.out);
        col += x.width;
      }
    } else {
      (*gemm_)(false, true, batch, l.out, l.in, acts_[i - 1].data(), l.in, w, l.in, 0.0f, y, l.out);
    }
    for (int r = 0; r < batch; ++r) {
      float* row = y + size_t(r) * l.out;
      if (l.relu) {
        for (int c = 0; c < l.out; ++c) row[c] = std::max(row[c] + b[c], 0.0f);
      } else {
        for (int c = 0; c < l.out; ++c) row[c] += b[c];
      }
    }
  }
  return acts_.back().data();
}

void Mlp::Backward(const float* params, int batch, float* dy, float* dense_grad,
                   absl::Span<const GradBlock> input_grad) {
  size_t widest = 0;
  for (const DenseLayer& l : layers_) widest = std::max<size_t>(widest, l.in);
  float* spare = Reserve(&grad_a_, size_t(batch) * widest);
  float* next = Reserve(&grad_b_, size_t(batch) * widest);
  float* g = dy;
  for (size_t i = layers_.size(); i-- > 0;) {
    const DenseLayer& l = layers_[i];
    const float* w = params + l.weight;
    float* dw = dense_grad + l.weight;
    float* db = dw + size_t(l.out) * l.in;
    // Mask by the ReLU and sum the columns into db, in one pass.
    const float* y = acts_[i].data();
    std::fill(db, db + l.out, 0.0f);
    for (int r = 0; r < batch; ++r) {
      float* row = g + size_t(r) * l.out;
      if (l.relu) {
        const float* yr = y + size_t(r) * l.out;
        for (int c = 0; c < l.out; ++c) {
          row[c] = yr[c] > 0.0f ? row[c] : 0.0f;
          db[c] += row[c];
        }
      } else {
        for (int c = 0; c < l.out; ++c) db[c] += row[c];
      }
    }
    if (i > 0) {
      // dW = dY^T x; dX = dY W.
      (*gemm_)(true, false, l.out, l.in, batch, g, l.out, acts_[i - 1].data(), l.in, 0.0f, dw,
               l.in);
      (*gemm_)(false, false, batch, l.in, l.out, g, l.out, w, l.in, 0.0f, spare, l.in);
      g = spare;
      std::swap(spare, next);
      continue;
    }
    int col = 0;
    for (size_t s = 0; s < input_.size(); ++s) {
      const InputBlock& x = input_[s];
      (*gemm_)(true, false, l.out, x.width, batch, g, l.out, x.data, x.ld, 0.0f, dw + col, l.in);
      if (s < input_grad.size() && input_grad[s].data != nullptr) {
        (*gemm_)(false, false, batch, x.width, l.out, g, l.out, w + col, l.in, 0.0f,
                 input_grad[s].data, input_grad[s].ld);
      }
      col += x.width;
    }
  }
}

}  // namespace internal
}  // namespace worker
}  // namespace ps

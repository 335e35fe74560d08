// A host stand-in for the cuda_kernels functions a CUDA model calls (device.h, memory.h, blas.h,
// dense.h, interaction.h, embedding.h), for tests that run without a GPU: "device" memory is host
// memory, a stream is nothing (every call completes before it returns), the GEMM is a plain loop,
// and interaction.h's and embedding.h's kernels call their per-thread functions
// (internal/interaction_math.h, internal/embedding_math.h) for every thread index in turn, as the
// device does. Pinned host memory is plain host memory and events are nothing. A program links this
// instead of the real libraries
// (//cuda_kernels and //cuda_kernels:blas), never with them.
//
// Fresh allocations are filled with NaN, so a model that reads a float it never wrote shows it in
// its outputs. The argument checks are the real launchers' (same kInvalidArgument cases) where a
// caller could get them wrong: sizes and leading dimensions.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "cuda_kernels/blas.h"
#include "cuda_kernels/dense.h"
#include "cuda_kernels/device.h"
#include "cuda_kernels/embedding.h"
#include "cuda_kernels/interaction.h"
#include "cuda_kernels/internal/embedding_math.h"
#include "cuda_kernels/internal/interaction_math.h"
#include "cuda_kernels/memory.h"

namespace ps {
namespace cuda {
namespace {

Error Invalid(const char* where, const std::string& what) {
  Error e;
  e.kind = Error::kInvalidArgument;
  e.message = std::string(where) + ": " + what;
  return e;
}

float Sigmoid1(float z) {
  return z >= 0 ? 1.0f / (1.0f + std::exp(-z)) : std::exp(z) / (1.0f + std::exp(z));
}

}  // namespace

int DeviceCount() { return 1; }
std::string DeviceDescription(int index) { return "host emulation of a CUDA device"; }

Error DeviceAlloc(size_t bytes, void** ptr) {
  if (bytes == 0) {
    *ptr = nullptr;
    return Error();
  }
  // Exactly `bytes`, so that a sanitizer sees a write past the end.
  float* p = static_cast<float*>(std::malloc(bytes));
  for (size_t i = 0; i < bytes / sizeof(float); ++i) {
    p[i] = std::numeric_limits<float>::quiet_NaN();
  }
  *ptr = p;
  return Error();
}

Error DeviceFree(void* ptr) {
  std::free(ptr);
  return Error();
}

Error HostAlloc(size_t bytes, void** ptr) { return DeviceAlloc(bytes, ptr); }
Error HostFree(void* ptr) { return DeviceFree(ptr); }

Error Copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return Error();
}

Error Copy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width_bytes,
             size_t height, void* stream) {
  if (width_bytes > dst_pitch || width_bytes > src_pitch) {
    return Invalid("Copy2D", "a pitch is shorter than the width");
  }
  for (size_t r = 0; r < height; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                static_cast<const char*>(src) + r * src_pitch, width_bytes);
  }
  return Error();
}

Error Zero(void* ptr, size_t bytes, void* stream) {
  if (bytes > 0) std::memset(ptr, 0, bytes);
  return Error();
}

Error StreamCreate(void** stream) {
  *stream = nullptr;
  return Error();
}
Error StreamDestroy(void* stream) { return Error(); }
Error StreamSynchronize(void* stream) { return Error(); }

Error EventCreate(void** event) {
  *event = nullptr;
  return Error();
}
Error EventDestroy(void* event) { return Error(); }
Error EventRecord(void* event, void* stream) { return Error(); }
Error StreamWaitEvent(void* stream, void* event) { return Error(); }

Error Blas::Create(void* stream, std::unique_ptr<Blas>* out) {
  out->reset(new Blas(nullptr));
  return Error();
}

Blas::~Blas() = default;

Error Blas::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m < 0 || n < 0 || k < 0) return Invalid("Blas::Gemm", "negative sizes");
  if (lda < std::max(1, trans_a ? m : k) || ldb < std::max(1, trans_b ? k : n) ||
      ldc < std::max(1, n)) {
    return Invalid("Blas::Gemm", "a leading dimension is shorter than a row");
  }
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int p = 0; p < k; ++p) {
        const float av = trans_a ? a[size_t(p) * lda + i] : a[size_t(i) * lda + p];
        const float bv = trans_b ? b[size_t(j) * ldb + p] : b[size_t(p) * ldb + j];
        acc += av * bv;
      }
      float& out = c[size_t(i) * ldc + j];
      out = beta == 0.0f ? alpha * acc : alpha * acc + beta * out;  // beta 0: C is not read
    }
  }
  return Error();
}

Error BiasRelu(float* y, const float* bias, int rows, int cols, bool relu, void* stream) {
  if (rows < 0 || cols < 0) return Invalid("BiasRelu", "negative sizes");
  for (int64_t i = 0; i < int64_t(rows) * cols; ++i) {
    const float v = y[i] + bias[i % cols];
    y[i] = relu ? std::max(v, 0.0f) : v;
  }
  return Error();
}

Error BiasReluBackward(float* grad, const float* y, int rows, int cols, bool relu, float* bias_grad,
                       void* stream) {
  if (rows < 0 || cols < 0) return Invalid("BiasReluBackward", "negative sizes");
  for (int c = 0; c < cols; ++c) {
    float acc = 0.0f;
    for (int r = 0; r < rows; ++r) {
      const int64_t i = int64_t(r) * cols + c;
      if (relu && y[i] <= 0.0f) grad[i] = 0.0f;
      acc += grad[i];
    }
    bias_grad[c] = acc;
  }
  return Error();
}

Error SigmoidBce(const float* logits, const float* labels, int n, float loss_scale, float* probs,
                 float* grad, double* loss_sum, void* stream) {
  if (n < 0) return Invalid("SigmoidBce", "negative n");
  double acc = 0;
  for (int r = 0; r < n; ++r) {
    const float z = logits[r], y = labels[r];
    probs[r] = Sigmoid1(z);
    acc += std::max(z, 0.0f) + std::log1p(std::exp(-std::fabs(z))) - y * z;
    grad[r] = (probs[r] - y) * loss_scale / static_cast<float>(n);
  }
  *loss_sum = acc;
  return Error();
}

Error Sigmoid(const float* logits, int n, float* probs, void* stream) {
  if (n < 0) return Invalid("Sigmoid", "negative n");
  for (int r = 0; r < n; ++r) probs[r] = Sigmoid1(logits[r]);
  return Error();
}

// interaction.h: the same checks as interaction.cu, then every thread in turn.

Error DotInteraction(const float* z, int64_t z_ld, const float* emb, int64_t emb_ld, int batch,
                     int fields, int dim, float* out, int64_t out_ld, void* stream) {
  if (batch < 0 || fields < 0 || dim < 1 || z_ld < dim || emb_ld < int64_t(fields) * dim ||
      out_ld < internal::NumPairs(fields)) {
    return Invalid("DotInteraction", "bad sizes");
  }
  const internal::DotArgs a{z, z_ld, emb, emb_ld, batch, fields, dim};
  for (int64_t t = 0; t < internal::DotForwardThreads(a); ++t) {
    internal::DotForwardThread(t, a, out, out_ld);
  }
  return Error();
}

Error DotInteractionBackward(const float* grad, int64_t grad_ld, const float* z, int64_t z_ld,
                             const float* emb, int64_t emb_ld, int batch, int fields, int dim,
                             float* z_grad, int64_t z_grad_ld, float* emb_grad, int64_t emb_grad_ld,
                             void* stream) {
  if (batch < 0 || fields < 0 || dim < 1 || z_ld < dim || emb_ld < int64_t(fields) * dim ||
      grad_ld < internal::NumPairs(fields) || z_grad_ld < dim ||
      emb_grad_ld < int64_t(fields) * dim) {
    return Invalid("DotInteractionBackward", "bad sizes");
  }
  if (fields == 0) return Error();
  const internal::DotArgs a{z, z_ld, emb, emb_ld, batch, fields, dim};
  for (int64_t t = 0; t < internal::DotBackwardThreads(a); ++t) {
    internal::DotBackwardThread(t, a, grad, grad_ld, z_grad, z_grad_ld, emb_grad, emb_grad_ld);
  }
  return Error();
}

Error LinearForward(const float* emb, int64_t emb_ld, int offset, int n, int batch, float* logits,
                    void* stream) {
  if (offset < 0 || n < 0 || batch < 0 || emb_ld < int64_t(offset) + n) {
    return Invalid("LinearForward", "bad sizes");
  }
  if (n == 0) return Error();
  for (int64_t r = 0; r < batch; ++r) {
    internal::LinearForwardThread(r, emb, emb_ld, offset, n, logits);
  }
  return Error();
}

Error LinearBackward(const float* dlogit, int offset, int n, int batch, float* emb_grad,
                     int64_t emb_grad_ld, void* stream) {
  if (offset < 0 || n < 0 || batch < 0 || emb_grad_ld < int64_t(offset) + n) {
    return Invalid("LinearBackward", "bad sizes");
  }
  for (int64_t t = 0; t < int64_t(batch) * n; ++t) {
    internal::LinearBackwardThread(t, dlogit, offset, n, emb_grad, emb_grad_ld);
  }
  return Error();
}

Error FmForward(const float* emb, int64_t emb_ld, int fields, int dim, int batch, float* logits,
                void* stream) {
  if (fields < 0 || batch < 0 || dim < 1 || emb_ld < int64_t(fields) * dim) {
    return Invalid("FmForward", "bad sizes");
  }
  if (fields == 0) return Error();
  for (int64_t r = 0; r < batch; ++r) {
    internal::FmForwardThread(r, emb, emb_ld, fields, dim, logits);
  }
  return Error();
}

Error FmBackward(const float* emb, int64_t emb_ld, int fields, int dim, int batch,
                 const float* dlogit, float* emb_grad, int64_t emb_grad_ld, void* stream) {
  if (fields < 0 || batch < 0 || dim < 1 || emb_ld < int64_t(fields) * dim ||
      emb_grad_ld < int64_t(fields) * dim) {
    return Invalid("FmBackward", "bad sizes");
  }
  for (int64_t t = 0; t < int64_t(batch) * fields * dim; ++t) {
    internal::FmBackwardThread(t, emb, emb_ld, fields, dim, dlogit, emb_grad, emb_grad_ld);
  }
  return Error();
}

Error CrossForward(const float* x0, const float* x, const float* bias, int batch, int width,
                   float* u, float* next, void* stream) {
  if (batch < 0 || width < 0) return Invalid("CrossForward", "negative sizes");
  for (int64_t t = 0; t < int64_t(batch) * width; ++t) {
    internal::CrossForwardThread(t, width, x0, x, bias, u, next);
  }
  return Error();
}

Error CrossBackward(const float* g, const float* x0, const float* u, int batch, int width,
                    float* du, float* dx0, void* stream) {
  if (batch < 0 || width < 0) return Invalid("CrossBackward", "negative sizes");
  for (int64_t t = 0; t < int64_t(batch) * width; ++t) {
    internal::CrossBackwardThread(t, g, x0, u, du, dx0);
  }
  return Error();
}

Error Add(const float* x, int64_t n, float* y, void* stream) {
  if (n < 0) return Invalid("Add", "negative n");
  for (int64_t t = 0; t < n; ++t) internal::AddThread(t, x, y);
  return Error();
}

// embedding.h: the same checks as embedding.cu, then every thread in turn.

Error GatherPooled(const float* rows, int64_t num_rows, int dim, const Bags& bags, float* out,
                   int64_t out_stride, void* stream) {
  if (num_rows < 0 || bags.batch < 0 || dim < 1 || bags.slots < 1 || out_stride < dim) {
    return Invalid("GatherPooled", "bad sizes");
  }
  const int64_t n = internal::GatherThreads(bags, dim);
  for (int64_t t = 0; t < n; ++t) {
    internal::GatherPooledThread(t, rows, num_rows, dim, bags, out, out_stride);
  }
  return Error();
}

Error BuildRowCsr(const uint32_t* index, const uint32_t* ends, int batch, int slots,
                  const uint8_t* slot_mean, int64_t num_rows, RowCsr* csr) {
  return internal::BuildRowCsrOnHost(index, ends, batch, slots, slot_mean, num_rows, csr);
}

Error ScatterRows(const float* bag_grad, int64_t in_stride, int dim, const Bags& b,
                  const int32_t* offsets, const int32_t* bags, const float* bag_weight,
                  int64_t num_rows, float* row_grad, void* stream) {
  if (num_rows < 0 || dim < 1 || b.slots < 1 || b.batch < 0 || in_stride < dim) {
    return Invalid("ScatterRows", "bad sizes");
  }
  for (int64_t t = 0; t < num_rows * dim; ++t) {
    internal::ScatterRowsThread(t, bag_grad, in_stride, dim, b, offsets, bags, bag_weight,
                                row_grad);
  }
  return Error();
}

Error CopyRows(const float* src, const uint32_t* src_rows, float* dst, const uint32_t* dst_rows,
               int64_t n, int dim, void* stream) {
  if (n < 0 || dim < 1) return Invalid("CopyRows", "n < 0 or dim < 1");
  for (int64_t t = 0; t < n * dim; ++t) {
    internal::CopyRowsThread(t, src, src_rows, dst, dst_rows, dim);
  }
  return Error();
}

}  // namespace cuda
}  // namespace ps

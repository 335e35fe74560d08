#include <cuda_runtime.h>

#include "cuda_kernels/interaction.h"
#include "cuda_kernels/internal/check.cuh"
#include "cuda_kernels/internal/interaction_math.h"

namespace ps {
namespace cuda {
namespace {

using internal::AsStream;
using internal::BlocksFor;
using internal::DotArgs;
using internal::InvalidArgument;
using internal::kThreads;
using internal::LaunchStatus;

// Every kernel is one call of its per-thread function (internal/interaction_math.h) per thread.
__device__ inline int64_t ThreadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__global__ void DotForwardKernel(DotArgs a, int64_t n, float* out, int64_t out_ld) {
  const int64_t t = ThreadIndex();
  if (t < n) internal::DotForwardThread(t, a, out, out_ld);
}

__global__ void DotBackwardKernel(DotArgs a, int64_t n, const float* grad, int64_t grad_ld,
                                  float* z_grad, int64_t z_grad_ld, float* emb_grad,
                                  int64_t emb_grad_ld) {
  const int64_t t = ThreadIndex();
  if (t < n) {
    internal::DotBackwardThread(t, a, grad, grad_ld, z_grad, z_grad_ld, emb_grad, emb_grad_ld);
  }
}

__global__ void LinearForwardKernel(const float* emb, int64_t emb_ld, int offset, int n, int batch,
                                    float* logits) {
  const int64_t t = ThreadIndex();
  if (t < batch) internal::LinearForwardThread(t, emb, emb_ld, offset, n, logits);
}

__global__ void LinearBackwardKernel(const float* dlogit, int offset, int n, int64_t total,
                                     float* emb_grad, int64_t emb_grad_ld) {
  const int64_t t = ThreadIndex();
  if (t < total) internal::LinearBackwardThread(t, dlogit, offset, n, emb_grad, emb_grad_ld);
}

__global__ void FmForwardKernel(const float* emb, int64_t emb_ld, int fields, int dim, int batch,
                                float* logits) {
  const int64_t t = ThreadIndex();
  if (t < batch) internal::FmForwardThread(t, emb, emb_ld, fields, dim, logits);
}

__global__ void FmBackwardKernel(const float* emb, int64_t emb_ld, int fields, int dim,
                                 int64_t total, const float* dlogit, float* emb_grad,
                                 int64_t emb_grad_ld) {
  const int64_t t = ThreadIndex();
  if (t < total) {
    internal::FmBackwardThread(t, emb, emb_ld, fields, dim, dlogit, emb_grad, emb_grad_ld);
  }
}

__global__ void CrossForwardKernel(const float* x0, const float* x, const float* bias,
                                   int64_t total, int width, float* u, float* next) {
  const int64_t t = ThreadIndex();
  if (t < total) internal::CrossForwardThread(t, width, x0, x, bias, u, next);
}

__global__ void CrossBackwardKernel(const float* g, const float* x0, const float* u, int64_t total,
                                    float* du, float* dx0) {
  const int64_t t = ThreadIndex();
  if (t < total) internal::CrossBackwardThread(t, g, x0, u, du, dx0);
}

__global__ void AddKernel(const float* x, int64_t n, float* y) {
  const int64_t t = ThreadIndex();
  if (t < n) internal::AddThread(t, x, y);
}

// The checks DotInteraction and its backward share.
Error CheckDot(const char* where, int64_t z_ld, int64_t emb_ld, int batch, int fields, int dim) {
  if (batch < 0 || fields < 0 || dim < 1) {
    return InvalidArgument(where, "negative batch or fields, or dim < 1");
  }
  if (z_ld < dim || emb_ld < static_cast<int64_t>(fields) * dim) {
    return InvalidArgument(where, "z_ld is shorter than dim or emb_ld than fields * dim");
  }
  return Error();
}

}  // namespace

Error DotInteraction(const float* z, int64_t z_ld, const float* emb, int64_t emb_ld, int batch,
                     int fields, int dim, float* out, int64_t out_ld, void* stream) {
  constexpr char kWhere[] = "DotInteraction";
  Error e = CheckDot(kWhere, z_ld, emb_ld, batch, fields, dim);
  if (!e.ok()) return e;
  if (out_ld < internal::NumPairs(fields)) {
    return InvalidArgument(kWhere, "out_ld is shorter than the number of pairs");
  }
  const DotArgs a{z, z_ld, emb, emb_ld, batch, fields, dim};
  const int64_t n = internal::DotForwardThreads(a);
  if (n == 0) return Error();
  DotForwardKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(a, n, out, out_ld);
  return LaunchStatus(kWhere);
}

Error DotInteractionBackward(const float* grad, int64_t grad_ld, const float* z, int64_t z_ld,
                             const float* emb, int64_t emb_ld, int batch, int fields, int dim,
                             float* z_grad, int64_t z_grad_ld, float* emb_grad, int64_t emb_grad_ld,
                             void* stream) {
  constexpr char kWhere[] = "DotInteractionBackward";
  Error e = CheckDot(kWhere, z_ld, emb_ld, batch, fields, dim);
  if (!e.ok()) return e;
  if (grad_ld < internal::NumPairs(fields) || z_grad_ld < dim ||
      emb_grad_ld < static_cast<int64_t>(fields) * dim) {
    return InvalidArgument(kWhere,
                           "grad_ld is shorter than the number of pairs, z_grad_ld than dim or "
                           "emb_grad_ld than fields * dim");
  }
  // Without a field there is no pair: z's gradient gains nothing.
  if (fields == 0) return Error();
  const DotArgs a{z, z_ld, emb, emb_ld, batch, fields, dim};
  const int64_t n = internal::DotBackwardThreads(a);
  if (n == 0) return Error();
  DotBackwardKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(
      a, n, grad, grad_ld, z_grad, z_grad_ld, emb_grad, emb_grad_ld);
  return LaunchStatus(kWhere);
}

Error LinearForward(const float* emb, int64_t emb_ld, int offset, int n, int batch, float* logits,
                    void* stream) {
  constexpr char kWhere[] = "LinearForward";
  if (offset < 0 || n < 0 || batch < 0) return InvalidArgument(kWhere, "negative sizes");
  if (emb_ld < static_cast<int64_t>(offset) + n) {
    return InvalidArgument(kWhere, "emb_ld is shorter than offset + n");
  }
  if (n == 0 || batch == 0) return Error();
  LinearForwardKernel<<<BlocksFor(batch), kThreads, 0, AsStream(stream)>>>(emb, emb_ld, offset, n,
                                                                           batch, logits);
  return LaunchStatus(kWhere);
}

Error LinearBackward(const float* dlogit, int offset, int n, int batch, float* emb_grad,
                     int64_t emb_grad_ld, void* stream) {
  constexpr char kWhere[] = "LinearBackward";
  if (offset < 0 || n < 0 || batch < 0) return InvalidArgument(kWhere, "negative sizes");
  if (emb_grad_ld < static_cast<int64_t>(offset) + n) {
    return InvalidArgument(kWhere, "emb_grad_ld is shorter than offset + n");
  }
  const int64_t total = static_cast<int64_t>(batch) * n;
  if (total == 0) return Error();
  LinearBackwardKernel<<<BlocksFor(total), kThreads, 0, AsStream(stream)>>>(
      dlogit, offset, n, total, emb_grad, emb_grad_ld);
  return LaunchStatus(kWhere);
}

Error FmForward(const float* emb, int64_t emb_ld, int fields, int dim, int batch, float* logits,
                void* stream) {
  constexpr char kWhere[] = "FmForward";
  if (fields < 0 || batch < 0 || dim < 1) {
    return InvalidArgument(kWhere, "negative sizes or dim < 1");
  }
  if (emb_ld < static_cast<int64_t>(fields) * dim) {
    return InvalidArgument(kWhere, "emb_ld is shorter than fields * dim");
  }
  if (fields == 0 || batch == 0) return Error();
  FmForwardKernel<<<BlocksFor(batch), kThreads, 0, AsStream(stream)>>>(emb, emb_ld, fields, dim,
                                                                       batch, logits);
  return LaunchStatus(kWhere);
}

Error FmBackward(const float* emb, int64_t emb_ld, int fields, int dim, int batch,
                 const float* dlogit, float* emb_grad, int64_t emb_grad_ld, void* stream) {
  constexpr char kWhere[] = "FmBackward";
  if (fields < 0 || batch < 0 || dim < 1) {
    return InvalidArgument(kWhere, "negative sizes or dim < 1");
  }
  if (emb_ld < static_cast<int64_t>(fields) * dim ||
      emb_grad_ld < static_cast<int64_t>(fields) * dim) {
    return InvalidArgument(kWhere, "emb_ld or emb_grad_ld is shorter than fields * dim");
  }
  const int64_t total = static_cast<int64_t>(batch) * fields * dim;
  if (total == 0) return Error();
  FmBackwardKernel<<<BlocksFor(total), kThreads, 0, AsStream(stream)>>>(
      emb, emb_ld, fields, dim, total, dlogit, emb_grad, emb_grad_ld);
  return LaunchStatus(kWhere);
}

Error CrossForward(const float* x0, const float* x, const float* bias, int batch, int width,
                   float* u, float* next, void* stream) {
  constexpr char kWhere[] = "CrossForward";
  if (batch < 0 || width < 0) return InvalidArgument(kWhere, "negative sizes");
  const int64_t total = static_cast<int64_t>(batch) * width;
  if (total == 0) return Error();
  CrossForwardKernel<<<BlocksFor(total), kThreads, 0, AsStream(stream)>>>(x0, x, bias, total, width,
                                                                          u, next);
  return LaunchStatus(kWhere);
}

Error CrossBackward(const float* g, const float* x0, const float* u, int batch, int width,
                    float* du, float* dx0, void* stream) {
  constexpr char kWhere[] = "CrossBackward";
  if (batch < 0 || width < 0) return InvalidArgument(kWhere, "negative sizes");
  const int64_t total = static_cast<int64_t>(batch) * width;
  if (total == 0) return Error();
  CrossBackwardKernel<<<BlocksFor(total), kThreads, 0, AsStream(stream)>>>(g, x0, u, total, du,
                                                                           dx0);
  return LaunchStatus(kWhere);
}

Error Add(const float* x, int64_t n, float* y, void* stream) {
  constexpr char kWhere[] = "Add";
  if (n < 0) return InvalidArgument(kWhere, "negative n");
  if (n == 0) return Error();
  AddKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(x, n, y);
  return LaunchStatus(kWhere);
}

}  // namespace cuda
}  // namespace ps

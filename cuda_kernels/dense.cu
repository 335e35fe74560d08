#include <cuda_runtime.h>

#include "cuda_kernels/dense.h"
#include "cuda_kernels/internal/check.cuh"

namespace ps {
namespace cuda {
namespace {

using internal::AsStream;
using internal::BlocksFor;
using internal::InvalidArgument;
using internal::kThreads;
using internal::LaunchStatus;

__global__ void BiasReluKernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                               int cols, bool relu) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const float v = y[t] + bias[t % cols];
  y[t] = relu ? fmaxf(v, 0.0f) : v;
}

// A block of 32 x kRowThreads threads owns 32 columns: threadIdx.x picks the column (coalesced
// reads of a row), threadIdx.y a residue of the rows. Each thread sums its rows in order, then
// thread y == 0 sums the kRowThreads partial sums in order.
constexpr int kRowThreads = 32;

__global__ void BiasReluBackwardKernel(float* __restrict__ grad, const float* __restrict__ y,
                                       int rows, int cols, bool relu,
                                       float* __restrict__ bias_grad) {
  __shared__ float partial[kRowThreads][33];  // padded against bank conflicts
  const int c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += kRowThreads) {
      const int64_t i = static_cast<int64_t>(r) * cols + c;
      float g = grad[i];
      if (relu && y[i] <= 0.0f) {
        g = 0.0f;
        grad[i] = 0.0f;
      }
      acc += g;
    }
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = 0.0f;
    for (int k = 0; k < kRowThreads; ++k) sum += partial[k][threadIdx.x];
    bias_grad[c] = sum;
  }
}

__device__ float StableSigmoid(float z) {
  if (z >= 0.0f) return 1.0f / (1.0f + expf(-z));
  const float e = expf(z);
  return e / (1.0f + e);
}

constexpr int kLossThreads = 1024;  // a power of two, for the tree below

__global__ void SigmoidBceKernel(const float* __restrict__ logits, const float* __restrict__ labels,
                                 int n, float loss_scale, float* __restrict__ probs,
                                 float* __restrict__ grad, double* __restrict__ loss_sum) {
  __shared__ double partial[kLossThreads];
  double acc = 0.0;
  for (int r = threadIdx.x; r < n; r += kLossThreads) {
    const float z = logits[r];
    const float y = labels[r];
    const float p = StableSigmoid(z);
    probs[r] = p;
    const float loss = fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z))) - y * z;
    acc += static_cast<double>(loss);
    grad[r] = (p - y) * loss_scale / static_cast<float>(n);
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kLossThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum = partial[0];
}

__global__ void SigmoidKernel(const float* __restrict__ logits, int n, float* __restrict__ probs) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) probs[t] = StableSigmoid(logits[t]);
}

}  // namespace

Error BiasRelu(float* y, const float* bias, int rows, int cols, bool relu, void* stream) {
  if (rows < 0 || cols < 0) return InvalidArgument("BiasRelu", "negative sizes");
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n == 0) return Error();
  BiasReluKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(y, bias, n, cols, relu);
  return LaunchStatus("BiasRelu");
}

Error BiasReluBackward(float* grad, const float* y, int rows, int cols, bool relu, float* bias_grad,
                       void* stream) {
  if (rows < 0 || cols < 0) return InvalidArgument("BiasReluBackward", "negative sizes");
  if (cols == 0) return Error();
  // rows == 0 still runs: the bias gradient of an empty batch is zero.
  const dim3 block(32, kRowThreads);
  const unsigned blocks = static_cast<unsigned>((cols + 31) / 32);
  BiasReluBackwardKernel<<<blocks, block, 0, AsStream(stream)>>>(grad, y, rows, cols, relu,
                                                                 bias_grad);
  return LaunchStatus("BiasReluBackward");
}

Error SigmoidBce(const float* logits, const float* labels, int n, float loss_scale, float* probs,
                 float* grad, double* loss_sum, void* stream) {
  if (n < 0) return InvalidArgument("SigmoidBce", "negative n");
  // n == 0 still runs, to write a zero loss.
  SigmoidBceKernel<<<1, kLossThreads, 0, AsStream(stream)>>>(logits, labels, n, loss_scale, probs,
                                                             grad, loss_sum);
  return LaunchStatus("SigmoidBce");
}

Error Sigmoid(const float* logits, int n, float* probs, void* stream) {
  if (n < 0) return InvalidArgument("Sigmoid", "negative n");
  if (n == 0) return Error();
  SigmoidKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(logits, n, probs);
  return LaunchStatus("Sigmoid");
}

}  // namespace cuda
}  // namespace ps

// Kernels of the dense layers and the loss of a binary classifier, on row-major matrices of
// `rows` samples by `cols` units. The GEMMs themselves are in blas.h.
//
// All pointers passed to launchers are device pointers; launchers queue work on `stream` (a
// cudaStream_t, nullptr for the default stream) and return at once. Each returns
// kInvalidArgument on negative sizes. With no samples, BiasReluBackward still writes a zero bias
// gradient and SigmoidBce a zero loss; the others do nothing.
#ifndef PS_CUDA_KERNELS_DENSE_H_
#define PS_CUDA_KERNELS_DENSE_H_

#include "cuda_kernels/error.h"

namespace ps {
namespace cuda {

// y[r, c] = y[r, c] + bias[c], then max(., 0) when `relu`. y: rows x cols, in place.
Error BiasRelu(float* y, const float* bias, int rows, int cols, bool relu, void* stream);

// The backward of BiasRelu. With `relu`, zeroes grad[r, c] wherever the layer's output
// y[r, c] <= 0 (in place); then bias_grad[c] = sum over r of grad[r, c]. The column sums run in a
// fixed order (one block per 32 columns, no atomics): the same bits on every run.
Error BiasReluBackward(float* grad, const float* y, int rows, int cols, bool relu, float* bias_grad,
                       void* stream);

// Sigmoid binary cross-entropy of n logits against labels in {0, 1}:
//   probs[r] = sigmoid(logits[r]);
//   grad[r] = (probs[r] - labels[r]) * loss_scale / n   (d loss_scale * mean loss / d logit);
//   *loss_sum = sum over r of log(1 + exp(z)) - y z, computed stably, summed in double in a fixed
//   order (one block).
// loss_sum points to one double on the device.
Error SigmoidBce(const float* logits, const float* labels, int n, float loss_scale, float* probs,
                 float* grad, double* loss_sum, void* stream);

// probs[r] = sigmoid(logits[r]) for r < n.
Error Sigmoid(const float* logits, int n, float* probs, void* stream);

}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_DENSE_H_

// Private helpers of the CPU model (cpu_model.h): the GEMM call every matrix product goes through,
// and a stack of fully connected layers over batch-major rows with its own workspace.
#ifndef PS_WORKER_MODEL_INTERNAL_MLP_H_
#define PS_WORKER_MODEL_INTERNAL_MLP_H_

#include <cstddef>
#include <vector>

#include "absl/types/span.h"

namespace ps {
namespace worker {

// One fully connected layer and where its parameters are in a model's flat vector: W (out x in,
// row-major; y = x W^T + b), then the bias (out floats).
struct DenseLayer {
  int in = 0;
  int out = 0;
  size_t weight = 0;  // offset of W; the bias follows it
  bool relu = true;
};

namespace internal {

// The shape of one GEMM call, C (m x n) = op(A) (m x k) op(B) (k x n), as model_bench replays it.
struct GemmShape {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0, n = 0, k = 0;
};

// Runs row-major cblas_sgemm (alpha 1) and, while a trace is set, appends every call's shape to
// it. Thread-compatible.
class Gemm {
 public:
  void set_trace(std::vector<GemmShape>* trace) { trace_ = trace; }
  void operator()(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                  const float* b, int ldb, float beta, float* c, int ldc) const;

 private:
  std::vector<GemmShape>* trace_ = nullptr;
};

// `width` columns of a batch-major matrix whose rows are `ld` floats apart: one block of an MLP's
// input (the first layer reads its blocks in place, so they need not be concatenated).
struct InputBlock {
  const float* data = nullptr;
  int ld = 0;
  int width = 0;
};

// Where the gradient of one input block goes (rows `ld` floats apart); data == nullptr: not
// needed, not computed.
struct GradBlock {
  float* data = nullptr;
  int ld = 0;
};

// An Mlp runs a stack of DenseLayers forward and backward over a batch, keeping the activations
// of the last Forward in its workspace (which grows to the largest batch seen and is reused).
// Thread-compatible.
class Mlp {
 public:
  // `layers` chain (layers[i].in == layers[i - 1].out); `gemm` outlives the Mlp.
  Mlp(std::vector<DenseLayer> layers, const Gemm* gemm);

  const std::vector<DenseLayer>& layers() const { return layers_; }
  bool empty() const { return layers_.empty(); }
  // The last layer's width; only for a non-empty Mlp.
  int out() const { return layers_.back().out; }

  // Runs the layers (at least one) over `batch` rows whose input is the concatenation of
  // `input`'s blocks (at least one, widths summing to layers[0].in). The blocks are read again by
  // Backward and must stay unchanged until then. Returns the output (batch x out(), rows
  // contiguous), valid until the next Forward.
  const float* Forward(const float* params, int batch, absl::Span<const InputBlock> input);

  // Backpropagates `dy` (batch x out(), the gradient of the last Forward's output; overwritten)
  // through the layers: writes the parameter gradients at their offsets in `dense_grad` and the
  // gradient of each input block into `input_grad` (one per block, as given to Forward).
  void Backward(const float* params, int batch, float* dy, float* dense_grad,
                absl::Span<const GradBlock> input_grad);

 private:
  const std::vector<DenseLayer> layers_;
  const Gemm* const gemm_;
  std::vector<InputBlock> input_;         // of the last Forward
  std::vector<std::vector<float>> acts_;  // acts_[i]: layer i's output
  std::vector<float> grad_a_, grad_b_;    // backward ping-pong
};

}  // namespace internal
}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_INTERNAL_MLP_H_

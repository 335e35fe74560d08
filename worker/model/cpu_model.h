// The model families of model_spec.h on the CPU: DLRM, WIDE_DEEP, DEEPFM and DCN_V2 (their
// formulas are in worker/model/README.md), with every matrix product in OpenBLAS's sgemm over
// batch-major rows. The loss is the mean binary cross-entropy of one logit per sample. This is
// also the reference the GPU backend (gpu_model.h) is tested against.
#ifndef PS_WORKER_MODEL_CPU_MODEL_H_
#define PS_WORKER_MODEL_CPU_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model/internal/mlp.h"
#include "worker/model/model_spec.h"

namespace ps {
namespace worker {

// One DCN_V2 cross layer in the flat parameter vector, x_{l+1} = x0 * (W x_l + b) + x_l over
// width d: with rank 0, W (d x d, row-major) then b (d); with rank r > 0, W = U V, V (r x d,
// row-major) at `weight`, then U (d x r, row-major), then b (d).
struct CrossLayer {
  int width = 0;
  int rank = 0;
  size_t weight = 0;
};

// Where every layer of a spec's network is in the one flat parameter vector every backend uses:
// the bottom MLP (DLRM), then the cross layers (DCN_V2), then the top MLP, whose last layer is
// the logit's (no ReLU). The bottom MLP's layers all have a ReLU.
struct ModelLayout {
  std::vector<DenseLayer> bottom;
  std::vector<CrossLayer> cross;
  std::vector<DenseLayer> top;
  size_t num_params = 0;
};

// The layout of `spec`, which CpuModel::Create accepts.
ModelLayout LayoutOf(const ModelSpec& spec);

// Sets how many threads the CPU network's matrix products use, for the whole process (OpenBLAS's
// pool); `threads` <= 0 leaves the library's default, one per core. Workers that share a machine
// should split its cores among them: OpenBLAS's idle threads spin, so threads beyond a process's
// share of the cores take CPU from the other processes without speeding up its own.
void SetCpuThreads(int threads);

// A CpuModel holds the dense parameters of one model family (one flat vector, laid out as
// LayoutOf says, so that AllReduce and the dense master copy see one buffer) and the workspace of
// one batch, which grows to the largest batch seen and is reused: a pass allocates nothing once
// the workspace has grown. Thread-compatible.
class CpuModel {
 public:
  // Parameters initialised deterministically from `seed` (uniform Glorot over each weight
  // matrix's fan-in + fan-out, in layout order; zero biases): every worker creates the same
  // network. INVALID_ARGUMENT, naming the knob, for a spec the family cannot take: negative
  // sizes or dims < 1; a DLRM without dense features, or with dot_interaction and fields of
  // different dims or a bottom output (bottom.back(), or num_dense without a bottom MLP) not of
  // that dim; a DEEPFM with fields of different dims; a DCN_V2 with cross_layers < 1 or
  // cross_rank < 0; num_linear > 0 outside WIDE_DEEP and DEEPFM; a WIDE_DEEP, DEEPFM or DCN_V2
  // without any dense feature or field.
  static absl::StatusOr<std::unique_ptr<CpuModel>> Create(const ModelSpec& spec, uint64_t seed);

  CpuModel(const CpuModel&) = delete;
  CpuModel& operator=(const CpuModel&) = delete;

  const ModelSpec& spec() const { return spec_; }
  const ModelLayout& layout() const { return layout_; }
  size_t num_params() const { return params_.size(); }
  absl::Span<float> params() { return absl::MakeSpan(params_); }
  absl::Span<const float> params() const { return params_; }

  // One forward and backward pass over `batch_size` (>= 1) samples, in model_spec.h's layout:
  //   dense: batch_size x num_dense; emb: batch_size x emb_width(); labels: batch_size (0 or 1).
  // `loss_scale` multiplies the gradient of the mean loss (1 / number of workers makes the sum of
  // the workers' gradients the gradient of their combined batch).
  // Writes dense_grad (num_params()), emb_grad (same layout as emb, every float written: the
  // linear inputs' gradient is the logit's) and probs (batch_size); returns the mean binary
  // cross-entropy of the batch.
  float ForwardBackward(int batch_size, const float* dense, const float* emb, const float* labels,
                        float loss_scale, float* dense_grad, float* emb_grad, float* probs);

  // Forward pass only: writes the predicted probabilities (batch_size).
  void Predict(int batch_size, const float* dense, const float* emb, float* probs);

  // While `trace` is not null, appends the shape of every GEMM the passes run to it (for
  // model_bench's reference chain of plain sgemm calls); null stops.
  void set_gemm_trace(std::vector<internal::GemmShape>* trace) { gemm_.set_trace(trace); }

 private:
  CpuModel(const ModelSpec& spec, ModelLayout layout);

  // Fills logits_ for a batch.
  void Forward(int batch, const float* dense, const float* emb);
  // Backpropagates dlogit_ (overwritten) after Forward on the same inputs.
  void Backward(int batch, const float* emb, float* dense_grad, float* emb_grad);

  // DLRM's pairwise dot products of [z, e_1..e_F] (dots_, batch x pairs) and their backward
  // (adds to dz_, writes the fields' part of emb_grad).
  void DotForward(int batch, const float* z, const float* emb);
  void DotBackward(int batch, const float* z, const float* emb, float* emb_grad);
  // DCN_V2's cross layers over x0_ (xs_[0]), leaving x_L in xs_.back(), and their backward from
  // gx_ (dL/dx_L, overwritten) into dx0_.
  void CrossForward(int batch);
  void CrossBackward(int batch, float* dense_grad);

  // Constant after construction.
  const ModelSpec spec_;
  const ModelLayout layout_;
  const int fields_width_;  // sum of field_dims: where the linear inputs start in a row of emb
  const int emb_width_;
  internal::Gemm gemm_;
  internal::Mlp bottom_;  // DLRM only
  internal::Mlp top_;

  std::vector<float> params_;

  // Workspace (grows to the largest batch, then reused).
  std::vector<float> logits_, dlogit_;
  std::vector<float> scratch_;  // per sample: DLRM's transposed vectors, DEEPFM's field sums
  const float* z_ = nullptr;    // DLRM: the bottom output of the last Forward
  std::vector<float> dz_;       // DLRM: gradient of the bottom output
  std::vector<float> dots_;     // DLRM with dot_interaction: batch x pairs
  std::vector<float> ddots_;    // ... and their gradient
  std::vector<std::vector<float>> xs_;  // DCN_V2: x_0 .. x_L, batch x d0 each
  std::vector<std::vector<float>> us_;  // DCN_V2: W_l x_l + b_l
  std::vector<std::vector<float>> vs_;  // DCN_V2 with rank r: V_l x_l (batch x r)
  std::vector<float> gx_, dx0_, du_, dv_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_CPU_MODEL_H_

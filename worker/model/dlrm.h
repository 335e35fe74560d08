// The recommender model the worker trains, on the CPU: a DLRM-like network. Dense features go
// through a bottom MLP whose output has the embedding dim; it is concatenated with the pooled
// embedding of every sparse field; a top MLP ends in one logit; the loss is binary cross-entropy.
// GEMMs run in OpenBLAS. This is also the reference the GPU backend is tested against.
#ifndef PS_WORKER_MODEL_DLRM_H_
#define PS_WORKER_MODEL_DLRM_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace ps {
namespace worker {

// The shape of the network, from the job.
struct DlrmShape {
  int num_dense = 13;
  int num_sparse = 26;
  int emb_dim = 16;
  // Output sizes of the bottom MLP's layers; the last must equal emb_dim.
  std::vector<int> bottom = {64, 16};
  // Output sizes of the top MLP's hidden layers; a final layer of size 1 (the logit) is added.
  std::vector<int> top = {64, 32};

  // From job.model and the dim of the table(s) the fields use. INVALID_ARGUMENT when the shapes
  // disagree (bottom's last size is not the embedding dim, tables of different dims).
  static absl::StatusOr<DlrmShape> FromJob(const config::Job& job);
};

// One fully connected layer of the network and where its parameters are in the flat vector.
struct DlrmLayer {
  int in = 0;
  int out = 0;
  size_t weight = 0;  // offset of W (out x in, row-major); the bias (out) follows it
  bool relu = true;
};

// The layers of `shape` in the flat parameter vector every backend uses: the bottom MLP, then the
// top MLP ending in the logit layer (no ReLU).
struct DlrmLayout {
  std::vector<DlrmLayer> bottom;
  std::vector<DlrmLayer> top;
  size_t num_params = 0;
};
DlrmLayout LayoutOf(const DlrmShape& shape);

// Sets how many threads the CPU network's matrix products use, for the whole process (OpenBLAS's
// pool); `threads` <= 0 leaves the library's default, one per core. Workers that share a machine
// should split its cores among them: OpenBLAS's idle threads spin, so threads beyond a process's
// share of the cores take CPU from the other processes without speeding up its own.
void SetCpuThreads(int threads);

// A Dlrm holds the dense parameters (one flat vector, so that AllReduce and the dense master copy
// see one buffer) and the workspace of one batch. Thread-compatible.
class Dlrm {
 public:
  // Parameters initialised deterministically from `seed` (uniform Glorot, zero biases): every
  // worker creates the same network.
  static absl::StatusOr<std::unique_ptr<Dlrm>> Create(const DlrmShape& shape, uint64_t seed);

  const DlrmShape& shape() const { return shape_; }
  size_t num_params() const { return params_.size(); }
  absl::Span<float> params() { return absl::MakeSpan(params_); }
  absl::Span<const float> params() const { return params_; }

  // One forward and backward pass over `batch_size` samples.
  //   dense: batch_size x num_dense; emb: batch_size x num_sparse x emb_dim (pooled embeddings);
  //   labels: batch_size (0 or 1).
  // `loss_scale` multiplies the gradient of the mean loss (1 / number of workers makes the sum of
  // the workers' gradients the gradient of their combined batch).
  // Writes dense_grad (num_params()), emb_grad (same shape as emb) and probs (batch_size);
  // returns the mean binary cross-entropy of the batch.
  float ForwardBackward(int batch_size, const float* dense, const float* emb, const float* labels,
                        float loss_scale, float* dense_grad, float* emb_grad, float* probs);

  // Forward pass only: writes the predicted probabilities (batch_size).
  void Predict(int batch_size, const float* dense, const float* emb, float* probs);

 private:
  using Layer = DlrmLayer;

  Dlrm(const DlrmShape& shape, std::vector<Layer> bottom, std::vector<Layer> top, size_t n);

  // Runs the layers forward from acts[0]; acts[i + 1] is layer i's output.
  void Forward(const std::vector<Layer>& layers, int batch, std::vector<std::vector<float>>* acts);
  // Backpropagates `grad` (batch x out of the last layer) through the layers; writes parameter
  // gradients into dense_grad and leaves the input gradient in `grad`.
  void Backward(const std::vector<Layer>& layers, int batch,
                const std::vector<std::vector<float>>& acts, std::vector<float>* grad,
                float* dense_grad);
  // The logits of a batch whose inputs are set; fills the activations.
  void ForwardAll(int batch, const float* dense, const float* emb);

  const DlrmShape shape_;
  const std::vector<Layer> bottom_;
  const std::vector<Layer> top_;
  std::vector<float> params_;
  // Workspace: activations of the bottom and top MLPs (index 0: their inputs).
  std::vector<std::vector<float>> bottom_acts_;
  std::vector<std::vector<float>> top_acts_;
  std::vector<float> grad_;
  std::vector<float> grad2_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_DLRM_H_

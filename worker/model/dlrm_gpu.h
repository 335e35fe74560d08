// The DLRM of dlrm.h on a CUDA GPU: the same network, the same initial parameters and the same
// results within float rounding, with the GEMMs in cuBLAS (no TF32) and the rest in the kernels
// of cuda_kernels/. Inputs and outputs are host buffers, as for Dlrm, copied to and from the
// device on every call; the dense parameters live on the host too (params(), which the dense
// optimizer updates in place) and are copied to the device at the start of every pass.
#ifndef PS_WORKER_MODEL_DLRM_GPU_H_
#define PS_WORKER_MODEL_DLRM_GPU_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model/dlrm.h"

namespace ps {
namespace worker {

// The embedding rows of a batch as pulled from the servers (unique keys, one row each) and which
// row each slot of each (sample, field) bag reads; the bag's embedding is the sum or the mean of
// its rows. Host pointers, not owned.
struct PulledRows {
  // num_rows x emb_dim.
  const float* rows = nullptr;
  int64_t num_rows = 0;
  // batch x num_sparse x slots row numbers in [0, num_rows), or -1 for an empty slot.
  const int32_t* index = nullptr;
  // Slots per bag, >= 1 (1: one-hot fields).
  int slots = 1;
  // Pool by the mean of the non-empty slots instead of their sum (an empty bag pools to zeros).
  bool mean = false;
};

// A DlrmGpu holds the dense parameters (a host master copy, laid out as Dlrm's) and, on the
// device that is current when it is created, their copy, the workspace of one batch, a stream
// and a cuBLAS handle. Thread-compatible.
class DlrmGpu {
 public:
  // Whether this process sees a CUDA device.
  static bool Available();

  // The network Dlrm::Create(shape, seed) creates, with bit-identical parameters (copied from
  // it). FAILED_PRECONDITION "no CUDA device" without a GPU; INVALID_ARGUMENT for a shape Dlrm
  // rejects or whose bottom MLP does not end in emb_dim; RESOURCE_EXHAUSTED or INTERNAL when the
  // device cannot be set up.
  static absl::StatusOr<std::unique_ptr<DlrmGpu>> Create(const DlrmShape& shape, uint64_t seed);

  ~DlrmGpu();
  DlrmGpu(const DlrmGpu&) = delete;
  DlrmGpu& operator=(const DlrmGpu&) = delete;

  const DlrmShape& shape() const { return shape_; }
  size_t num_params() const { return params_.size(); }
  absl::Span<float> params() { return absl::MakeSpan(params_); }
  absl::Span<const float> params() const { return params_; }

  // As Dlrm::ForwardBackward: the same arguments (host buffers), outputs and return value. A
  // device failure (a CUDA or cuBLAS error, the device out of memory) is fatal: the process
  // aborts with the error's text, since this signature, shared with Dlrm, has no status.
  float ForwardBackward(int batch_size, const float* dense, const float* emb, const float* labels,
                        float loss_scale, float* dense_grad, float* emb_grad, float* probs);

  // As Dlrm::Predict. A device failure is fatal, as above.
  void Predict(int batch_size, const float* dense, const float* emb, float* probs);

  // ForwardBackward with the pooling of embeddings and the reduction of their gradients on the
  // device: the bags are pooled from `pulled` (GatherPooled) instead of read from a host `emb`,
  // and row_grad (pulled.num_rows x emb_dim, host) receives, for every row, the sum of the
  // gradients of the bags that read it, each slot counted once (times 1 / non-empty slots when
  // pooling by mean), summed in a fixed order (ScatterRows). Other arguments and outputs as
  // ForwardBackward. Returns the mean loss; INVALID_ARGUMENT when a slot names no row or the
  // sizes are bad (outputs unspecified); RESOURCE_EXHAUSTED or INTERNAL on device failures.
  absl::StatusOr<float> ForwardBackwardRows(int batch_size, const float* dense,
                                            const PulledRows& pulled, const float* labels,
                                            float loss_scale, float* dense_grad, float* row_grad,
                                            float* probs);

 private:
  using Layer = DlrmLayer;
  struct Device;  // device buffers, stream and cuBLAS handle (dlrm_gpu.cc)

  DlrmGpu(const DlrmShape& shape, std::vector<Layer> bottom, std::vector<Layer> top,
          std::vector<float> params, std::unique_ptr<Device> dev);

  // One pass. Embeddings come from the host `emb` or, when `pulled` is set, are pooled on the
  // device. Without labels, only the probabilities are computed (Predict).
  absl::StatusOr<float> Run(int batch, const float* dense, const float* emb,
                            const PulledRows* pulled, const float* labels, float loss_scale,
                            float* dense_grad, float* emb_grad, float* row_grad, float* probs);
  absl::Status Forward(const std::vector<Layer>& layers, int batch, bool bottom);
  // Backpropagates the gradient in *grad (batch x out of the last layer) through the layers,
  // writing parameter gradients on the device; leaves the input gradient in *grad when
  // `input_grad` (*spare is the other buffer of the pair).
  absl::Status Backward(const std::vector<Layer>& layers, int batch, bool bottom, bool input_grad,
                        float** grad, float** spare);

  // Constant after construction.
  const DlrmShape shape_;
  const std::vector<Layer> bottom_;
  const std::vector<Layer> top_;
  const int width_;  // of the top MLP's input: emb_dim * (1 + num_sparse)
  std::vector<float> params_;
  std::unique_ptr<Device> dev_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_DLRM_GPU_H_

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

 private:
  using Layer = DlrmLayer;
  struct Device;  // device buffers, stream and cuBLAS handle (dlrm_gpu.cc)

  DlrmGpu(const DlrmShape& shape, std::vector<Layer> bottom, std::vector<Layer> top,
          std::vector<float> params, std::unique_ptr<Device> dev);

  // One pass over host buffers. Without labels, only the probabilities are computed (Predict).
  absl::StatusOr<float> Run(int batch, const float* dense, const float* emb, const float* labels,
                            float loss_scale, float* dense_grad, float* emb_grad, float* probs);
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

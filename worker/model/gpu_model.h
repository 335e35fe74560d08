// The plain DLRM of cpu_model.h (without dot_interaction, every field of one dim) on a CUDA GPU:
// the same network, the same initial parameters and the same results within float rounding, with
// the GEMMs in cuBLAS (no TF32) and the rest in the kernels of cuda_kernels/. Inputs and outputs
// are host buffers, as for CpuModel, copied to and from the device on every call; the dense
// parameters live on the host too (params(), which the dense optimizer updates in place) and are
// copied to the device at the start of every pass.
#ifndef PS_WORKER_MODEL_GPU_MODEL_H_
#define PS_WORKER_MODEL_GPU_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model/cpu_model.h"
#include "worker/model/model_spec.h"

namespace ps {
namespace worker {

// A GpuModel holds the dense parameters (a host master copy, laid out as CpuModel's) and, on the
// device that is current when it is created, their copy, the workspace of one batch, a stream
// and a cuBLAS handle. Thread-compatible.
class GpuModel {
 public:
  // Whether this process sees a CUDA device.
  static bool Available();

  // The network CpuModel::Create(spec, seed) creates, with bit-identical parameters (copied from
  // it). UNIMPLEMENTED "... on the GPU is not implemented yet" for what only the CPU runs so far
  // (a family other than DLRM, dot_interaction, fields of different dims), checked first, on any
  // machine; then FAILED_PRECONDITION "no CUDA device" without a GPU; INVALID_ARGUMENT for a spec
  // CpuModel rejects or whose bottom MLP does not end in the fields' dim; RESOURCE_EXHAUSTED or
  // INTERNAL when the device cannot be set up.
  static absl::StatusOr<std::unique_ptr<GpuModel>> Create(const ModelSpec& spec, uint64_t seed);

  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  const ModelSpec& spec() const { return spec_; }
  size_t num_params() const { return params_.size(); }
  absl::Span<float> params() { return absl::MakeSpan(params_); }
  absl::Span<const float> params() const { return params_; }

  // As CpuModel::ForwardBackward: the same arguments (host buffers), outputs and return value. A
  // device failure (a CUDA or cuBLAS error, the device out of memory) is fatal: the process
  // aborts with the error's text, since this signature, shared with CpuModel, has no status.
  float ForwardBackward(int batch_size, const float* dense, const float* emb, const float* labels,
                        float loss_scale, float* dense_grad, float* emb_grad, float* probs);

  // As CpuModel::Predict. A device failure is fatal, as above.
  void Predict(int batch_size, const float* dense, const float* emb, float* probs);

 private:
  using Layer = DenseLayer;
  struct Device;  // device buffers, stream and cuBLAS handle (gpu_model.cc)

  GpuModel(const ModelSpec& spec, std::vector<Layer> bottom, std::vector<Layer> top,
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
  const ModelSpec spec_;
  const int emb_dim_;  // every field's dim
  const int num_fields_;
  const std::vector<Layer> bottom_;
  const std::vector<Layer> top_;
  const int width_;  // of the top MLP's input: emb_dim * (1 + num_fields)
  std::vector<float> params_;
  std::unique_ptr<Device> dev_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_GPU_MODEL_H_

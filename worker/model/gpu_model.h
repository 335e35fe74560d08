// Every model family of cpu_model.h (DLRM with and without dot_interaction, WIDE_DEEP, DEEPFM,
// DCN_V2 of full and low rank) on a CUDA GPU: the same network, the same initial parameters and
// the same results within float rounding, with the GEMMs in cuBLAS (no TF32) and the rest in the
// kernels of cuda_kernels/ (dense.h, interaction.h, embedding.h). Inputs and outputs are host
// buffers, as for CpuModel, copied to and from the device on every call; the dense parameters
// live on the host too (params(), which the dense optimizer updates in place) and are copied to
// the device at the start of every pass. Two ways in: ForwardBackward takes the embeddings pooled
// on the host (CpuModel's layout); ForwardBackwardRows takes the batch's distinct rows and bags
// (pooled_input.h), pools them on the device and gives back the gradients of the rows.
#ifndef PS_WORKER_MODEL_GPU_MODEL_H_
#define PS_WORKER_MODEL_GPU_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/model/cpu_model.h"
#include "worker/model/model_spec.h"
#include "worker/model/pooled_input.h"

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
  // it), for every spec CpuModel accepts. CpuModel::Create's INVALID_ARGUMENT for a spec it
  // rejects, checked first, on any machine; then FAILED_PRECONDITION "no CUDA device" without a
  // GPU; RESOURCE_EXHAUSTED or INTERNAL when the device cannot be set up.
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

  // The pass of ForwardBackward over `in` (pooled_input.h): the distinct rows of every table, its
  // bags and the batch's index arrays are staged in pinned host memory and copied to the device
  // on a copy stream, pooled there (cuda::GatherPooled, SUM or MEAN per slot) into the model's
  // emb layout, the dense part runs as in ForwardBackward, and the gradient of emb is scattered
  // back into the gradient of every distinct row (cuda::ScatterRows), which comes back on the
  // copy stream into (*row_grads)[g] (resized to table g's rows x dim floats; rows no value
  // reads get zeros). Fills dense_grad (num_params()) and probs (in.batch) and returns the mean
  // loss, as ForwardBackward. The sums run in the order of the host's PoolRows and SpreadGrads
  // (worker/embedding_io.h): against ForwardBackward over PoolRows' output followed by
  // SpreadGrads, the pooled inputs are the same floats, and the rows' gradients are too on the
  // host emulation, a fused multiply-add's rounding apart on a GPU.
  // INVALID_ARGUMENT for an input CheckPooledInput refuses, a value naming a row outside its
  // table's rows, or a batch < 1 (outputs untouched); RESOURCE_EXHAUSTED or INTERNAL on a device
  // failure (outputs unspecified).
  absl::StatusOr<float> ForwardBackwardRows(const PooledInput& in, float loss_scale,
                                            float* dense_grad,
                                            std::vector<std::vector<float>>* row_grads,
                                            float* probs);

  // As CpuModel::Predict. A device failure is fatal, as above.
  void Predict(int batch_size, const float* dense, const float* emb, float* probs);

  // The wall time of the last ForwardBackward's or ForwardBackwardRows' host-to-device copies
  // (parameters, inputs or rows and bags, labels) and device-to-host ones (gradients,
  // probabilities, loss): the pass waits for its copies apart from its kernels to know it. Zero
  // before the first.
  absl::Duration last_copy_time() const { return last_copy_time_; }

 private:
  using Layer = DenseLayer;
  struct Device;  // device buffers, stream and cuBLAS handle (gpu_model.cc)

  GpuModel(const ModelSpec& spec, ModelLayout layout, std::vector<float> params,
           std::unique_ptr<Device> dev);

  // One pass over host buffers. Without labels, only the probabilities are computed (Predict).
  absl::StatusOr<float> Run(int batch, const float* dense, const float* emb, const float* labels,
                            float loss_scale, float* dense_grad, float* emb_grad, float* probs);
  // Grows the device workspace to `batch` samples (it is kept for smaller batches).
  absl::Status Reserve(int batch);
  // Computes the logits (the top MLP's last output) from the inputs already on the device.
  absl::Status Forward(int batch);
  // From dL/dlogit on the device, after Forward: the parameters' gradient into the device's
  // copy of dense_grad, the inputs' into its copy of emb_grad (every float).
  absl::Status Backward(int batch);
  // DCN_V2's cross layers from x_0 to x_L, and their backward from `g` = dL/dx_L (batch x d0,
  // overwritten) into the gradient of x_0.
  absl::Status CrossForward(int batch);
  absl::Status CrossBackward(int batch, float* g);
  // The input of the top MLP (batch rows of top_in_ floats, on the device) after Forward.
  const float* TopInput() const;

  // Constant after construction.
  const ModelSpec spec_;
  const ModelLayout layout_;
  const int fields_width_;  // sum of field_dims: where the linear inputs start in a row of emb
  const int emb_width_;
  const int z_width_;  // DLRM: the width of the bottom output z (num_dense without a bottom MLP)
  const int top_in_;   // the top MLP's input width
  std::vector<float> params_;
  std::unique_ptr<Device> dev_;
  absl::Duration last_copy_time_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_GPU_MODEL_H_

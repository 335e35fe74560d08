// The model as the trainer sees it, over its compute backends: the CPU networks (CpuModel,
// OpenBLAS) and the CUDA one (GpuModel, cuBLAS and cuda_kernels/), both running every family,
// chosen at run time.
#ifndef PS_WORKER_MODEL_MODEL_H_
#define PS_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/model/model_spec.h"
#include "worker/model/pooled_input.h"

namespace ps {
namespace worker {

enum class Backend {
  kAuto,  // CUDA when a device is present, else CPU
  kCpu,
  kGpu,
};

// Parses "auto", "cpu" or "gpu"; INVALID_ARGUMENT otherwise.
absl::StatusOr<Backend> ParseBackend(const std::string& name);

// A Model holds the dense parameters on the host (one flat vector) and runs batches on its
// backend; the methods are those of CpuModel. Thread-compatible.
class Model {
 public:
  virtual ~Model() = default;
  // "cpu" or "gpu".
  virtual const char* backend() const = 0;
  virtual size_t num_params() const = 0;
  virtual absl::Span<float> params() = 0;
  virtual float ForwardBackward(int batch_size, const float* dense, const float* emb,
                                const float* labels, float loss_scale, float* dense_grad,
                                float* emb_grad, float* probs) = 0;
  virtual void Predict(int batch_size, const float* dense, const float* emb, float* probs) = 0;
  // Whether the model pools the batch's rows itself, on its device (the GPU): then training
  // steps go through ForwardBackwardRows with the pulled rows unpooled; else (the CPU) the worker
  // pools on the host and calls ForwardBackward.
  virtual bool pools_rows() const = 0;
  // GpuModel::ForwardBackwardRows on a model that pools_rows(): the pass over distinct rows and
  // bags, the rows' gradients in (*row_grads)[g] per table of `in`. Its errors; UNIMPLEMENTED on
  // a model that does not pool rows (outputs untouched).
  virtual absl::StatusOr<float> ForwardBackwardRows(const PooledInput& in, float loss_scale,
                                                    float* dense_grad,
                                                    std::vector<std::vector<float>>* row_grads,
                                                    float* probs) = 0;
  // The wall time of the last ForwardBackward's (or ForwardBackwardRows') copies between host and
  // device (GpuModel's last_copy_time), or nullopt for a backend without copies (the CPU).
  virtual std::optional<absl::Duration> last_copy_time() const = 0;
};

// Creates the model of `spec` on `backend` with parameters initialised from `seed` (the same on
// every backend). Errors: CpuModel::Create's INVALID_ARGUMENT for a spec no backend takes, on any
// machine; with kGpu, and with kAuto on a machine with a CUDA device, GpuModel::Create's:
// FAILED_PRECONDITION for kGpu without a device (kAuto then takes the CPU), RESOURCE_EXHAUSTED or
// INTERNAL when the device cannot be set up (kAuto does not fall back to the CPU then, so that
// nothing runs silently elsewhere than asked).
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec, uint64_t seed,
                                                   Backend backend);

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_MODEL_H_

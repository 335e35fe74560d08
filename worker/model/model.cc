#include "worker/model/model.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/model/cpu_model.h"
#include "worker/model/gpu_model.h"

namespace ps {
namespace worker {
namespace {

// Adapts a network class with CpuModel's methods to Model.
template <typename Net>
class ModelOf final : public Model {
 public:
  ModelOf(std::unique_ptr<Net> net, const char* backend)
      : net_(std::move(net)), backend_(backend) {}
  const char* backend() const override { return backend_; }
  size_t num_params() const override { return net_->num_params(); }
  absl::Span<float> params() override { return net_->params(); }
  float ForwardBackward(int batch_size, const float* dense, const float* emb, const float* labels,
                        float loss_scale, float* dense_grad, float* emb_grad,
                        float* probs) override {
    return net_->ForwardBackward(batch_size, dense, emb, labels, loss_scale, dense_grad, emb_grad,
                                 probs);
  }
  void Predict(int batch_size, const float* dense, const float* emb, float* probs) override {
    net_->Predict(batch_size, dense, emb, probs);
  }
  bool pools_rows() const override { return std::is_same_v<Net, GpuModel>; }
  absl::StatusOr<float> ForwardBackwardRows(const PooledInput& in, float loss_scale,
                                            float* dense_grad,
                                            std::vector<std::vector<float>>* row_grads,
                                            float* probs) override {
    if constexpr (std::is_same_v<Net, GpuModel>) {
      return net_->ForwardBackwardRows(in, loss_scale, dense_grad, row_grads, probs);
    } else {
      return absl::UnimplementedError(
          "the CPU backend pools rows on the host: call ForwardBackward");
    }
  }
  std::optional<absl::Duration> last_copy_time() const override {
    if constexpr (std::is_same_v<Net, GpuModel>) {
      return net_->last_copy_time();
    } else {
      return std::nullopt;
    }
  }

 private:
  const std::unique_ptr<Net> net_;
  const char* const backend_;
};

}  // namespace

absl::StatusOr<Backend> ParseBackend(const std::string& name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "cpu") return Backend::kCpu;
  if (name == "gpu") return Backend::kGpu;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown backend \"%s\" (expected auto, cpu or gpu)", name));
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec, uint64_t seed,
                                                   Backend backend) {
  if (backend == Backend::kGpu || (backend == Backend::kAuto && GpuModel::Available())) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<GpuModel> gpu, GpuModel::Create(spec, seed));
    return std::unique_ptr<Model>(new ModelOf<GpuModel>(std::move(gpu), "gpu"));
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CpuModel> cpu, CpuModel::Create(spec, seed));
  return std::unique_ptr<Model>(new ModelOf<CpuModel>(std::move(cpu), "cpu"));
}

}  // namespace worker
}  // namespace ps

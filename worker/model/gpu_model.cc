#include "worker/model/gpu_model.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "cuda_kernels/blas.h"
#include "cuda_kernels/dense.h"
#include "cuda_kernels/device.h"
#include "cuda_kernels/memory.h"

namespace ps {
namespace worker {
namespace {

absl::Status ToStatus(const cuda::Error& e) {
  switch (e.kind) {
    case cuda::Error::kOk:
      return absl::OkStatus();
    case cuda::Error::kInvalidArgument:
      return absl::InvalidArgumentError(e.message);
    case cuda::Error::kOutOfMemory:
      return absl::ResourceExhaustedError(e.message);
    default:
      return absl::InternalError(e.message);
  }
}

#define GPU_MODEL_RETURN_IF_ERROR(expr)  \
  do {                                   \
    const absl::Status status_ = (expr); \
    if (!status_.ok()) return status_;   \
  } while (0)

#define GPU_MODEL_CHECK_CUDA(expr) GPU_MODEL_RETURN_IF_ERROR(ToStatus(expr))

template <typename T>
T Die(const absl::Status& status) {
  std::fprintf(stderr, "GpuModel: device failure: %s\n", status.ToString().c_str());
  std::abort();
}

}  // namespace

struct GpuModel::Device {
  ~Device() {
    blas.reset();
    cuda::StreamSynchronize(stream);
    cuda::StreamDestroy(stream);
  }

  void* stream = nullptr;
  std::unique_ptr<cuda::Blas> blas;
  cuda::DeviceArray<float> params;
  cuda::DeviceArray<float> grad;  // dense parameter gradients
  // Activations of the bottom and top MLPs (index 0: their inputs).
  std::vector<cuda::DeviceArray<float>> bottom_acts;
  std::vector<cuda::DeviceArray<float>> top_acts;
  // Backward gradients, ping-pong.
  cuda::DeviceArray<float> g1;
  cuda::DeviceArray<float> g2;
  cuda::DeviceArray<float> labels;
  cuda::DeviceArray<float> probs;
  cuda::DeviceArray<double> loss;
};

bool GpuModel::Available() { return cuda::DeviceCount() > 0; }

absl::StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(const ModelSpec& spec, uint64_t seed) {
  if (spec.type != config::Model::DLRM) {
    return absl::UnimplementedError(absl::StrFormat("a %s model on the GPU is not implemented yet",
                                                    config::Model::Type_Name(spec.type)));
  }
  if (spec.dot_interaction) {
    return absl::UnimplementedError("model.dot_interaction on the GPU is not implemented yet");
  }
  for (int d : spec.field_dims) {
    if (d != spec.field_dims[0]) {
      return absl::UnimplementedError(
          "fields of different dims on the GPU are not implemented yet");
    }
  }
  if (!Available()) return absl::FailedPreconditionError("no CUDA device");
  // The CPU model validates the spec and draws the initial parameters.
  absl::StatusOr<std::unique_ptr<CpuModel>> cpu = CpuModel::Create(spec, seed);
  if (!cpu.ok()) return cpu.status();
  const int z_width = spec.bottom.empty() ? spec.num_dense : spec.bottom.back();
  const int emb_dim = spec.field_dims.empty() ? z_width : spec.field_dims[0];
  if (z_width != emb_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the bottom MLP must end with the embedding dim %d, not %d", emb_dim, z_width));
  }
  // The same layout as CpuModel's.
  ModelLayout layout = LayoutOf(spec);
  std::vector<Layer> bottom = std::move(layout.bottom);
  std::vector<Layer> top = std::move(layout.top);
  const size_t n = layout.num_params;
  const absl::Span<const float> p = (*cpu)->params();
  std::vector<float> params(p.begin(), p.end());

  auto dev = std::make_unique<Device>();
  GPU_MODEL_CHECK_CUDA(cuda::StreamCreate(&dev->stream));
  GPU_MODEL_CHECK_CUDA(cuda::Blas::Create(dev->stream, &dev->blas));
  GPU_MODEL_CHECK_CUDA(dev->params.Resize(n));
  GPU_MODEL_CHECK_CUDA(dev->grad.Resize(n));
  dev->bottom_acts.resize(bottom.size() + 1);
  dev->top_acts.resize(top.size() + 1);
  return std::unique_ptr<GpuModel>(
      new GpuModel(spec, std::move(bottom), std::move(top), std::move(params), std::move(dev)));
}

GpuModel::GpuModel(const ModelSpec& spec, std::vector<Layer> bottom, std::vector<Layer> top,
                   std::vector<float> params, std::unique_ptr<Device> dev)
    : spec_(spec),
      emb_dim_(spec.field_dims.empty() ? top.front().in : spec.field_dims[0]),
      num_fields_(spec.num_fields()),
      bottom_(std::move(bottom)),
      top_(std::move(top)),
      width_(emb_dim_ * (1 + num_fields_)),
      params_(std::move(params)),
      dev_(std::move(dev)) {}

GpuModel::~GpuModel() = default;

absl::Status GpuModel::Forward(const std::vector<Layer>& layers, int batch, bool bottom) {
  std::vector<cuda::DeviceArray<float>>& acts = bottom ? dev_->bottom_acts : dev_->top_acts;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    const float* x = acts[i].data();
    float* y = acts[i + 1].data();
    const float* w = dev_->params.data() + l.weight;
    const float* b = w + size_t(l.out) * l.in;
    // y = x W^T, then + b and ReLU.
    GPU_MODEL_CHECK_CUDA(
        dev_->blas->Gemm(false, true, batch, l.out, l.in, 1.0f, x, l.in, w, l.in, 0.0f, y, l.out));
    GPU_MODEL_CHECK_CUDA(cuda::BiasRelu(y, b, batch, l.out, l.relu, dev_->stream));
  }
  return absl::OkStatus();
}

absl::Status GpuModel::Backward(const std::vector<Layer>& layers, int batch, bool bottom,
                                bool input_grad, float** grad, float** spare) {
  const std::vector<cuda::DeviceArray<float>>& acts = bottom ? dev_->bottom_acts : dev_->top_acts;
  for (size_t i = layers.size(); i-- > 0;) {
    const Layer& l = layers[i];
    const float* x = acts[i].data();
    const float* w = dev_->params.data() + l.weight;
    float* dw = dev_->grad.data() + l.weight;
    float* db = dw + size_t(l.out) * l.in;
    // Mask by the ReLU and db = column sums of dY; dW = dY^T x; dX = dY W.
    GPU_MODEL_CHECK_CUDA(
        cuda::BiasReluBackward(*grad, acts[i + 1].data(), batch, l.out, l.relu, db, dev_->stream));
    GPU_MODEL_CHECK_CUDA(dev_->blas->Gemm(true, false, l.out, l.in, batch, 1.0f, *grad, l.out, x,
                                          l.in, 0.0f, dw, l.in));
    if (i == 0 && !input_grad) break;
    GPU_MODEL_CHECK_CUDA(dev_->blas->Gemm(false, false, batch, l.in, l.out, 1.0f, *grad, l.out, w,
                                          l.in, 0.0f, *spare, l.in));
    std::swap(*grad, *spare);
  }
  return absl::OkStatus();
}

absl::StatusOr<float> GpuModel::Run(int batch, const float* dense, const float* emb,
                                    const float* labels, float loss_scale, float* dense_grad,
                                    float* emb_grad, float* probs) {
  if (batch < 0) return absl::InvalidArgumentError("negative batch size");
  Device& d = *dev_;
  void* const s = d.stream;
  const int e = emb_dim_;
  const int fields = num_fields_;
  const size_t emb_bytes = size_t(fields) * e * sizeof(float);  // of one sample
  const size_t width_bytes = size_t(width_) * sizeof(float);

  // Workspace for this batch size (allocated once for the largest batch seen).
  int widest = width_;
  GPU_MODEL_CHECK_CUDA(d.bottom_acts[0].Resize(size_t(batch) * spec_.num_dense));
  for (size_t i = 0; i < bottom_.size(); ++i) {
    GPU_MODEL_CHECK_CUDA(d.bottom_acts[i + 1].Resize(size_t(batch) * bottom_[i].out));
    widest = std::max({widest, bottom_[i].in, bottom_[i].out});
  }
  GPU_MODEL_CHECK_CUDA(d.top_acts[0].Resize(size_t(batch) * width_));
  for (size_t i = 0; i < top_.size(); ++i) {
    GPU_MODEL_CHECK_CUDA(d.top_acts[i + 1].Resize(size_t(batch) * top_[i].out));
    widest = std::max(widest, top_[i].out);
  }
  GPU_MODEL_CHECK_CUDA(d.g1.Resize(size_t(batch) * widest));
  GPU_MODEL_CHECK_CUDA(d.g2.Resize(size_t(batch) * widest));
  GPU_MODEL_CHECK_CUDA(d.labels.Resize(batch));
  GPU_MODEL_CHECK_CUDA(d.probs.Resize(batch));
  GPU_MODEL_CHECK_CUDA(d.loss.Resize(1));

  // Inputs. The parameters may have changed on the host since the last pass.
  GPU_MODEL_CHECK_CUDA(cuda::Copy(d.params.data(), params_.data(), d.params.bytes(), s));
  GPU_MODEL_CHECK_CUDA(cuda::Copy(d.bottom_acts[0].data(), dense, d.bottom_acts[0].bytes(), s));
  float* const cat = d.top_acts[0].data();  // [z, e_0, ..., e_{F-1}] per sample
  GPU_MODEL_CHECK_CUDA(
      cuda::Copy2D(cat + e, width_bytes, emb, emb_bytes, emb_bytes, size_t(batch), s));

  // Forward: the bottom MLP's output is the first emb_dim columns of the top MLP's input.
  GPU_MODEL_RETURN_IF_ERROR(Forward(bottom_, batch, /*bottom=*/true));
  GPU_MODEL_CHECK_CUDA(cuda::Copy2D(cat, width_bytes, d.bottom_acts.back().data(),
                                    e * sizeof(float), e * sizeof(float), size_t(batch), s));
  GPU_MODEL_RETURN_IF_ERROR(Forward(top_, batch, /*bottom=*/false));
  const float* logits = d.top_acts.back().data();

  if (labels == nullptr) {
    GPU_MODEL_CHECK_CUDA(cuda::Sigmoid(logits, batch, d.probs.data(), s));
    GPU_MODEL_CHECK_CUDA(cuda::Copy(probs, d.probs.data(), d.probs.bytes(), s));
    GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(s));
    return 0.0f;
  }

  // Loss, then backward through the top MLP down to the gradient of its input.
  GPU_MODEL_CHECK_CUDA(cuda::Copy(d.labels.data(), labels, d.labels.bytes(), s));
  float* grad = d.g1.data();
  float* spare = d.g2.data();
  GPU_MODEL_CHECK_CUDA(cuda::SigmoidBce(logits, d.labels.data(), batch, loss_scale, d.probs.data(),
                                        grad, d.loss.data(), s));
  GPU_MODEL_RETURN_IF_ERROR(
      Backward(top_, batch, /*bottom=*/false, /*input_grad=*/true, &grad, &spare));
  // Split the input gradient: the embeddings' part goes out (queued before the bottom MLP's
  // backward reuses the buffer), the bottom output's part goes down.
  GPU_MODEL_CHECK_CUDA(
      cuda::Copy2D(emb_grad, emb_bytes, grad + e, width_bytes, emb_bytes, size_t(batch), s));
  GPU_MODEL_CHECK_CUDA(cuda::Copy2D(spare, e * sizeof(float), grad, width_bytes, e * sizeof(float),
                                    size_t(batch), s));
  std::swap(grad, spare);
  GPU_MODEL_RETURN_IF_ERROR(
      Backward(bottom_, batch, /*bottom=*/true, /*input_grad=*/false, &grad, &spare));

  double loss = 0;
  GPU_MODEL_CHECK_CUDA(cuda::Copy(dense_grad, d.grad.data(), d.grad.bytes(), s));
  GPU_MODEL_CHECK_CUDA(cuda::Copy(probs, d.probs.data(), d.probs.bytes(), s));
  GPU_MODEL_CHECK_CUDA(cuda::Copy(&loss, d.loss.data(), sizeof(double), s));
  GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(s));
  return static_cast<float>(loss / batch);
}

float GpuModel::ForwardBackward(int batch, const float* dense, const float* emb,
                                const float* labels, float loss_scale, float* dense_grad,
                                float* emb_grad, float* probs) {
  absl::StatusOr<float> loss =
      Run(batch, dense, emb, labels, loss_scale, dense_grad, emb_grad, probs);
  return loss.ok() ? *loss : Die<float>(loss.status());
}

void GpuModel::Predict(int batch, const float* dense, const float* emb, float* probs) {
  absl::StatusOr<float> done = Run(batch, dense, emb, nullptr, 0.0f, nullptr, nullptr, probs);
  if (!done.ok()) Die<float>(done.status());
}

}  // namespace worker
}  // namespace ps

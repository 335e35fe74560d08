#include "worker/model/gpu_model.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cuda_kernels/blas.h"
#include "cuda_kernels/dense.h"
#include "cuda_kernels/device.h"
#include "cuda_kernels/embedding.h"
#include "cuda_kernels/interaction.h"
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

// Copies `width` columns of `batch` rows between batch-major matrices (leading dimensions in
// floats); nothing when there is nothing to copy.
cuda::Error CopyColumns(float* dst, int dst_ld, const float* src, int src_ld, int width, int batch,
                        void* stream) {
  if (width == 0 || batch == 0) return cuda::Error();
  return cuda::Copy2D(dst, size_t(dst_ld) * sizeof(float), src, size_t(src_ld) * sizeof(float),
                      size_t(width) * sizeof(float), size_t(batch), stream);
}

cuda::Error CopyBytes(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return cuda::Error();
  return cuda::Copy(dst, src, bytes, stream);
}

// A device array filled from host memory through pinned staging memory, so that the copy is
// asynchronous. data() and size() are the device array's.
template <typename T>
struct Staged {
  cuda::PinnedArray<T> host;
  cuda::DeviceArray<T> dev;

  // Copies host memory `src` into `host` (grown to its size), then from there into `dev` (grown
  // alike) on `stream`: both must stay unchanged until the stream reached the copy.
  cuda::Error CopyIn(absl::Span<const T> src, void* stream) {
    const size_t n = src.size();
    cuda::Error e = host.Resize(n);
    if (!e.ok()) return e;
    e = dev.Resize(n);
    if (!e.ok()) return e;
    if (n == 0) return e;
    std::memcpy(host.data(), src.data(), n * sizeof(T));
    return cuda::Copy(dev.data(), host.data(), n * sizeof(T), stream);
  }
  T* data() { return dev.data(); }
  size_t size() const { return dev.size(); }
};

int SumOf(const std::vector<int>& v) {
  int s = 0;
  for (int x : v) s += x;
  return s;
}

}  // namespace

struct GpuModel::Device {
  ~Device() {
    blas.reset();
    cuda::StreamSynchronize(copy_stream);
    cuda::StreamSynchronize(stream);
    cuda::EventDestroy(inputs_copied);
    cuda::EventDestroy(grads_ready);
    cuda::StreamDestroy(copy_stream);
    cuda::StreamDestroy(stream);
  }

  // One table of a ForwardBackwardRows pass: its rows and bags, staged in pinned host memory
  // and copied on the copy stream, the transpose of its bags, and its rows' gradients.
  struct Table {
    cuda::RowCsr csr;  // built on the host
    Staged<float> rows;
    Staged<uint32_t> index;
    Staged<uint32_t> ends;
    Staged<int32_t> offsets;  // csr.offsets
    Staged<int32_t> bags;     // csr.bags
    Staged<float> weight;     // csr.bag_weight
    Staged<int32_t> slot_offset;
    Staged<uint8_t> slot_mean;
    cuda::PinnedArray<float> grad_host;  // the rows' gradients, back from the device
    // The worker's row cache on this device (PooledTable::cache_rows x dim floats, kept from pass
    // to pass), and a pass's copies into and out of it.
    cuda::DeviceArray<float> cache;
    Staged<uint32_t> hit_slots;
    Staged<uint32_t> hit_places;
    Staged<uint32_t> admit_slots;
    Staged<uint32_t> admit_places;
    cuda::DeviceArray<float> row_grad;

    // The bags as the kernels read them, after the copies.
    cuda::Bags DeviceBags(int batch) {
      cuda::Bags b;
      b.index = index.data();
      b.ends = ends.data();
      b.batch = batch;
      b.slots = static_cast<int>(slot_offset.size());
      b.slot_offset = slot_offset.data();
      b.slot_mean = slot_mean.data();
      return b;
    }
  };

  // Runs dense layers over `x` (batch x layers[0].in, rows contiguous), layer i's output into
  // outs[i]; returns the last output.
  absl::StatusOr<float*> MlpForward(const std::vector<DenseLayer>& layers,
                                    std::vector<cuda::DeviceArray<float>>& outs, const float* x,
                                    int batch) {
    for (size_t i = 0; i < layers.size(); ++i) {
      const DenseLayer& l = layers[i];
      const float* in = i == 0 ? x : outs[i - 1].data();
      float* y = outs[i].data();
      const float* w = params.data() + l.weight;
      const float* b = w + size_t(l.out) * l.in;
      // y = x W^T, then + b and ReLU.
      GPU_MODEL_CHECK_CUDA(
          blas->Gemm(false, true, batch, l.out, l.in, 1.0f, in, l.in, w, l.in, 0.0f, y, l.out));
      GPU_MODEL_CHECK_CUDA(cuda::BiasRelu(y, b, batch, l.out, l.relu, stream));
    }
    return outs[layers.size() - 1].data();
  }

  // Backpropagates dy (batch x the last layer's out; masked in place by a ReLU, so the logit's
  // gradient, which has none, stays) through the layers of the last MlpForward on `x`, writing
  // their parameters' gradient into `grad`. With `input_grad`, returns the gradient of x (batch x
  // layers[0].in, in g1 or g2, whichever dy is not); else nullptr. g1 and g2 hold batch x the
  // widest layer.
  absl::StatusOr<float*> MlpBackward(const std::vector<DenseLayer>& layers,
                                     const std::vector<cuda::DeviceArray<float>>& outs,
                                     const float* x, int batch, float* dy, bool input_grad) {
    for (size_t i = layers.size(); i-- > 0;) {
      const DenseLayer& l = layers[i];
      const float* in = i == 0 ? x : outs[i - 1].data();
      const float* w = params.data() + l.weight;
      float* dw = grad.data() + l.weight;
      float* db = dw + size_t(l.out) * l.in;
      // Mask by the ReLU and db = column sums of dY; dW = dY^T x; dX = dY W.
      GPU_MODEL_CHECK_CUDA(
          cuda::BiasReluBackward(dy, outs[i].data(), batch, l.out, l.relu, db, stream));
      GPU_MODEL_CHECK_CUDA(
          blas->Gemm(true, false, l.out, l.in, batch, 1.0f, dy, l.out, in, l.in, 0.0f, dw, l.in));
      if (i == 0 && !input_grad) return nullptr;
      float* dx = dy == g1.data() ? g2.data() : g1.data();
      GPU_MODEL_CHECK_CUDA(
          blas->Gemm(false, false, batch, l.in, l.out, 1.0f, dy, l.out, w, l.in, 0.0f, dx, l.in));
      dy = dx;
    }
    return dy;
  }

  void* stream = nullptr;  // the kernels' and the dense buffers' copies
  // ForwardBackwardRows: the rows, bags and row gradients travel on their own stream; the compute
  // stream waits for inputs_copied, the copy stream for grads_ready.
  void* copy_stream = nullptr;
  void* inputs_copied = nullptr;
  void* grads_ready = nullptr;
  std::vector<std::unique_ptr<Table>> tables;
  std::unique_ptr<cuda::Blas> blas;
  cuda::DeviceArray<float> params;
  cuda::DeviceArray<float> grad;  // dense parameter gradients
  // The batch's inputs and the gradient of emb.
  cuda::DeviceArray<float> dense;
  cuda::DeviceArray<float> emb;
  cuda::DeviceArray<float> emb_grad;
  cuda::DeviceArray<float> labels;
  // The top MLP's input, concatenated (all families but DCN_V2, whose top reads x_L).
  cuda::DeviceArray<float> top_in;
  // Outputs of the bottom and top MLPs' layers.
  std::vector<cuda::DeviceArray<float>> bottom_outs;
  std::vector<cuda::DeviceArray<float>> top_outs;
  // Backward gradients, ping-pong.
  cuda::DeviceArray<float> g1;
  cuda::DeviceArray<float> g2;
  cuda::DeviceArray<float> probs;
  cuda::DeviceArray<float> dlogit;
  cuda::DeviceArray<double> loss;
  // DCN_V2: x_0 .. x_L, W_l x_l + b_l, V_l x_l (rank r), and the backward's buffers.
  std::vector<cuda::DeviceArray<float>> xs;
  std::vector<cuda::DeviceArray<float>> us;
  std::vector<cuda::DeviceArray<float>> vs;
  cuda::DeviceArray<float> dx0;
  cuda::DeviceArray<float> du;
  cuda::DeviceArray<float> dvx;
};

bool GpuModel::Available() { return cuda::DeviceCount() > 0; }

absl::StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(const ModelSpec& spec, uint64_t seed) {
  // The CPU model validates the spec and draws the initial parameters.
  absl::StatusOr<std::unique_ptr<CpuModel>> cpu = CpuModel::Create(spec, seed);
  if (!cpu.ok()) return cpu.status();
  if (!Available()) return absl::FailedPreconditionError("no CUDA device");
  ModelLayout layout = (*cpu)->layout();
  const absl::Span<const float> p = (*cpu)->params();
  std::vector<float> params(p.begin(), p.end());

  auto dev = std::make_unique<Device>();
  GPU_MODEL_CHECK_CUDA(cuda::StreamCreate(&dev->stream));
  GPU_MODEL_CHECK_CUDA(cuda::StreamCreate(&dev->copy_stream));
  GPU_MODEL_CHECK_CUDA(cuda::EventCreate(&dev->inputs_copied));
  GPU_MODEL_CHECK_CUDA(cuda::EventCreate(&dev->grads_ready));
  GPU_MODEL_CHECK_CUDA(cuda::Blas::Create(dev->stream, &dev->blas));
  GPU_MODEL_CHECK_CUDA(dev->params.Resize(layout.num_params));
  GPU_MODEL_CHECK_CUDA(dev->grad.Resize(layout.num_params));
  dev->bottom_outs.resize(layout.bottom.size());
  dev->top_outs.resize(layout.top.size());
  dev->xs.resize(layout.cross.size() + (layout.cross.empty() ? 0 : 1));
  dev->us.resize(layout.cross.size());
  dev->vs.resize(layout.cross.size());
  return std::unique_ptr<GpuModel>(
      new GpuModel(spec, std::move(layout), std::move(params), std::move(dev)));
}

GpuModel::GpuModel(const ModelSpec& spec, ModelLayout layout, std::vector<float> params,
                   std::unique_ptr<Device> dev)
    : spec_(spec),
      layout_(std::move(layout)),
      fields_width_(SumOf(spec.field_dims)),
      emb_width_(spec.emb_width()),
      z_width_(spec.bottom.empty() ? spec.num_dense : spec.bottom.back()),
      top_in_(layout_.top.front().in),
      params_(std::move(params)),
      dev_(std::move(dev)) {}

GpuModel::~GpuModel() = default;

absl::Status GpuModel::Reserve(int batch) {
  Device& d = *dev_;
  const size_t b = size_t(batch);
  int widest = top_in_;
  for (const std::vector<Layer>* layers : {&layout_.bottom, &layout_.top}) {
    for (const Layer& l : *layers) widest = std::max({widest, l.in, l.out});
  }
  GPU_MODEL_CHECK_CUDA(d.dense.Resize(b * spec_.num_dense));
  GPU_MODEL_CHECK_CUDA(d.emb.Resize(b * emb_width_));
  GPU_MODEL_CHECK_CUDA(d.emb_grad.Resize(b * emb_width_));
  GPU_MODEL_CHECK_CUDA(d.labels.Resize(b));
  GPU_MODEL_CHECK_CUDA(d.probs.Resize(b));
  GPU_MODEL_CHECK_CUDA(d.dlogit.Resize(b));
  GPU_MODEL_CHECK_CUDA(d.loss.Resize(1));
  if (layout_.cross.empty()) GPU_MODEL_CHECK_CUDA(d.top_in.Resize(b * top_in_));
  for (size_t i = 0; i < layout_.bottom.size(); ++i) {
    GPU_MODEL_CHECK_CUDA(d.bottom_outs[i].Resize(b * layout_.bottom[i].out));
  }
  for (size_t i = 0; i < layout_.top.size(); ++i) {
    GPU_MODEL_CHECK_CUDA(d.top_outs[i].Resize(b * layout_.top[i].out));
  }
  GPU_MODEL_CHECK_CUDA(d.g1.Resize(b * widest));
  GPU_MODEL_CHECK_CUDA(d.g2.Resize(b * widest));
  for (cuda::DeviceArray<float>& x : d.xs) GPU_MODEL_CHECK_CUDA(x.Resize(b * top_in_));
  for (size_t l = 0; l < layout_.cross.size(); ++l) {
    GPU_MODEL_CHECK_CUDA(d.us[l].Resize(b * top_in_));
    GPU_MODEL_CHECK_CUDA(d.vs[l].Resize(b * layout_.cross[l].rank));
  }
  if (!layout_.cross.empty()) {
    GPU_MODEL_CHECK_CUDA(d.dx0.Resize(b * top_in_));
    GPU_MODEL_CHECK_CUDA(d.du.Resize(b * top_in_));
    GPU_MODEL_CHECK_CUDA(d.dvx.Resize(b * layout_.cross[0].rank));
  }
  return absl::OkStatus();
}

const float* GpuModel::TopInput() const {
  return layout_.cross.empty() ? dev_->top_in.data() : dev_->xs.back().data();
}

absl::Status GpuModel::CrossForward(int batch) {
  Device& d = *dev_;
  const float* p = d.params.data();
  const float* x0 = d.xs[0].data();
  for (size_t l = 0; l < layout_.cross.size(); ++l) {
    const CrossLayer& c = layout_.cross[l];
    const int w = c.width;
    const float* x = d.xs[l].data();
    float* u = d.us[l].data();
    const float* b;
    if (c.rank == 0) {
      const float* wm = p + c.weight;
      GPU_MODEL_CHECK_CUDA(d.blas->Gemm(false, true, batch, w, w, 1.0f, x, w, wm, w, 0.0f, u, w));
      b = wm + size_t(w) * w;
    } else {
      const float* v = p + c.weight;             // r x d
      const float* uu = v + size_t(c.rank) * w;  // d x r
      float* vx = d.vs[l].data();
      GPU_MODEL_CHECK_CUDA(
          d.blas->Gemm(false, true, batch, c.rank, w, 1.0f, x, w, v, w, 0.0f, vx, c.rank));
      GPU_MODEL_CHECK_CUDA(
          d.blas->Gemm(false, true, batch, w, c.rank, 1.0f, vx, c.rank, uu, c.rank, 0.0f, u, w));
      b = uu + size_t(w) * c.rank;
    }
    GPU_MODEL_CHECK_CUDA(cuda::CrossForward(x0, x, b, batch, w, u, d.xs[l + 1].data(), d.stream));
  }
  return absl::OkStatus();
}

absl::Status GpuModel::CrossBackward(int batch, float* g) {
  Device& d = *dev_;
  const float* p = d.params.data();
  const int w = top_in_;
  const float* x0 = d.xs[0].data();
  float* dx0 = d.dx0.data();
  float* du = d.du.data();
  GPU_MODEL_CHECK_CUDA(cuda::Zero(dx0, size_t(batch) * w * sizeof(float), d.stream));
  for (size_t l = layout_.cross.size(); l-- > 0;) {
    const CrossLayer& c = layout_.cross[l];
    const float* x = d.xs[l].data();
    // du = g * x0 (the gradient of W x_l + b); dx0 += g * u; db = column sums of du.
    GPU_MODEL_CHECK_CUDA(cuda::CrossBackward(g, x0, d.us[l].data(), batch, w, du, dx0, d.stream));
    float* db = d.grad.data() + c.weight + (c.rank == 0 ? size_t(w) * w : 2 * size_t(w) * c.rank);
    GPU_MODEL_CHECK_CUDA(cuda::BiasReluBackward(du, nullptr, batch, w, false, db, d.stream));
    // dW = du^T x_l and g = g + du W (the residual's gradient plus the product's).
    if (c.rank == 0) {
      const float* wm = p + c.weight;
      float* dw = d.grad.data() + c.weight;
      GPU_MODEL_CHECK_CUDA(d.blas->Gemm(true, false, w, w, batch, 1.0f, du, w, x, w, 0.0f, dw, w));
      GPU_MODEL_CHECK_CUDA(d.blas->Gemm(false, false, batch, w, w, 1.0f, du, w, wm, w, 1.0f, g, w));
    } else {
      const int r = c.rank;
      const float* v = p + c.weight;
      const float* uu = v + size_t(r) * w;
      float* dv_w = d.grad.data() + c.weight;
      float* du_w = dv_w + size_t(r) * w;
      float* dvx = d.dvx.data();
      // dU = du^T (V x); d(V x) = du U; dV = d(V x)^T x; g += d(V x) V.
      GPU_MODEL_CHECK_CUDA(
          d.blas->Gemm(true, false, w, r, batch, 1.0f, du, w, d.vs[l].data(), r, 0.0f, du_w, r));
      GPU_MODEL_CHECK_CUDA(
          d.blas->Gemm(false, false, batch, r, w, 1.0f, du, w, uu, r, 0.0f, dvx, r));
      GPU_MODEL_CHECK_CUDA(
          d.blas->Gemm(true, false, r, w, batch, 1.0f, dvx, r, x, w, 0.0f, dv_w, w));
      GPU_MODEL_CHECK_CUDA(d.blas->Gemm(false, false, batch, w, r, 1.0f, dvx, r, v, w, 1.0f, g, w));
    }
  }
  // x_0 is x0 itself: the residual path's gradient joins the products'.
  GPU_MODEL_CHECK_CUDA(cuda::Add(g, int64_t(batch) * w, dx0, d.stream));
  return absl::OkStatus();
}

absl::Status GpuModel::Forward(int batch) {
  Device& d = *dev_;
  void* const s = d.stream;
  const int nd = spec_.num_dense;
  const int fields = spec_.num_fields();
  switch (spec_.type) {
    case config::Model::DLRM: {
      // The top MLP reads [z, e_1..e_F] or [z, the pairs' dot products].
      const float* z = d.dense.data();
      if (!layout_.bottom.empty()) {
        absl::StatusOr<float*> out = d.MlpForward(layout_.bottom, d.bottom_outs, z, batch);
        if (!out.ok()) return out.status();
        z = *out;
      }
      float* cat = d.top_in.data();
      GPU_MODEL_CHECK_CUDA(CopyColumns(cat, top_in_, z, z_width_, z_width_, batch, s));
      if (spec_.dot_interaction) {
        GPU_MODEL_CHECK_CUDA(cuda::DotInteraction(z, z_width_, d.emb.data(), emb_width_, batch,
                                                  fields, z_width_, cat + z_width_, top_in_, s));
      } else {
        GPU_MODEL_CHECK_CUDA(CopyColumns(cat + z_width_, top_in_, d.emb.data(), emb_width_,
                                         fields_width_, batch, s));
      }
      break;
    }
    default: {
      // WIDE_DEEP and DEEPFM: the top MLP reads [dense, e_1..e_F]; DCN_V2: the cross layers do.
      float* x0 = layout_.cross.empty() ? d.top_in.data() : d.xs[0].data();
      GPU_MODEL_CHECK_CUDA(CopyColumns(x0, top_in_, d.dense.data(), nd, nd, batch, s));
      GPU_MODEL_CHECK_CUDA(
          CopyColumns(x0 + nd, top_in_, d.emb.data(), emb_width_, fields_width_, batch, s));
      if (!layout_.cross.empty()) GPU_MODEL_RETURN_IF_ERROR(CrossForward(batch));
      break;
    }
  }
  absl::StatusOr<float*> logits = d.MlpForward(layout_.top, d.top_outs, TopInput(), batch);
  if (!logits.ok()) return logits.status();
  if (spec_.num_linear > 0) {
    GPU_MODEL_CHECK_CUDA(cuda::LinearForward(d.emb.data(), emb_width_, fields_width_,
                                             spec_.num_linear, batch, *logits, s));
  }
  if (spec_.type == config::Model::DEEPFM && fields > 0) {
    GPU_MODEL_CHECK_CUDA(
        cuda::FmForward(d.emb.data(), emb_width_, fields, spec_.field_dims[0], batch, *logits, s));
  }
  return absl::OkStatus();
}

absl::Status GpuModel::Backward(int batch) {
  Device& d = *dev_;
  void* const s = d.stream;
  const int nd = spec_.num_dense;
  const int fields = spec_.num_fields();
  // The top MLP leaves dL/dlogit as it is (its last layer has no ReLU): the linear and FM terms
  // read it below.
  absl::StatusOr<float*> top_grad = d.MlpBackward(layout_.top, d.top_outs, TopInput(), batch,
                                                  d.dlogit.data(), /*input_grad=*/true);
  if (!top_grad.ok()) return top_grad.status();
  float* const g = *top_grad;  // batch x top_in_
  switch (spec_.type) {
    case config::Model::DLRM: {
      const float* z = layout_.bottom.empty() ? d.dense.data() : d.bottom_outs.back().data();
      if (spec_.dot_interaction) {
        // The pairs' gradient goes to the fields (written) and to z (added to its own part).
        GPU_MODEL_CHECK_CUDA(cuda::DotInteractionBackward(
            g + z_width_, top_in_, z, z_width_, d.emb.data(), emb_width_, batch, fields, z_width_,
            g, top_in_, d.emb_grad.data(), emb_width_, s));
      } else {
        GPU_MODEL_CHECK_CUDA(CopyColumns(d.emb_grad.data(), emb_width_, g + z_width_, top_in_,
                                         fields_width_, batch, s));
      }
      if (!layout_.bottom.empty()) {
        // z's gradient, contiguous, in the other buffer of the pair; the bottom MLP's backward
        // may then reuse g's (the copies above are queued before it).
        float* dz = g == d.g1.data() ? d.g2.data() : d.g1.data();
        GPU_MODEL_CHECK_CUDA(CopyColumns(dz, z_width_, g, top_in_, z_width_, batch, s));
        absl::StatusOr<float*> none = d.MlpBackward(layout_.bottom, d.bottom_outs, d.dense.data(),
                                                    batch, dz, /*input_grad=*/false);
        if (!none.ok()) return none.status();
      }
      break;
    }
    case config::Model::DCN_V2:
      GPU_MODEL_RETURN_IF_ERROR(CrossBackward(batch, g));
      GPU_MODEL_CHECK_CUDA(CopyColumns(d.emb_grad.data(), emb_width_, d.dx0.data() + nd, top_in_,
                                       fields_width_, batch, s));
      break;
    default:
      GPU_MODEL_CHECK_CUDA(
          CopyColumns(d.emb_grad.data(), emb_width_, g + nd, top_in_, fields_width_, batch, s));
      break;
  }
  if (spec_.type == config::Model::DEEPFM && fields > 0) {
    GPU_MODEL_CHECK_CUDA(cuda::FmBackward(d.emb.data(), emb_width_, fields, spec_.field_dims[0],
                                          batch, d.dlogit.data(), d.emb_grad.data(), emb_width_,
                                          s));
  }
  if (spec_.num_linear > 0) {
    GPU_MODEL_CHECK_CUDA(cuda::LinearBackward(d.dlogit.data(), fields_width_, spec_.num_linear,
                                              batch, d.emb_grad.data(), emb_width_, s));
  }
  return absl::OkStatus();
}

absl::StatusOr<float> GpuModel::Run(int batch, const float* dense, const float* emb,
                                    const float* labels, float loss_scale, float* dense_grad,
                                    float* emb_grad, float* probs) {
  if (batch < 0) return absl::InvalidArgumentError("negative batch size");
  Device& d = *dev_;
  void* const s = d.stream;
  GPU_MODEL_RETURN_IF_ERROR(Reserve(batch));

  // Inputs. The parameters may have changed on the host since the last pass. A training pass
  // waits for its copies apart from its kernels, so that their wall time is known
  // (last_copy_time).
  const absl::Time copy_start = absl::Now();
  GPU_MODEL_CHECK_CUDA(CopyBytes(d.params.data(), params_.data(), d.params.bytes(), s));
  GPU_MODEL_CHECK_CUDA(CopyBytes(d.dense.data(), dense, d.dense.bytes(), s));
  GPU_MODEL_CHECK_CUDA(CopyBytes(d.emb.data(), emb, d.emb.bytes(), s));
  if (labels != nullptr) {
    GPU_MODEL_CHECK_CUDA(CopyBytes(d.labels.data(), labels, d.labels.bytes(), s));
    GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(s));
  }
  absl::Duration copy_time = absl::Now() - copy_start;
  GPU_MODEL_RETURN_IF_ERROR(Forward(batch));
  const float* logits = d.top_outs.back().data();

  if (labels == nullptr) {
    GPU_MODEL_CHECK_CUDA(cuda::Sigmoid(logits, batch, d.probs.data(), s));
    GPU_MODEL_CHECK_CUDA(CopyBytes(probs, d.probs.data(), d.probs.bytes(), s));
    GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(s));
    return 0.0f;
  }

  GPU_MODEL_CHECK_CUDA(cuda::SigmoidBce(logits, d.labels.data(), batch, loss_scale, d.probs.data(),
                                        d.dlogit.data(), d.loss.data(), s));
  GPU_MODEL_RETURN_IF_ERROR(Backward(batch));
  GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(s));  // the kernels done: then the copies alone

  const absl::Time results_start = absl::Now();
  double loss = 0;
  GPU_MODEL_CHECK_CUDA(CopyBytes(dense_grad, d.grad.data(), d.grad.bytes(), s));
  GPU_MODEL_CHECK_CUDA(CopyBytes(emb_grad, d.emb_grad.data(), d.emb_grad.bytes(), s));
  GPU_MODEL_CHECK_CUDA(CopyBytes(probs, d.probs.data(), d.probs.bytes(), s));
  GPU_MODEL_CHECK_CUDA(cuda::Copy(&loss, d.loss.data(), sizeof(double), s));
  GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(s));
  copy_time += absl::Now() - results_start;
  last_copy_time_ = copy_time;
  return static_cast<float>(loss / batch);
}

absl::StatusOr<float> GpuModel::ForwardBackwardRows(const PooledInput& in, float loss_scale,
                                                    float* dense_grad,
                                                    std::vector<std::vector<float>>* row_grads,
                                                    float* probs) {
  GPU_MODEL_RETURN_IF_ERROR(CheckPooledInput(in, emb_width_));
  const int batch = in.batch;
  if (batch < 1) return absl::InvalidArgumentError("ForwardBackwardRows needs a batch >= 1");
  Device& d = *dev_;
  void* const s = d.stream;
  void* const cs = d.copy_stream;
  const size_t groups = in.tables.size();
  while (d.tables.size() < groups) d.tables.push_back(std::make_unique<Device::Table>());
  // The bags' transposes, on the host (they check every value's row): before any copy starts.
  for (size_t g = 0; g < groups; ++g) {
    const PooledTable& t = in.tables[g];
    GPU_MODEL_CHECK_CUDA(cuda::BuildRowCsr(t.index.data(), t.ends.data(), batch, t.slots(),
                                           t.slot_mean.data(), t.num_rows(), &d.tables[g]->csr));
  }
  GPU_MODEL_RETURN_IF_ERROR(Reserve(batch));

  // Inputs: the tables' rows and bags through pinned memory on the copy stream, the parameters
  // (changed on the host since the last pass), dense features and labels on the compute stream,
  // which then waits for the copy stream. The pass waits for its copies apart from its kernels,
  // so that their wall time is known (last_copy_time).
  const absl::Time copy_start = absl::Now();
  for (size_t g = 0; g < groups; ++g) {
    const PooledTable& t = in.tables[g];
    Device::Table& dt = *d.tables[g];
    GPU_MODEL_CHECK_CUDA(dt.rows.CopyIn(t.rows, cs));
    GPU_MODEL_CHECK_CUDA(dt.index.CopyIn(t.index, cs));
    GPU_MODEL_CHECK_CUDA(dt.ends.CopyIn(t.ends, cs));
    GPU_MODEL_CHECK_CUDA(dt.offsets.CopyIn(dt.csr.offsets, cs));
    GPU_MODEL_CHECK_CUDA(dt.bags.CopyIn(dt.csr.bags, cs));
    GPU_MODEL_CHECK_CUDA(dt.weight.CopyIn(dt.csr.bag_weight, cs));
    GPU_MODEL_CHECK_CUDA(dt.slot_offset.CopyIn(t.slot_offset, cs));
    GPU_MODEL_CHECK_CUDA(dt.slot_mean.CopyIn(t.slot_mean, cs));
    GPU_MODEL_CHECK_CUDA(dt.row_grad.Resize(t.rows.size()));
    GPU_MODEL_CHECK_CUDA(dt.grad_host.Resize(t.rows.size()));
    if (t.cache_rows > 0) {
      // Allocated at the first pass (its rows are written before any is read: the cache's index
      // starts empty) and kept: the cache's size never changes.
      const size_t cache_floats = size_t(t.cache_rows) * t.dim;
      if (dt.cache.size() != cache_floats) GPU_MODEL_CHECK_CUDA(dt.cache.Resize(cache_floats));
      GPU_MODEL_CHECK_CUDA(dt.hit_slots.CopyIn(t.hit_slots, cs));
      GPU_MODEL_CHECK_CUDA(dt.hit_places.CopyIn(t.hit_places, cs));
      GPU_MODEL_CHECK_CUDA(dt.admit_slots.CopyIn(t.admit_slots, cs));
      GPU_MODEL_CHECK_CUDA(dt.admit_places.CopyIn(t.admit_places, cs));
    }
  }
  GPU_MODEL_CHECK_CUDA(cuda::EventRecord(d.inputs_copied, cs));
  GPU_MODEL_CHECK_CUDA(CopyBytes(d.params.data(), params_.data(), d.params.bytes(), s));
  GPU_MODEL_CHECK_CUDA(CopyBytes(d.dense.data(), in.dense, d.dense.bytes(), s));
  GPU_MODEL_CHECK_CUDA(CopyBytes(d.labels.data(), in.labels, d.labels.bytes(), s));
  GPU_MODEL_CHECK_CUDA(cuda::StreamWaitEvent(s, d.inputs_copied));
  GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(s));
  absl::Duration copy_time = absl::Now() - copy_start;

  // The row cache on the device: the hits' rows into the batch's rows, then the pulled misses'
  // rows into their slots (after the hits are read: a slot this batch evicts may be one it hit).
  for (size_t g = 0; g < groups; ++g) {
    Device::Table& dt = *d.tables[g];
    const PooledTable& t = in.tables[g];
    if (t.cache_rows == 0) continue;
    GPU_MODEL_CHECK_CUDA(cuda::CopyRows(dt.cache.data(), dt.hit_slots.data(), dt.rows.data(),
                                        dt.hit_places.data(),
                                        static_cast<int64_t>(t.hit_slots.size()), t.dim, s));
    GPU_MODEL_CHECK_CUDA(cuda::CopyRows(dt.rows.data(), dt.admit_places.data(), dt.cache.data(),
                                        dt.admit_slots.data(),
                                        static_cast<int64_t>(t.admit_slots.size()), t.dim, s));
  }
  // Pooling into emb (the tables' slots cover every float of it: CheckPooledInput), the dense
  // part, and the scatter of emb's gradient into the rows' gradients.
  for (size_t g = 0; g < groups; ++g) {
    Device::Table& dt = *d.tables[g];
    const PooledTable& t = in.tables[g];
    GPU_MODEL_CHECK_CUDA(cuda::GatherPooled(dt.rows.data(), t.num_rows(), t.dim,
                                            dt.DeviceBags(batch), d.emb.data(), emb_width_, s));
  }
  GPU_MODEL_RETURN_IF_ERROR(Forward(batch));
  GPU_MODEL_CHECK_CUDA(cuda::SigmoidBce(d.top_outs.back().data(), d.labels.data(), batch,
                                        loss_scale, d.probs.data(), d.dlogit.data(), d.loss.data(),
                                        s));
  GPU_MODEL_RETURN_IF_ERROR(Backward(batch));
  for (size_t g = 0; g < groups; ++g) {
    Device::Table& dt = *d.tables[g];
    const PooledTable& t = in.tables[g];
    GPU_MODEL_CHECK_CUDA(cuda::ScatterRows(d.emb_grad.data(), emb_width_, t.dim,
                                           dt.DeviceBags(batch), dt.offsets.data(), dt.bags.data(),
                                           dt.weight.data(), t.num_rows(), dt.row_grad.data(), s));
  }
  GPU_MODEL_CHECK_CUDA(cuda::EventRecord(d.grads_ready, s));
  GPU_MODEL_CHECK_CUDA(cuda::StreamWaitEvent(cs, d.grads_ready));
  GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(s));  // the kernels done: then the copies alone

  // Results: the rows' gradients on the copy stream into pinned memory, the rest on the compute
  // stream.
  const absl::Time results_start = absl::Now();
  for (size_t g = 0; g < groups; ++g) {
    Device::Table& dt = *d.tables[g];
    GPU_MODEL_CHECK_CUDA(
        CopyBytes(dt.grad_host.data(), dt.row_grad.data(), dt.row_grad.bytes(), cs));
  }
  double loss = 0;
  GPU_MODEL_CHECK_CUDA(CopyBytes(dense_grad, d.grad.data(), d.grad.bytes(), s));
  GPU_MODEL_CHECK_CUDA(CopyBytes(probs, d.probs.data(), d.probs.bytes(), s));
  GPU_MODEL_CHECK_CUDA(cuda::Copy(&loss, d.loss.data(), sizeof(double), s));
  GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(cs));
  GPU_MODEL_CHECK_CUDA(cuda::StreamSynchronize(s));
  row_grads->resize(groups);
  for (size_t g = 0; g < groups; ++g) {
    const Device::Table& dt = *d.tables[g];
    (*row_grads)[g].assign(dt.grad_host.data(), dt.grad_host.data() + dt.grad_host.size());
  }
  copy_time += absl::Now() - results_start;
  last_copy_time_ = copy_time;
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

#include "worker/model/cpu_model.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace ps {
namespace worker {

void SetCpuThreads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}

namespace {

using internal::GradBlock;
using internal::InputBlock;

// splitmix64: a platform-independent stream for the initial weights.
uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float Uniform(uint64_t* state) {  // [0, 1)
  return static_cast<float>(SplitMix(state) >> 40) * (1.0f / 16777216.0f);
}

// Fills n floats with U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)).
void Glorot(float* w, size_t n, int fan_in, int fan_out, uint64_t* state) {
  const float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  for (size_t i = 0; i < n; ++i) w[i] = (2 * Uniform(state) - 1) * limit;
}

float Sigmoid(float z) {
  return z >= 0 ? 1.0f / (1.0f + std::exp(-z)) : std::exp(z) / (1.0f + std::exp(z));
}

float* Reserve(std::vector<float>* v, size_t n) {
  if (v->size() < n) v->resize(n);
  return v->data();
}

int SumOf(const std::vector<int>& v) {
  int s = 0;
  for (int x : v) s += x;
  return s;
}

bool SameDims(const std::vector<int>& dims) {
  for (int d : dims) {
    if (d != dims[0]) return false;
  }
  return true;
}

// The width of DLRM's bottom output z.
int BottomWidth(const ModelSpec& spec) {
  return spec.bottom.empty() ? spec.num_dense : spec.bottom.back();
}

// DLRM's pairwise dot products of F + 1 vectors.
int Pairs(const ModelSpec& spec) { return (spec.num_fields() + 1) * spec.num_fields() / 2; }

absl::Status Validate(const ModelSpec& spec) {
  const std::string family = config::Model::Type_Name(spec.type);
  if (spec.num_dense < 0 || spec.num_linear < 0) {
    return absl::InvalidArgumentError("num_dense and num_linear must be >= 0");
  }
  for (int d : spec.field_dims) {
    if (d < 1) return absl::InvalidArgumentError("every field's dim must be >= 1");
  }
  for (const std::vector<int>* sizes : {&spec.bottom, &spec.top}) {
    for (int s : *sizes) {
      if (s < 1) return absl::InvalidArgumentError("every MLP layer needs a size >= 1");
    }
  }
  const bool linear = spec.type == config::Model::WIDE_DEEP || spec.type == config::Model::DEEPFM;
  if (!linear && spec.num_linear > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a %s model reads no linear inputs (num_linear must be 0)", family));
  }
  switch (spec.type) {
    case config::Model::DLRM:
      if (spec.num_dense < 1) {
        return absl::InvalidArgumentError("a DLRM model needs at least one dense feature");
      }
      if (spec.dot_interaction && spec.num_fields() > 0) {
        if (!SameDims(spec.field_dims)) {
          return absl::InvalidArgumentError(
              "model.dot_interaction needs every field to have the same dim");
        }
        if (BottomWidth(spec) != spec.field_dims[0]) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "model.dot_interaction needs the bottom MLP to end with the fields' dim %d, not %d",
              spec.field_dims[0], BottomWidth(spec)));
        }
      }
      return absl::OkStatus();
    case config::Model::DEEPFM:
      if (!spec.field_dims.empty() && !SameDims(spec.field_dims)) {
        return absl::InvalidArgumentError("a DEEPFM model needs every field to have the same dim");
      }
      break;
    case config::Model::DCN_V2:
      if (spec.cross_layers < 1 || spec.cross_rank < 0) {
        return absl::InvalidArgumentError(
            "model.cross_layers must be >= 1 and model.cross_rank >= 0");
      }
      break;
    case config::Model::WIDE_DEEP:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown model type %d", static_cast<int>(spec.type)));
  }
  if (spec.num_dense + SumOf(spec.field_dims) < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a %s model needs a dense feature or a field", family));
  }
  return absl::OkStatus();
}

// DLRM's dot interaction over vectors v_0 = z (the bottom output) and v_1..v_F (the fields),
// all of dim d (D when D > 0, known at compile time; else d). Pairs are packed in the order
// (1,0), (2,0), (2,1), (3,0), ...: pair (i, j), i > j, at i (i - 1) / 2 + j.
template <int D>
struct DotKernels {
  // dots (batch x pairs) = v_i . v_j.
  static void Forward(int batch, int fields, int d_rt, const float* z, const float* emb, int emb_ld,
                      float* dots) {
    const int d = D > 0 ? D : d_rt;
    const int pairs = (fields + 1) * fields / 2;
    for (int r = 0; r < batch; ++r) {
      const float* zr = z + size_t(r) * d;
      const float* er = emb + size_t(r) * emb_ld;
      float* out = dots + size_t(r) * pairs;
      for (int i = 1; i <= fields; ++i) {
        const float* __restrict vi = er + size_t(i - 1) * d;
        float* o = out + i * (i - 1) / 2;
        for (int j = 0; j < i; ++j) {
          const float* __restrict vj = j == 0 ? zr : er + size_t(j - 1) * d;
          float s = 0;
#pragma omp simd reduction(+ : s)
          for (int k = 0; k < d; ++k) s += vi[k] * vj[k];
          o[j] = s;
        }
      }
    }
  }

  // From g = dL/d(dots) (batch x pairs): dv_i = sum_j G_ij v_j with G the symmetric n x n
  // matrix of g (zero diagonal), n = fields + 1. Adds dv_0 to dz and writes dv_1..dv_F into the
  // fields' part of emb_grad. `scratch` holds n * n + d floats.
  static void Backward(int batch, int fields, int d_rt, const float* z, const float* emb,
                       int emb_ld, const float* g, float* scratch, float* dz, float* emb_grad) {
    const int d = D > 0 ? D : d_rt;
    const int n = fields + 1;
    const int pairs = n * fields / 2;
    float* sym = scratch;
    float* acc_rt = scratch + size_t(n) * n;
    for (int r = 0; r < batch; ++r) {
      const float* gr = g + size_t(r) * pairs;
      for (int i = 0; i < n; ++i) sym[size_t(i) * n + i] = 0.0f;
      for (int i = 1; i < n; ++i) {
        for (int j = 0; j < i; ++j) {
          const float v = gr[i * (i - 1) / 2 + j];
          sym[size_t(i) * n + j] = v;
          sym[size_t(j) * n + i] = v;
        }
      }
      const float* zr = z + size_t(r) * d;
      const float* er = emb + size_t(r) * emb_ld;
      float* dzr = dz + size_t(r) * d;
      float* egr = emb_grad + size_t(r) * emb_ld;
      for (int i = 0; i < n; ++i) {
        float acc_ct[D > 0 ? D : 1];
        float* __restrict acc = D > 0 ? acc_ct : acc_rt;
        for (int k = 0; k < d; ++k) acc[k] = 0.0f;
        const float* si = sym + size_t(i) * n;
        for (int j = 0; j < n; ++j) {
          const float a = si[j];
          const float* __restrict vj = j == 0 ? zr : er + size_t(j - 1) * d;
          for (int k = 0; k < d; ++k) acc[k] += a * vj[k];
        }
        if (i == 0) {
          for (int k = 0; k < d; ++k) dzr[k] += acc[k];
        } else {
          float* out = egr + size_t(i - 1) * d;
          for (int k = 0; k < d; ++k) out[k] = acc[k];
        }
      }
    }
  }
};

}  // namespace

ModelLayout LayoutOf(const ModelSpec& spec) {
  ModelLayout layout;
  size_t n = 0;
  int in = spec.num_dense;
  int top_in = 0;
  if (spec.type == config::Model::DLRM) {
    for (int out : spec.bottom) {
      layout.bottom.push_back(DenseLayer{in, out, n, true});
      n += size_t(out) * in + out;
      in = out;
    }
    top_in = BottomWidth(spec) + (spec.dot_interaction ? Pairs(spec) : SumOf(spec.field_dims));
  } else {
    const int d0 = spec.num_dense + SumOf(spec.field_dims);
    if (spec.type == config::Model::DCN_V2) {
      for (int l = 0; l < spec.cross_layers; ++l) {
        layout.cross.push_back(CrossLayer{d0, spec.cross_rank, n});
        n += (spec.cross_rank == 0 ? size_t(d0) * d0 : 2 * size_t(d0) * spec.cross_rank) + d0;
      }
    }
    top_in = d0;
  }
  std::vector<int> top_sizes = spec.top;
  top_sizes.push_back(1);
  in = top_in;
  for (size_t i = 0; i < top_sizes.size(); ++i) {
    const bool last = i + 1 == top_sizes.size();
    layout.top.push_back(DenseLayer{in, top_sizes[i], n, !last});
    n += size_t(top_sizes[i]) * in + top_sizes[i];
    in = top_sizes[i];
  }
  layout.num_params = n;
  return layout;
}

absl::StatusOr<std::unique_ptr<CpuModel>> CpuModel::Create(const ModelSpec& spec, uint64_t seed) {
  if (absl::Status s = Validate(spec); !s.ok()) return s;
  auto model = std::unique_ptr<CpuModel>(new CpuModel(spec, LayoutOf(spec)));
  // Layout order (bottom, cross, top), as DLRM's bottom-then-top always drew them.
  uint64_t state = seed ^ 0x5eed0f0d1e5ull;
  float* p = model->params_.data();
  for (const DenseLayer& l : model->layout_.bottom) {
    Glorot(p + l.weight, size_t(l.out) * l.in, l.in, l.out, &state);
  }
  for (const CrossLayer& c : model->layout_.cross) {
    if (c.rank == 0) {
      Glorot(p + c.weight, size_t(c.width) * c.width, c.width, c.width, &state);
    } else {
      Glorot(p + c.weight, 2 * size_t(c.width) * c.rank, c.width, c.rank, &state);
    }
  }
  for (const DenseLayer& l : model->layout_.top) {
    Glorot(p + l.weight, size_t(l.out) * l.in, l.in, l.out, &state);
  }
  return model;
}

CpuModel::CpuModel(const ModelSpec& spec, ModelLayout layout)
    : spec_(spec),
      layout_(std::move(layout)),
      fields_width_(SumOf(spec.field_dims)),
      emb_width_(spec.emb_width()),
      bottom_(layout_.bottom, &gemm_),
      top_(layout_.top, &gemm_),
      params_(layout_.num_params, 0.0f),
      xs_(layout_.cross.size() + 1),
      us_(layout_.cross.size()),
      vs_(layout_.cross.size()) {}

void CpuModel::DotForward(int batch, const float* z, const float* emb) {
  const int d = BottomWidth(spec_);
  float* dots = Reserve(&dots_, size_t(batch) * Pairs(spec_));
  switch (d) {  // the common dims at compile time: the loops then unroll into vector registers
    case 8:
      DotKernels<8>::Forward(batch, spec_.num_fields(), d, z, emb, emb_width_, dots);
      break;
    case 16:
      DotKernels<16>::Forward(batch, spec_.num_fields(), d, z, emb, emb_width_, dots);
      break;
    case 32:
      DotKernels<32>::Forward(batch, spec_.num_fields(), d, z, emb, emb_width_, dots);
      break;
    default:
      DotKernels<0>::Forward(batch, spec_.num_fields(), d, z, emb, emb_width_, dots);
      break;
  }
}

void CpuModel::DotBackward(int batch, const float* z, const float* emb, float* emb_grad) {
  const int d = BottomWidth(spec_);
  const int n = spec_.num_fields() + 1;
  float* scratch = Reserve(&scratch_, size_t(n) * n + d);
  switch (d) {
    case 8:
      DotKernels<8>::Backward(batch, n - 1, d, z, emb, emb_width_, ddots_.data(), scratch,
                              dz_.data(), emb_grad);
      break;
    case 16:
      DotKernels<16>::Backward(batch, n - 1, d, z, emb, emb_width_, ddots_.data(), scratch,
                               dz_.data(), emb_grad);
      break;
    case 32:
      DotKernels<32>::Backward(batch, n - 1, d, z, emb, emb_width_, ddots_.data(), scratch,
                               dz_.data(), emb_grad);
      break;
    default:
      DotKernels<0>::Backward(batch, n - 1, d, z, emb, emb_width_, ddots_.data(), scratch,
                              dz_.data(), emb_grad);
      break;
  }
}

void CpuModel::CrossForward(int batch) {
  const float* p = params_.data();
  const float* x0 = xs_[0].data();
  for (size_t l = 0; l < layout_.cross.size(); ++l) {
    const CrossLayer& c = layout_.cross[l];
    const int d = c.width;
    const float* x = xs_[l].data();
    float* u = Reserve(&us_[l], size_t(batch) * d);
    float* next = Reserve(&xs_[l + 1], size_t(batch) * d);
    const float* b;
    if (c.rank == 0) {
      const float* w = p + c.weight;
      gemm_(false, true, batch, d, d, x, d, w, d, 0.0f, u, d);
      b = w + size_t(d) * d;
    } else {
      const float* v = p + c.weight;             // r x d
      const float* uu = v + size_t(c.rank) * d;  // d x r
      float* vx = Reserve(&vs_[l], size_t(batch) * c.rank);
      gemm_(false, true, batch, c.rank, d, x, d, v, d, 0.0f, vx, c.rank);
      gemm_(false, true, batch, d, c.rank, vx, c.rank, uu, c.rank, 0.0f, u, d);
      b = uu + size_t(d) * c.rank;
    }
    for (int r = 0; r < batch; ++r) {
      const size_t o = size_t(r) * d;
      for (int k = 0; k < d; ++k) {
        u[o + k] += b[k];
        next[o + k] = x0[o + k] * u[o + k] + x[o + k];
      }
    }
  }
}

void CpuModel::CrossBackward(int batch, float* dense_grad) {
  const float* p = params_.data();
  const int d = layout_.cross[0].width;
  const float* x0 = xs_[0].data();
  float* g = gx_.data();  // dL/dx_{l+1}, becomes dL/dx_l
  float* dx0 = Reserve(&dx0_, size_t(batch) * d);
  float* du = Reserve(&du_, size_t(batch) * d);
  std::fill(dx0, dx0 + size_t(batch) * d, 0.0f);
  for (size_t l = layout_.cross.size(); l-- > 0;) {
    const CrossLayer& c = layout_.cross[l];
    const float* x = xs_[l].data();
    const float* u = us_[l].data();
    // du = g * x0 (the gradient of W x_l + b); dx0 += g * u; db = column sums of du.
    float* db = dense_grad + c.weight + (c.rank == 0 ? size_t(d) * d : 2 * size_t(d) * c.rank);
    std::fill(db, db + d, 0.0f);
    for (int r = 0; r < batch; ++r) {
      const size_t o = size_t(r) * d;
      for (int k = 0; k < d; ++k) {
        du[o + k] = g[o + k] * x0[o + k];
        dx0[o + k] += g[o + k] * u[o + k];
        db[k] += du[o + k];
      }
    }
    // dW = du^T x_l and g = g + du W (the residual's gradient plus the product's).
    if (c.rank == 0) {
      const float* w = p + c.weight;
      gemm_(true, false, d, d, batch, du, d, x, d, 0.0f, dense_grad + c.weight, d);
      gemm_(false, false, batch, d, d, du, d, w, d, 1.0f, g, d);
    } else {
      const int rank = c.rank;
      const float* v = p + c.weight;
      const float* uu = v + size_t(rank) * d;
      float* dv_w = dense_grad + c.weight;
      float* du_w = dv_w + size_t(rank) * d;
      float* dvx = Reserve(&dv_, size_t(batch) * rank);
      // dU = du^T (V x); d(V x) = du U; dV = d(V x)^T x; g += d(V x) V.
      gemm_(true, false, d, rank, batch, du, d, vs_[l].data(), rank, 0.0f, du_w, rank);
      gemm_(false, false, batch, rank, d, du, d, uu, rank, 0.0f, dvx, rank);
      gemm_(true, false, rank, d, batch, dvx, rank, x, d, 0.0f, dv_w, d);
      gemm_(false, false, batch, d, rank, dvx, rank, v, d, 1.0f, g, d);
    }
  }
  // x_0 is x0 itself: the residual path's gradient joins the products'.
  for (size_t i = 0; i < size_t(batch) * d; ++i) dx0[i] += g[i];
}

void CpuModel::Forward(int batch, const float* dense, const float* emb) {
  const float* p = params_.data();
  const int nd = spec_.num_dense;
  InputBlock blocks[2];
  int num_blocks = 0;
  auto add = [&](const float* data, int ld, int width) {
    if (width > 0) blocks[num_blocks++] = InputBlock{data, ld, width};
  };
  switch (spec_.type) {
    case config::Model::DLRM: {
      z_ = dense;
      if (!bottom_.empty()) {
        const InputBlock in{dense, nd, nd};
        z_ = bottom_.Forward(p, batch, absl::MakeConstSpan(&in, 1));
      }
      const int dz = BottomWidth(spec_);
      add(z_, dz, dz);
      if (spec_.dot_interaction) {
        DotForward(batch, z_, emb);
        add(dots_.data(), Pairs(spec_), Pairs(spec_));
      } else {
        add(emb, emb_width_, fields_width_);
      }
      break;
    }
    case config::Model::DCN_V2: {
      const int d0 = nd + fields_width_;
      float* x0 = Reserve(&xs_[0], size_t(batch) * d0);
      for (int r = 0; r < batch; ++r) {
        // Without dense features `dense` may be null, which memcpy may not be given even for 0.
        if (nd > 0) std::memcpy(x0 + size_t(r) * d0, dense + size_t(r) * nd, nd * sizeof(float));
        std::memcpy(x0 + size_t(r) * d0 + nd, emb + size_t(r) * emb_width_,
                    fields_width_ * sizeof(float));
      }
      CrossForward(batch);
      add(xs_.back().data(), d0, d0);
      break;
    }
    default:  // WIDE_DEEP, DEEPFM: the deep part reads [dense, e_1..e_F]
      add(dense, nd, nd);
      add(emb, emb_width_, fields_width_);
      break;
  }
  const float* out = top_.Forward(p, batch, absl::MakeConstSpan(blocks, num_blocks));
  float* logits = Reserve(&logits_, batch);
  std::memcpy(logits, out, batch * sizeof(float));
  if (spec_.num_linear > 0) {
    for (int r = 0; r < batch; ++r) {
      const float* lin = emb + size_t(r) * emb_width_ + fields_width_;
      float s = 0;
      for (int j = 0; j < spec_.num_linear; ++j) s += lin[j];
      logits[r] += s;
    }
  }
  if (spec_.type == config::Model::DEEPFM && spec_.num_fields() > 0) {
    // 0.5 sum_k [(sum_f e_fk)^2 - sum_f e_fk^2]
    const int d = spec_.field_dims[0];
    float* sum = Reserve(&scratch_, d);
    for (int r = 0; r < batch; ++r) {
      const float* er = emb + size_t(r) * emb_width_;
      std::fill(sum, sum + d, 0.0f);
      float squares = 0;
      for (int f = 0; f < spec_.num_fields(); ++f) {
#pragma omp simd reduction(+ : squares)
        for (int k = 0; k < d; ++k) {
          const float e = er[size_t(f) * d + k];
          sum[k] += e;
          squares += e * e;
        }
      }
      float total = 0;
#pragma omp simd reduction(+ : total)
      for (int k = 0; k < d; ++k) total += sum[k] * sum[k];
      logits[r] += 0.5f * (total - squares);
    }
  }
}

void CpuModel::Backward(int batch, const float* emb, float* dense_grad, float* emb_grad) {
  const float* p = params_.data();
  GradBlock grads[2];
  int num_grads = 0;
  auto add = [&](float* data, int ld, int width) {
    if (width > 0) grads[num_grads++] = GradBlock{data, ld};
  };
  // The top MLP may overwrite its dy: hand it a copy of dL/dlogit.
  float* dtop = Reserve(&logits_, batch);
  std::memcpy(dtop, dlogit_.data(), batch * sizeof(float));
  const int nd = spec_.num_dense;
  switch (spec_.type) {
    case config::Model::DLRM: {
      const int dz = BottomWidth(spec_);
      // Without a bottom MLP z is the dense input, whose gradient is only computed to keep the
      // interaction's code simple.
      float* dzp = Reserve(&dz_, size_t(batch) * dz);
      add(dzp, dz, dz);
      if (spec_.dot_interaction) {
        add(Reserve(&ddots_, size_t(batch) * Pairs(spec_)), Pairs(spec_), Pairs(spec_));
      } else {
        add(emb_grad, emb_width_, fields_width_);
      }
      top_.Backward(p, batch, dtop, dense_grad, absl::MakeConstSpan(grads, num_grads));
      if (spec_.dot_interaction) {
        DotBackward(batch, z_, emb, emb_grad);
      }
      if (!bottom_.empty()) bottom_.Backward(p, batch, dzp, dense_grad, {});
      break;
    }
    case config::Model::DCN_V2: {
      const int d0 = nd + fields_width_;
      add(Reserve(&gx_, size_t(batch) * d0), d0, d0);
      top_.Backward(p, batch, dtop, dense_grad, absl::MakeConstSpan(grads, num_grads));
      CrossBackward(batch, dense_grad);
      for (int r = 0; r < batch; ++r) {
        std::memcpy(emb_grad + size_t(r) * emb_width_, dx0_.data() + size_t(r) * d0 + nd,
                    fields_width_ * sizeof(float));
      }
      break;
    }
    default:
      add(nullptr, nd, nd);
      add(emb_grad, emb_width_, fields_width_);
      top_.Backward(p, batch, dtop, dense_grad, absl::MakeConstSpan(grads, num_grads));
      break;
  }
  const float* dlogit = dlogit_.data();
  if (spec_.type == config::Model::DEEPFM && spec_.num_fields() > 0) {
    // d fm / d e_fk = sum_f' e_f'k - e_fk.
    const int d = spec_.field_dims[0];
    float* sum = Reserve(&scratch_, d);
    for (int r = 0; r < batch; ++r) {
      const float* er = emb + size_t(r) * emb_width_;
      float* gr = emb_grad + size_t(r) * emb_width_;
      std::fill(sum, sum + d, 0.0f);
      for (int f = 0; f < spec_.num_fields(); ++f) {
        for (int k = 0; k < d; ++k) sum[k] += er[size_t(f) * d + k];
      }
      for (int f = 0; f < spec_.num_fields(); ++f) {
        for (int k = 0; k < d; ++k) {
          gr[size_t(f) * d + k] += dlogit[r] * (sum[k] - er[size_t(f) * d + k]);
        }
      }
    }
  }
  for (int r = 0; r < batch; ++r) {
    float* lin = emb_grad + size_t(r) * emb_width_ + fields_width_;
    for (int j = 0; j < spec_.num_linear; ++j) lin[j] = dlogit[r];
  }
}

float CpuModel::ForwardBackward(int batch, const float* dense, const float* emb,
                                const float* labels, float loss_scale, float* dense_grad,
                                float* emb_grad, float* probs) {
  Forward(batch, dense, emb);
  const float* logits = logits_.data();
  float* dlogit = Reserve(&dlogit_, batch);
  double loss = 0;
  for (int r = 0; r < batch; ++r) {
    const float z = logits[r];
    const float y = labels[r];
    probs[r] = Sigmoid(z);
    // log(1 + exp(z)) - y z, computed stably.
    loss += std::max(z, 0.0f) + std::log1p(std::exp(-std::fabs(z))) - y * z;
    dlogit[r] = (probs[r] - y) * loss_scale / batch;
  }
  Backward(batch, emb, dense_grad, emb_grad);
  return static_cast<float>(loss / batch);
}

void CpuModel::Predict(int batch, const float* dense, const float* emb, float* probs) {
  Forward(batch, dense, emb);
  for (int r = 0; r < batch; ++r) probs[r] = Sigmoid(logits_[r]);
}

}  // namespace worker
}  // namespace ps

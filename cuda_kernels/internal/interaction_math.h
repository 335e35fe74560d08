// The per-thread work of the kernels in interaction.h, as inline functions that both nvcc (for the
// device) and the host compiler (for interaction_math_test, which runs without a GPU) compile: a
// kernel computes its thread's index t and, when t < the kernel's thread count, calls the
// function named after it here, so all index arithmetic and every sum's order are checked on the
// host against plain loops. Plain C++: no CUDA header, no CUDA type.
//
// Matrices are batch-major rows with a leading dimension (`*_ld`, floats between the starts of two
// samples' rows), as the launchers of interaction.h take them.
#ifndef PS_CUDA_KERNELS_INTERNAL_INTERACTION_MATH_H_
#define PS_CUDA_KERNELS_INTERNAL_INTERACTION_MATH_H_

#include <cstdint>

#ifdef __CUDACC__
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

namespace ps {
namespace cuda {
namespace internal {

// ---- DLRM's dot interaction over the n = fields + 1 vectors v_0 = z, v_i = field i - 1.

// Pairs (i, j), i > j, are packed (1,0), (2,0), (2,1), (3,0), ...: pair (i, j) at i (i - 1) / 2 +
// j.
PS_HOST_DEVICE inline int PairIndex(int i, int j) { return i * (i - 1) / 2 + j; }

// The inverse of PairIndex: the pair packed at p >= 0.
PS_HOST_DEVICE inline void PairOf(int p, int* i, int* j) {
  int a = 1;
  while ((a + 1) * a / 2 <= p) ++a;
  *i = a;
  *j = p - a * (a - 1) / 2;
}

// Pairs of `fields` + 1 vectors.
PS_HOST_DEVICE inline int NumPairs(int fields) { return (fields + 1) * fields / 2; }

struct DotArgs {
  const float* z;  // batch x dim, rows z_ld apart
  int64_t z_ld;
  const float* emb;  // per sample `fields` vectors of dim floats, rows emb_ld apart
  int64_t emb_ld;
  int batch;
  int fields;
  int dim;
};

// Vector i (0: z) of sample r.
PS_HOST_DEVICE inline const float* DotVector(const DotArgs& a, int64_t r, int i) {
  return i == 0 ? a.z + r * a.z_ld : a.emb + r * a.emb_ld + static_cast<int64_t>(i - 1) * a.dim;
}

// Forward: one thread per (sample, pair), t = r * pairs + p:
//   out[r * out_ld + p] = v_i . v_j, summed over k in order.
PS_HOST_DEVICE inline int64_t DotForwardThreads(const DotArgs& a) {
  return static_cast<int64_t>(a.batch) * NumPairs(a.fields);
}
PS_HOST_DEVICE inline void DotForwardThread(int64_t t, const DotArgs& a, float* out,
                                            int64_t out_ld) {
  const int pairs = NumPairs(a.fields);
  const int64_t r = t / pairs;
  const int p = static_cast<int>(t - r * pairs);
  int i, j;
  PairOf(p, &i, &j);
  const float* vi = DotVector(a, r, i);
  const float* vj = DotVector(a, r, j);
  float s = 0.0f;
  for (int k = 0; k < a.dim; ++k) s += vi[k] * vj[k];
  out[r * out_ld + p] = s;
}

// Backward: one thread per (sample, vector, component), t = (r * n + i) * dim + k, from
// g = dL/d(dots) (sample r's pairs at grad + r * grad_ld):
//   dv_i[k] = sum over j != i, in increasing j, of g(i, j) v_j[k];
// dv_0 is added to z_grad (rows z_grad_ld apart), dv_1..dv_F written into emb_grad's fields
// (rows emb_grad_ld apart, field f at f * dim).
PS_HOST_DEVICE inline int64_t DotBackwardThreads(const DotArgs& a) {
  return static_cast<int64_t>(a.batch) * (a.fields + 1) * a.dim;
}
PS_HOST_DEVICE inline void DotBackwardThread(int64_t t, const DotArgs& a, const float* grad,
                                             int64_t grad_ld, float* z_grad, int64_t z_grad_ld,
                                             float* emb_grad, int64_t emb_grad_ld) {
  const int n = a.fields + 1;
  const int64_t ri = t / a.dim;
  const int k = static_cast<int>(t - ri * a.dim);
  const int64_t r = ri / n;
  const int i = static_cast<int>(ri - r * n);
  const float* g = grad + r * grad_ld;
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (j == i) continue;
    const float gij = i > j ? g[PairIndex(i, j)] : g[PairIndex(j, i)];
    acc += gij * DotVector(a, r, j)[k];
  }
  if (i == 0) {
    z_grad[r * z_grad_ld + k] += acc;
  } else {
    emb_grad[r * emb_grad_ld + static_cast<int64_t>(i - 1) * a.dim + k] = acc;
  }
}

// ---- DEEPFM's second-order term over `fields` fields of one dim, and the linear sum.

// 0.5 sum_k [(sum_f e_fk)^2 - sum_f e_fk^2] of one sample's fields e (f-major): the squares
// summed over f then k, each column's sum over f, their squares summed over k.
PS_HOST_DEVICE inline float FmTerm(const float* e, int fields, int dim) {
  float squares = 0.0f;
  for (int f = 0; f < fields; ++f) {
    for (int k = 0; k < dim; ++k) {
      const float v = e[f * dim + k];
      squares += v * v;
    }
  }
  float total = 0.0f;
  for (int k = 0; k < dim; ++k) {
    float s = 0.0f;
    for (int f = 0; f < fields; ++f) s += e[f * dim + k];
    total += s * s;
  }
  return 0.5f * (total - squares);
}

// d FmTerm / d e_fk = sum_f' e_f'k - e_fk (the column summed over f' in order).
PS_HOST_DEVICE inline float FmGrad(const float* e, int fields, int dim, int f, int k) {
  float s = 0.0f;
  for (int g = 0; g < fields; ++g) s += e[g * dim + k];
  return s - e[f * dim + k];
}

// Forward of the logit's extra terms: one thread per sample r, adding to logits[r]
//   the sum of the n linear inputs at emb + r * emb_ld + offset, in order (FmForward: the FM term
//   of the fields at emb + r * emb_ld).
PS_HOST_DEVICE inline void LinearForwardThread(int64_t r, const float* emb, int64_t emb_ld,
                                               int offset, int n, float* logits) {
  const float* lin = emb + r * emb_ld + offset;
  float s = 0.0f;
  for (int j = 0; j < n; ++j) s += lin[j];
  logits[r] += s;
}
PS_HOST_DEVICE inline void FmForwardThread(int64_t r, const float* emb, int64_t emb_ld, int fields,
                                           int dim, float* logits) {
  logits[r] += FmTerm(emb + r * emb_ld, fields, dim);
}

// Backward: the linear inputs' gradient is dL/dlogit. One thread per (sample, input),
// t = r * n + j: emb_grad[r * emb_grad_ld + offset + j] = dlogit[r].
PS_HOST_DEVICE inline void LinearBackwardThread(int64_t t, const float* dlogit, int offset, int n,
                                                float* emb_grad, int64_t emb_grad_ld) {
  const int64_t r = t / n;
  const int j = static_cast<int>(t - r * n);
  emb_grad[r * emb_grad_ld + offset + j] = dlogit[r];
}

// FM backward: one thread per (sample, field, component), t = (r * fields + f) * dim + k:
//   emb_grad[r * emb_grad_ld + f * dim + k] += dlogit[r] * FmGrad(sample r's fields, f, k).
PS_HOST_DEVICE inline void FmBackwardThread(int64_t t, const float* emb, int64_t emb_ld, int fields,
                                            int dim, const float* dlogit, float* emb_grad,
                                            int64_t emb_grad_ld) {
  const int64_t rf = t / dim;
  const int k = static_cast<int>(t - rf * dim);
  const int64_t r = rf / fields;
  const int f = static_cast<int>(rf - r * fields);
  emb_grad[r * emb_grad_ld + static_cast<int64_t>(f) * dim + k] +=
      dlogit[r] * FmGrad(emb + r * emb_ld, fields, dim, f, k);
}

// ---- DCN_V2's elementwise part of a cross layer, over contiguous batch x width matrices; one
// thread per element t = r * width + k.

// u = W x_l (in), becomes W x_l + b; next = x0 * u + x_l.
PS_HOST_DEVICE inline void CrossForwardThread(int64_t t, int width, const float* x0, const float* x,
                                              const float* bias, float* u, float* next) {
  const int k = static_cast<int>(t % width);
  const float v = u[t] + bias[k];
  u[t] = v;
  next[t] = x0[t] * v + x[t];
}

// From g = dL/dx_{l+1}: du = g * x0 (the gradient of W x_l + b); dx0 += g * u.
PS_HOST_DEVICE inline void CrossBackwardThread(int64_t t, const float* g, const float* x0,
                                               const float* u, float* du, float* dx0) {
  du[t] = g[t] * x0[t];
  dx0[t] += g[t] * u[t];
}

// y += x, elementwise.
PS_HOST_DEVICE inline void AddThread(int64_t t, const float* x, float* y) { y[t] += x[t]; }

}  // namespace internal
}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_INTERNAL_INTERACTION_MATH_H_

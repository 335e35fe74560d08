// Kernels of what the model families compute besides their dense layers (worker/model/README.md):
// DLRM's pairwise dot interaction, DEEPFM's second-order (FM) term, the sum of the linear inputs,
// and DCN_V2's elementwise part of a cross layer, each with its backward. Matrices are row-major,
// one sample a row; `*_ld` is the number of floats between two samples' rows, so a kernel can read
// or write a block of columns inside a wider row (an MLP's concatenated input, or the `emb` rows
// of model_spec.h, fields then linear inputs).
//
// All pointers passed to launchers are device pointers; launchers queue work on `stream` (a
// cudaStream_t, nullptr for the default stream) and return at once. Each returns kInvalidArgument,
// before touching the device, on negative sizes, a dim < 1, or a leading dimension shorter than
// the row it must hold; with no work (no sample, no pair, no element) nothing is launched and the
// result is ok. Every output element is computed by one thread that sums its terms in a fixed
// order (no atomics): the same bits on every run. The per-thread arithmetic is in
// internal/interaction_math.h, tested on the host by interaction_math_test.
#ifndef PS_CUDA_KERNELS_INTERACTION_H_
#define PS_CUDA_KERNELS_INTERACTION_H_

#include <cstdint>

#include "cuda_kernels/error.h"

namespace ps {
namespace cuda {

// DLRM's dot interaction of n = fields + 1 vectors of `dim` floats per sample: v_0 is the sample's
// row of z (batch x dim, ld z_ld >= dim), v_i (i >= 1) the i-th `dim` floats of its row of emb
// (ld emb_ld >= fields * dim). Writes the (fields + 1) fields / 2 dot products v_i . v_j, i > j,
// packed (1,0), (2,0), (2,1), (3,0), ... (pair (i, j) at i (i - 1) / 2 + j), into out (ld
// out_ld >= the number of pairs).
Error DotInteraction(const float* z, int64_t z_ld, const float* emb, int64_t emb_ld, int batch,
                     int fields, int dim, float* out, int64_t out_ld, void* stream);

// The backward of DotInteraction from grad = dL/d(out) (ld grad_ld >= pairs):
//   dv_i = sum over j != i of grad(i, j) v_j;
// dv_0 is ADDED to z_grad (ld z_grad_ld >= dim: it already holds z's other gradient), dv_1..dv_F
// are written into the fields of emb_grad (ld emb_grad_ld >= fields * dim). grad may lie in the
// same rows as z_grad (other columns).
Error DotInteractionBackward(const float* grad, int64_t grad_ld, const float* z, int64_t z_ld,
                             const float* emb, int64_t emb_ld, int batch, int fields, int dim,
                             float* z_grad, int64_t z_grad_ld, float* emb_grad, int64_t emb_grad_ld,
                             void* stream);

// logits[r] += the sum of the n floats at emb + r * emb_ld + offset (the linear inputs), for
// r < batch. Needs offset >= 0 and emb_ld >= offset + n.
Error LinearForward(const float* emb, int64_t emb_ld, int offset, int n, int batch, float* logits,
                    void* stream);

// The linear inputs' gradient: emb_grad[r * emb_grad_ld + offset + j] = dlogit[r] for j < n.
// Needs offset >= 0 and emb_grad_ld >= offset + n.
Error LinearBackward(const float* dlogit, int offset, int n, int batch, float* emb_grad,
                     int64_t emb_grad_ld, void* stream);

// DEEPFM's second-order term: logits[r] += 0.5 sum_k [(sum_f e_fk)^2 - sum_f e_fk^2] over the
// `fields` fields of dim floats at the start of each row of emb (ld emb_ld >= fields * dim).
Error FmForward(const float* emb, int64_t emb_ld, int fields, int dim, int batch, float* logits,
                void* stream);

// Its backward: emb_grad[r, f * dim + k] += dlogit[r] * (sum_f' e_f'k - e_fk), added to what the
// fields' gradient already holds (ld emb_grad_ld >= fields * dim).
Error FmBackward(const float* emb, int64_t emb_ld, int fields, int dim, int batch,
                 const float* dlogit, float* emb_grad, int64_t emb_grad_ld, void* stream);

// DCN_V2's cross layer after its product, over contiguous batch x width matrices: u holds
// W x_l, becomes W x_l + bias (bias: width floats); next = x0 * u + x (elementwise).
Error CrossForward(const float* x0, const float* x, const float* bias, int batch, int width,
                   float* u, float* next, void* stream);

// Its backward from g = dL/d(next): du = g * x0, dx0 += g * u. The bias's gradient is the column
// sums of du (BiasReluBackward without ReLU), the product's the GEMMs of blas.h.
Error CrossBackward(const float* g, const float* x0, const float* u, int batch, int width,
                    float* du, float* dx0, void* stream);

// y[i] += x[i] for i < n.
Error Add(const float* x, int64_t n, float* y, void* stream);

}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_INTERACTION_H_

// Optimizers of embedding rows and dense chunks: sgd, adagrad, row-wise adagrad, adam and
// ftrl-proximal.
//
// A row of a table is `dim` weights followed by StateFloats(dim) floats of optimizer state, so a
// row is one contiguous block and the optimizer never allocates. The updates, per coordinate i,
// with lr the learning rate and g the gradient:
//
//   sgd      no state.
//            w -= lr * g
//   adagrad  state: acc[dim], starting at initial_accumulator.
//            acc += g^2;  w -= lr * g / (sqrt(acc) + epsilon)
//   rowwise_adagrad
//            state: one float acc for the whole row, starting at initial_accumulator.
//            acc += mean over the row of g_i^2;  then per coordinate
//            w_i -= lr * g_i / (sqrt(acc) + epsilon)
//            The mean of the squares (not their sum) is what TorchRec/FBGEMM's
//            EXACT_ROWWISE_ADAGRAD accumulates (fbgemm_gpu/codegen/genscript/optimizers.py,
//            rowwise_adagrad(): g_avg_square = sum of squares / D), so a row whose coordinates
//            all get the same gradient moves as under adagrad. One float of state instead of dim
//            (the compact rows of issue 35). The squares are summed in double and the mean rounded
//            to float once (then equal gradients give adagrad's weights bit for bit whenever that
//            sum is exact: any dim <= 32, or squares with short significands).
//            Tables only: job validation refuses it as dense_optimizer, whose "row" is a chunk
//            of cluster.dense_chunk_floats floats on the servers and the whole model on a worker,
//            so one accumulator per row would make results depend on a transport setting.
//   adam     state: m[dim], v[dim] (starting at 0), then one float holding the bit pattern of a
//            uint32 step counter t (starting at 0, saturating at 2^32 - 1) shared by the row.
//            Per update: t += 1;  lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)  (in double), then
//            m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2;
//            w -= lr_t * m / (sqrt(v) + epsilon)
//   ftrl     FTRL-proximal (McMahan et al., "Ad Click Prediction: a View from the Trenches",
//            KDD 2013) with TensorFlow's generalised schedule.
//            state: z[dim], n[dim], starting at 0.  p = -lr_power >= 0 (the paper's p = 0.5 is
//            computed with sqrt, any other p with pow)
//            sigma = ((n + g^2)^p - n^p) / lr;  z += g - sigma * w;  n += g^2
//            w = |z| <= l1 ? 0 : -(z - sign(z) * l1) / ((ftrl_beta + n^p) / lr + l2)
//
// Weight decay (`l2` > 0, sgd, adagrad, rowwise_adagrad and adam): the gradient of coordinate i
// becomes g + l2 * w (the gradient of the loss plus l2/2 * |w|^2: PyTorch's `weight_decay`,
// coupled, not AdamW's decoupled form; FBGEMM's weight_decay_mode L2) before the update above,
// also inside the adagrads' accumulators and adam's moments. Applied lazily, as the peers do: a
// row decays only when an update touches it (a sparse push, or a sync step that sums pushes of
// it), never in the background. ftrl's `l2` is its own proximal term in the formula above; `l1` is
// ftrl's only.
//
// Arithmetic is in float except adam's lr_t and rowwise_adagrad's sum of squares. The update of a
// row is one virtual call and then a plain loop over coordinates that the compiler vectorises (all
// but ftrl with lr_power != -0.5, which calls pow per coordinate, and rowwise_adagrad's sum, a
// serial loop in double); the same objects update dense chunks (dim = the chunk length).
#ifndef PS_COMMON_OPTIMIZER_H_
#define PS_COMMON_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace ps {

// An Optimizer updates parameters from gradients with per-parameter state. Thread-compatible;
// stateless itself (all state lives in the caller's floats), so one instance serves every row and
// shard.
class Optimizer {
 public:
  // Returns the optimizer that `options` describes. INVALID_ARGUMENT for an unknown type or a bad
  // hyperparameter, by the rules of common/job_config.cc (jobs are validated before: this is a
  // second line of defence).
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const config::Optimizer& options);

  Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;

  // Floats of state that follow `dim` weights in a row.
  virtual uint32_t StateFloats(uint32_t dim) const = 0;

  // Writes the initial state of a new row or chunk of `dim` weights to `state`
  // (StateFloats(dim) floats).
  virtual void InitState(uint32_t dim, float* state) const = 0;

  // One update of the `dim` weights `w` from the gradient `g` (dim floats, finite), updating
  // `state` (StateFloats(dim) floats). `g` must not overlap `w` or `state`.
  virtual void Apply(uint32_t dim, const float* g, float* w, float* state) const = 0;
};

}  // namespace ps

#endif  // PS_COMMON_OPTIMIZER_H_

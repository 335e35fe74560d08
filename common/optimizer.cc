#include "common/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace {

// The update loops are free functions with __restrict__ parameters (weights, gradient and state
// are disjoint by the header's contract), so that the compiler vectorises them without run-time
// overlap checks.

// The gradient of coordinate i with weight decay: g + l2 * w (kL2 false: g itself, so that a job
// without l2 computes exactly what it did before l2 existed, with no extra work).
template <bool kL2>
inline float Decayed(float g, float w, float l2) {
  return kL2 ? g + l2 * w : g;
}

template <bool kL2>
void SgdUpdate(uint32_t dim, float lr, float l2, const float* __restrict__ g,
               float* __restrict__ w) {
  for (uint32_t i = 0; i < dim; ++i) w[i] -= lr * Decayed<kL2>(g[i], w[i], l2);
}

template <bool kL2>
void AdagradUpdate(uint32_t dim, float lr, float eps, float l2, const float* __restrict__ g,
                   float* __restrict__ w, float* __restrict__ acc) {
  for (uint32_t i = 0; i < dim; ++i) {
    const float gi = Decayed<kL2>(g[i], w[i], l2);
    const float a = acc[i] + gi * gi;
    acc[i] = a;
    w[i] -= lr * gi / (std::sqrt(a) + eps);
  }
}

// The accumulator's increment is the mean of the squares, summed in double (each product of two
// floats is exact there) and rounded to float once. The update itself is adagrad's expression
// with one denominator for the row, so that equal gradients give adagrad's result bit for bit.
template <bool kL2>
void RowwiseAdagradUpdate(uint32_t dim, float lr, float eps, float l2, const float* __restrict__ g,
                          float* __restrict__ w, float* __restrict__ acc) {
  double sum = 0;
  for (uint32_t i = 0; i < dim; ++i) {
    const float gi = Decayed<kL2>(g[i], w[i], l2);
    sum += double{gi} * gi;
  }
  const float a = *acc + static_cast<float>(sum / dim);
  *acc = a;
  const float denominator = std::sqrt(a) + eps;
  for (uint32_t i = 0; i < dim; ++i) {
    const float gi = Decayed<kL2>(g[i], w[i], l2);
    w[i] -= lr * gi / denominator;
  }
}

template <bool kL2>
void AdamUpdate(uint32_t dim, float lr_t, float b1, float b2, float eps, float l2,
                const float* __restrict__ g, float* __restrict__ w, float* __restrict__ m,
                float* __restrict__ v) {
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
  for (uint32_t i = 0; i < dim; ++i) {
    const float gi = Decayed<kL2>(g[i], w[i], l2);
    const float mi = b1 * m[i] + one_minus_b1 * gi;
    const float vi = b2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] -= lr_t * mi / (std::sqrt(vi) + eps);
  }
}

// n^p is computed by `pow_p`, inlined into the loop (sqrt for the classic p = 0.5).
template <typename PowP>
void FtrlUpdate(uint32_t dim, float lr, float l1, float l2, float beta, PowP pow_p,
                const float* __restrict__ g, float* __restrict__ w, float* __restrict__ z,
                float* __restrict__ n) {
  for (uint32_t i = 0; i < dim; ++i) {
    const float n_old = n[i];
    const float n_new = n_old + g[i] * g[i];
    const float pow_new = pow_p(n_new);
    const float sigma = (pow_new - pow_p(n_old)) / lr;
    const float zi = z[i] + g[i] - sigma * w[i];
    z[i] = zi;
    n[i] = n_new;
    // Computed unconditionally and then selected, so the loop has no branch to vectorise
    // around (the quotient is discarded whenever the denominator can be 0: then z = 0).
    const float shrunk = zi - std::copysign(l1, zi);
    const float value = -shrunk / ((beta + pow_new) / lr + l2);
    w[i] = std::fabs(zi) <= l1 ? 0.0f : value;
  }
}

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(float lr, float l2) : lr_(lr), l2_(l2) {}

  uint32_t StateFloats(uint32_t dim) const override { return 0; }
  void InitState(uint32_t dim, float* state) const override {}
  void Apply(uint32_t dim, const float* g, float* w, float* state) const override {
    if (l2_ > 0) {
      SgdUpdate<true>(dim, lr_, l2_, g, w);
    } else {
      SgdUpdate<false>(dim, lr_, l2_, g, w);
    }
  }

 private:
  const float lr_;
  const float l2_;
};

class AdagradOptimizer final : public Optimizer {
 public:
  AdagradOptimizer(float lr, float initial_accumulator, float epsilon, float l2)
      : lr_(lr), initial_accumulator_(initial_accumulator), epsilon_(epsilon), l2_(l2) {}

  uint32_t StateFloats(uint32_t dim) const override { return dim; }
  void InitState(uint32_t dim, float* state) const override {
    std::fill(state, state + dim, initial_accumulator_);
  }
  void Apply(uint32_t dim, const float* g, float* w, float* state) const override {
    if (l2_ > 0) {
      AdagradUpdate<true>(dim, lr_, epsilon_, l2_, g, w, state);
    } else {
      AdagradUpdate<false>(dim, lr_, epsilon_, l2_, g, w, state);
    }
  }

 private:
  const float lr_;
  const float initial_accumulator_;
  const float epsilon_;
  const float l2_;
};

class RowwiseAdagradOptimizer final : public Optimizer {
 public:
  RowwiseAdagradOptimizer(float lr, float initial_accumulator, float epsilon, float l2)
      : lr_(lr), initial_accumulator_(initial_accumulator), epsilon_(epsilon), l2_(l2) {}

  uint32_t StateFloats(uint32_t dim) const override { return 1; }
  void InitState(uint32_t dim, float* state) const override { *state = initial_accumulator_; }
  void Apply(uint32_t dim, const float* g, float* w, float* state) const override {
    if (l2_ > 0) {
      RowwiseAdagradUpdate<true>(dim, lr_, epsilon_, l2_, g, w, state);
    } else {
      RowwiseAdagradUpdate<false>(dim, lr_, epsilon_, l2_, g, w, state);
    }
  }

 private:
  const float lr_;
  const float initial_accumulator_;
  const float epsilon_;
  const float l2_;
};

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(float lr, float beta1, float beta2, float epsilon, float l2)
      : lr_(lr), beta1_(beta1), beta2_(beta2), epsilon_(epsilon), l2_(l2) {}

  uint32_t StateFloats(uint32_t dim) const override { return 2 * dim + 1; }
  void InitState(uint32_t dim, float* state) const override {
    // All-zero bits are 0.0f for the moments and step 0 for the counter.
    std::memset(state, 0, sizeof(float) * StateFloats(dim));
  }
  void Apply(uint32_t dim, const float* g, float* w, float* state) const override {
    uint32_t step;
    std::memcpy(&step, state + 2 * dim, sizeof(step));
    if (step != std::numeric_limits<uint32_t>::max()) ++step;
    std::memcpy(state + 2 * dim, &step, sizeof(step));
    const double t = step;
    const float lr_t = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(double{beta2_}, t)) /
                                          (1.0 - std::pow(double{beta1_}, t)));
    if (l2_ > 0) {
      AdamUpdate<true>(dim, lr_t, beta1_, beta2_, epsilon_, l2_, g, w, state, state + dim);
    } else {
      AdamUpdate<false>(dim, lr_t, beta1_, beta2_, epsilon_, l2_, g, w, state, state + dim);
    }
  }

 private:
  const double lr_;
  const float beta1_;
  const float beta2_;
  const float epsilon_;
  const float l2_;
};

class FtrlOptimizer final : public Optimizer {
 public:
  FtrlOptimizer(float lr, float l1, float l2, float beta, float lr_power)
      : lr_(lr), l1_(l1), l2_(l2), beta_(beta), power_(-lr_power) {}

  uint32_t StateFloats(uint32_t dim) const override { return 2 * dim; }
  void InitState(uint32_t dim, float* state) const override {
    std::memset(state, 0, sizeof(float) * StateFloats(dim));
  }
  void Apply(uint32_t dim, const float* g, float* w, float* state) const override {
    if (power_ == 0.5f) {
      const auto sqrt = [](float x) { return std::sqrt(x); };
      FtrlUpdate(dim, lr_, l1_, l2_, beta_, sqrt, g, w, state, state + dim);
    } else {
      const float p = power_;
      const auto pow_p = [p](float x) { return std::pow(x, p); };
      FtrlUpdate(dim, lr_, l1_, l2_, beta_, pow_p, g, w, state, state + dim);
    }
  }

 private:
  const float lr_;
  const float l1_;
  const float l2_;
  const float beta_;
  const float power_;
};

absl::Status Bad(absl::string_view field, absl::string_view rule, float value) {
  return absl::InvalidArgumentError(absl::StrCat("optimizer.", field, ": ", rule, ", got ", value));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const config::Optimizer& o) {
  const std::string& type = o.type();
  if (type != "sgd" && type != "adagrad" && type != "rowwise_adagrad" && type != "adam" &&
      type != "ftrl") {
    return absl::InvalidArgumentError(
        absl::StrFormat("optimizer.type: unknown optimizer \"%s\" (expected sgd, adagrad, "
                        "rowwise_adagrad, adam or ftrl)",
                        type));
  }
  if (!std::isfinite(o.learning_rate()) || !(o.learning_rate() > 0)) {
    return Bad("learning_rate", "must be a positive number", o.learning_rate());
  }
  if (!std::isfinite(o.l2()) || !(o.l2() >= 0)) return Bad("l2", "must be >= 0", o.l2());
  if (type != "ftrl" && o.l1() != 0) return Bad("l1", "is an ftrl setting", o.l1());
  if (type == "sgd") {
    return std::unique_ptr<Optimizer>(new SgdOptimizer(o.learning_rate(), o.l2()));
  }
  if (type == "adagrad" || type == "rowwise_adagrad") {
    if (!(o.initial_accumulator() > 0)) {
      return Bad("initial_accumulator", absl::StrCat("must be > 0 for ", type),
                 o.initial_accumulator());
    }
    if (!(o.epsilon() > 0)) return Bad("epsilon", "must be > 0", o.epsilon());
    if (type == "rowwise_adagrad") {
      return std::unique_ptr<Optimizer>(new RowwiseAdagradOptimizer(
          o.learning_rate(), o.initial_accumulator(), o.epsilon(), o.l2()));
    }
    return std::unique_ptr<Optimizer>(
        new AdagradOptimizer(o.learning_rate(), o.initial_accumulator(), o.epsilon(), o.l2()));
  }
  if (type == "adam") {
    if (!(o.epsilon() > 0)) return Bad("epsilon", "must be > 0", o.epsilon());
    if (!(o.beta1() >= 0 && o.beta1() < 1)) return Bad("beta1", "must be in [0, 1)", o.beta1());
    if (!(o.beta2() >= 0 && o.beta2() < 1)) return Bad("beta2", "must be in [0, 1)", o.beta2());
    return std::unique_ptr<Optimizer>(
        new AdamOptimizer(o.learning_rate(), o.beta1(), o.beta2(), o.epsilon(), o.l2()));
  }
  // ftrl
  if (!(o.l1() >= 0)) return Bad("l1", "must be >= 0", o.l1());
  if (!(o.ftrl_beta() >= 0)) return Bad("ftrl_beta", "must be >= 0", o.ftrl_beta());
  if (!(o.lr_power() <= 0)) return Bad("lr_power", "must be <= 0", o.lr_power());
  return std::unique_ptr<Optimizer>(
      new FtrlOptimizer(o.learning_rate(), o.l1(), o.l2(), o.ftrl_beta(), o.lr_power()));
}

}  // namespace ps

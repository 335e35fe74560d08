#include "common/optimizer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace ps {
namespace {

config::Optimizer Options(const std::string& type) {
  config::Optimizer o;
  o.set_type(type);
  o.set_learning_rate(0.05f);
  return o;
}

// The configurations every test runs over: each type, and ftrl on both of its code paths.
config::Optimizer AnyOptimizer() {
  const int which = GENERATE(range(0, 11));
  switch (which) {
    case 0:
      return Options("sgd");
    case 1:
      return Options("adagrad");
    case 9:
      return Options("rowwise_adagrad");
    case 10: {
      config::Optimizer o = Options("rowwise_adagrad");
      o.set_l2(0.1f);
      o.set_initial_accumulator(0.5f);
      o.set_epsilon(1e-3f);
      return o;
    }
    case 2: {
      config::Optimizer o = Options("adam");
      return o;
    }
    case 3: {
      config::Optimizer o = Options("adam");
      o.set_beta1(0.5f);
      o.set_beta2(0.75f);
      o.set_epsilon(1e-3f);
      return o;
    }
    case 4: {
      config::Optimizer o = Options("ftrl");
      o.set_l1(0.01f);
      o.set_l2(0.1f);
      return o;
    }
    case 6: {
      config::Optimizer o = Options("sgd");
      o.set_l2(0.5f);
      return o;
    }
    case 7: {
      config::Optimizer o = Options("adagrad");
      o.set_l2(0.1f);
      return o;
    }
    case 8: {
      config::Optimizer o = Options("adam");
      o.set_l2(0.01f);
      return o;
    }
    default: {
      config::Optimizer o = Options("ftrl");
      o.set_l1(0.001f);
      o.set_l2(0.0f);
      o.set_ftrl_beta(0.5f);
      o.set_lr_power(-0.3f);
      return o;
    }
  }
}

// A plain, unvectorised implementation of the header's formulas, one coordinate at a time, with
// the state in named arrays.
class Reference {
 public:
  Reference(const config::Optimizer& o, uint32_t dim) : o_(o), a_(dim, 0.0f), b_(dim, 0.0f) {
    if (o.type() == "adagrad") a_.assign(dim, o.initial_accumulator());
    if (o.type() == "rowwise_adagrad") a_.assign(1, o.initial_accumulator());
  }

  void Apply(const std::vector<float>& g_in, std::vector<float>& w) {
    const float lr = o_.learning_rate();
    // Weight decay (not ftrl's): the gradient of loss + l2/2 |w|^2.
    std::vector<float> g = g_in;
    if (o_.type() != "ftrl") {
      for (size_t i = 0; i < w.size(); ++i) g[i] = g_in[i] + o_.l2() * w[i];
    }
    if (o_.type() == "sgd") {
      for (size_t i = 0; i < w.size(); ++i) w[i] = w[i] - lr * g[i];
    } else if (o_.type() == "adagrad") {
      for (size_t i = 0; i < w.size(); ++i) {
        a_[i] = a_[i] + g[i] * g[i];
        w[i] = w[i] - lr * g[i] / (std::sqrt(a_[i]) + o_.epsilon());
      }
    } else if (o_.type() == "rowwise_adagrad") {  // a_[0] is the row's accumulator
      double squares = 0;
      for (size_t i = 0; i < w.size(); ++i) squares += double{g[i]} * double{g[i]};
      a_[0] = a_[0] + static_cast<float>(squares / static_cast<double>(w.size()));
      for (size_t i = 0; i < w.size(); ++i) {
        w[i] = w[i] - lr * g[i] / (std::sqrt(a_[0]) + o_.epsilon());
      }
    } else if (o_.type() == "adam") {
      ++step_;
      const float lr_t =
          static_cast<float>(double{lr} * std::sqrt(1.0 - std::pow(double{o_.beta2()}, step_)) /
                             (1.0 - std::pow(double{o_.beta1()}, step_)));
      for (size_t i = 0; i < w.size(); ++i) {
        a_[i] = o_.beta1() * a_[i] + (1.0f - o_.beta1()) * g[i];         // m
        b_[i] = o_.beta2() * b_[i] + (1.0f - o_.beta2()) * g[i] * g[i];  // v
        w[i] = w[i] - lr_t * a_[i] / (std::sqrt(b_[i]) + o_.epsilon());
      }
    } else {  // ftrl: a_ is z, b_ is n
      const float p = -o_.lr_power();
      auto pow_p = [p](float x) { return p == 0.5f ? std::sqrt(x) : std::pow(x, p); };
      for (size_t i = 0; i < w.size(); ++i) {
        const float n_new = b_[i] + g[i] * g[i];
        const float sigma = (pow_p(n_new) - pow_p(b_[i])) / lr;
        a_[i] = a_[i] + g[i] - sigma * w[i];
        b_[i] = n_new;
        if (std::fabs(a_[i]) <= o_.l1()) {
          w[i] = 0.0f;
        } else {
          const float sign = a_[i] > 0 ? 1.0f : -1.0f;
          w[i] = -(a_[i] - sign * o_.l1()) / ((o_.ftrl_beta() + pow_p(b_[i])) / lr + o_.l2());
        }
      }
    }
  }

 private:
  const config::Optimizer o_;
  std::vector<float> a_;
  std::vector<float> b_;
  uint32_t step_ = 0;
};

float Uniform(std::mt19937_64& rng, float low, float high) {
  return low + (high - low) * static_cast<float>(rng() >> 40) * 0x1.0p-24f;
}

TEST_CASE("every optimizer matches a plain reference over many steps", "[storage][optimizer]") {
  const config::Optimizer options = AnyOptimizer();
  const uint32_t dim = GENERATE(1u, 7u, 16u, 33u, 1000u);
  CAPTURE(options.ShortDebugString(), dim);
  auto opt = Optimizer::Create(options);
  REQUIRE(opt.ok());

  std::mt19937_64 rng(dim * 7919 + options.type().size());
  std::vector<float> w(dim), state((*opt)->StateFloats(dim)), g(dim);
  for (float& x : w) x = Uniform(rng, -0.1f, 0.1f);
  (*opt)->InitState(dim, state.data());
  std::vector<float> expected = w;
  Reference reference(options, dim);

  for (int step = 0; step < 20; ++step) {
    for (float& x : g) x = Uniform(rng, -1.0f, 1.0f);
    if (step == 3) g.assign(dim, 0.0f);  // an all-zero gradient is a valid update too
    (*opt)->Apply(dim, g.data(), w.data(), state.data());
    reference.Apply(g, expected);
    for (uint32_t i = 0; i < dim; ++i) {
      INFO("step " << step << " coordinate " << i);
      REQUIRE(std::isfinite(w[i]));
      REQUIRE(w[i] == Approx(expected[i]).epsilon(1e-6).margin(1e-12));
    }
  }
}

TEST_CASE("weight decay shrinks a row that a zero gradient touches", "[storage][optimizer]") {
  // With g = 0 the decayed gradient is l2 * w: sgd multiplies w by exactly (1 - lr * l2) in
  // float; adagrad and adam move w towards 0 without crossing it.
  const std::string type = GENERATE("sgd", "adagrad", "rowwise_adagrad", "adam");
  config::Optimizer o = Options(type);
  o.set_l2(0.5f);
  auto opt = Optimizer::Create(o);
  REQUIRE(opt.ok());
  const uint32_t dim = 4;
  std::vector<float> w = {1.0f, -2.0f, 0.25f, 0.0f}, g(dim, 0.0f);
  std::vector<float> state((*opt)->StateFloats(dim));
  (*opt)->InitState(dim, state.data());
  const std::vector<float> before = w;
  (*opt)->Apply(dim, g.data(), w.data(), state.data());
  for (uint32_t i = 0; i < dim; ++i) {
    CAPTURE(type, i);
    if (type == "sgd") CHECK(w[i] == before[i] - 0.05f * (0.5f * before[i]));
    CHECK(std::fabs(w[i]) <= std::fabs(before[i]));
    CHECK(w[i] * before[i] >= 0);  // not across 0
    if (before[i] != 0) CHECK(w[i] != before[i]);
  }
  CHECK(w[3] == 0.0f);  // a zero weight stays zero
}

TEST_CASE("state sizes and initial state", "[storage][optimizer]") {
  const uint32_t dim = 5;
  struct Case {
    std::string type;
    uint32_t state_floats;
  };
  const Case c = GENERATE(Case{"sgd", 0}, Case{"adagrad", 5}, Case{"rowwise_adagrad", 1},
                          Case{"adam", 11}, Case{"ftrl", 10});
  config::Optimizer o = Options(c.type);
  o.set_initial_accumulator(0.25f);
  auto opt = Optimizer::Create(o);
  REQUIRE(opt.ok());
  REQUIRE((*opt)->StateFloats(dim) == c.state_floats);
  std::vector<float> state(c.state_floats, 42.0f);
  (*opt)->InitState(dim, state.data());
  const bool accumulates = c.type == "adagrad" || c.type == "rowwise_adagrad";
  for (float x : state) CHECK(x == (accumulates ? 0.25f : 0.0f));
}

TEST_CASE("adam keeps its step counter as the bits of a uint32 after the moments",
          "[storage][optimizer]") {
  auto opt = Optimizer::Create(Options("adam"));
  REQUIRE(opt.ok());
  const uint32_t dim = 3;
  std::vector<float> w(dim, 0.0f), state((*opt)->StateFloats(dim)), g(dim, 0.5f);
  (*opt)->InitState(dim, state.data());
  for (uint32_t expected = 1; expected <= 3; ++expected) {
    (*opt)->Apply(dim, g.data(), w.data(), state.data());
    uint32_t step;
    std::memcpy(&step, &state[2 * dim], sizeof(step));
    CHECK(step == expected);
  }
  // The first bias-corrected step of adam moves every weight by about lr against the gradient.
  std::vector<float> w1(dim, 0.0f);
  (*opt)->InitState(dim, state.data());
  (*opt)->Apply(dim, g.data(), w1.data(), state.data());
  for (float x : w1) CHECK(x == Approx(-0.05f).epsilon(1e-5));
}

TEST_CASE("ftrl with a large l1 keeps weights at exactly zero", "[storage][optimizer]") {
  config::Optimizer o = Options("ftrl");
  o.set_l1(100.0f);
  auto opt = Optimizer::Create(o);
  REQUIRE(opt.ok());
  const uint32_t dim = 8;
  std::vector<float> w(dim, 0.0f), state((*opt)->StateFloats(dim)), g(dim, 0.3f);
  (*opt)->InitState(dim, state.data());
  for (int step = 0; step < 10; ++step) (*opt)->Apply(dim, g.data(), w.data(), state.data());
  for (float x : w) CHECK(x == 0.0f);
}

TEST_CASE("Create refuses unknown types and bad hyperparameters", "[storage][optimizer]") {
  struct Case {
    const char* what;
    void (*mutate)(config::Optimizer*);
  };
  const Case c = GENERATE(values<Case>({
      {"unknown type", [](config::Optimizer* o) { o->set_type("rmsprop"); }},
      {"empty type", [](config::Optimizer* o) { o->set_type(""); }},
      {"zero lr", [](config::Optimizer* o) { o->set_learning_rate(0.0f); }},
      {"negative lr", [](config::Optimizer* o) { o->set_learning_rate(-1.0f); }},
      {"infinite lr", [](config::Optimizer* o) { o->set_learning_rate(INFINITY); }},
      {"adagrad accumulator",
       [](config::Optimizer* o) {
         o->set_type("adagrad");
         o->set_initial_accumulator(0.0f);
       }},
      {"adagrad epsilon",
       [](config::Optimizer* o) {
         o->set_type("adagrad");
         o->set_epsilon(0.0f);
       }},
      {"adam beta1",
       [](config::Optimizer* o) {
         o->set_type("adam");
         o->set_beta1(1.0f);
       }},
      {"adam beta2",
       [](config::Optimizer* o) {
         o->set_type("adam");
         o->set_beta2(-0.1f);
       }},
      {"adam epsilon",
       [](config::Optimizer* o) {
         o->set_type("adam");
         o->set_epsilon(NAN);
       }},
      {"negative l2", [](config::Optimizer* o) { o->set_l2(-0.1f); }},
      {"infinite l2",
       [](config::Optimizer* o) {
         o->set_type("adam");
         o->set_l2(INFINITY);
       }},
      {"l1 of sgd", [](config::Optimizer* o) { o->set_l1(0.1f); }},
      {"l1 of adagrad",
       [](config::Optimizer* o) {
         o->set_type("adagrad");
         o->set_l1(0.1f);
       }},
      {"rowwise_adagrad accumulator",
       [](config::Optimizer* o) {
         o->set_type("rowwise_adagrad");
         o->set_initial_accumulator(-1.0f);
       }},
      {"rowwise_adagrad epsilon",
       [](config::Optimizer* o) {
         o->set_type("rowwise_adagrad");
         o->set_epsilon(0.0f);
       }},
      {"rowwise_adagrad negative l2",
       [](config::Optimizer* o) {
         o->set_type("rowwise_adagrad");
         o->set_l2(-0.5f);
       }},
      {"l1 of rowwise_adagrad",
       [](config::Optimizer* o) {
         o->set_type("rowwise_adagrad");
         o->set_l1(0.1f);
       }},
      {"ftrl l1",
       [](config::Optimizer* o) {
         o->set_type("ftrl");
         o->set_l1(-1.0f);
       }},
      {"ftrl beta",
       [](config::Optimizer* o) {
         o->set_type("ftrl");
         o->set_ftrl_beta(-1.0f);
       }},
      {"ftrl lr_power",
       [](config::Optimizer* o) {
         o->set_type("ftrl");
         o->set_lr_power(0.5f);
       }},
  }));
  config::Optimizer o;
  c.mutate(&o);
  CAPTURE(c.what, o.ShortDebugString());
  const auto opt = Optimizer::Create(o);
  REQUIRE_FALSE(opt.ok());
  CHECK(opt.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Create accepts the defaults of every type", "[storage][optimizer]") {
  const std::string type = GENERATE("sgd", "adagrad", "rowwise_adagrad", "adam", "ftrl");
  CHECK(Optimizer::Create(Options(type)).ok());
}

// Row-wise adagrad (the compact rows of issue 35).

config::Optimizer RowwiseOptions(float lr, float initial_accumulator, float epsilon, float l2) {
  config::Optimizer o;
  o.set_type("rowwise_adagrad");
  o.set_learning_rate(lr);
  o.set_initial_accumulator(initial_accumulator);
  o.set_epsilon(epsilon);
  o.set_l2(l2);
  return o;
}

TEST_CASE("rowwise_adagrad: a step computed by hand", "[storage][optimizer][rowwise]") {
  // lr 2, acc 4, epsilon 1, g = (1, 3): acc = 4 + (1 + 9) / 2 = 9, denominator sqrt(9) + 1 = 4,
  // w -= 2 * g / 4 = g / 2. Every number here is exact in float.
  auto opt = Optimizer::Create(RowwiseOptions(2.0f, 4.0f, 1.0f, 0.0f));
  REQUIRE(opt.ok());
  REQUIRE((*opt)->StateFloats(2) == 1);
  std::vector<float> w = {1.0f, 1.0f}, acc(1);
  (*opt)->InitState(2, acc.data());
  REQUIRE(acc[0] == 4.0f);
  const std::vector<float> g = {1.0f, 3.0f};
  (*opt)->Apply(2, g.data(), w.data(), acc.data());
  CHECK(acc[0] == 9.0f);
  CHECK(w[0] == 0.5f);
  CHECK(w[1] == -0.5f);

  // A second step, g = (4, -4): acc = 9 + 16 = 25, denominator 6, w -= 2 * g / 6 (in float).
  const std::vector<float> g2 = {4.0f, -4.0f};
  (*opt)->Apply(2, g2.data(), w.data(), acc.data());
  CHECK(acc[0] == 25.0f);
  CHECK(w[0] == 0.5f - 2.0f * 4.0f / 6.0f);
  CHECK(w[1] == -0.5f - 2.0f * -4.0f / 6.0f);
}

TEST_CASE("rowwise_adagrad: weight decay enters the accumulator and the step",
          "[storage][optimizer][rowwise][l2]") {
  // l2 1, w = (1, 1), g = (0, 2): the decayed gradient is (1, 3), and then the step is the one
  // above: acc 9, w -= (1, 3) / 2.
  auto opt = Optimizer::Create(RowwiseOptions(2.0f, 4.0f, 1.0f, 1.0f));
  REQUIRE(opt.ok());
  std::vector<float> w = {1.0f, 1.0f}, acc(1);
  (*opt)->InitState(2, acc.data());
  const std::vector<float> g = {0.0f, 2.0f};
  (*opt)->Apply(2, g.data(), w.data(), acc.data());
  CHECK(acc[0] == 9.0f);
  CHECK(w[0] == 0.5f);
  CHECK(w[1] == -0.5f);

  // Without l2 the same push moves only the coordinate with a gradient: acc = 4 + 4 / 2 = 6.
  auto plain = Optimizer::Create(RowwiseOptions(2.0f, 4.0f, 1.0f, 0.0f));
  REQUIRE(plain.ok());
  std::vector<float> w2 = {1.0f, 1.0f}, acc2(1);
  (*plain)->InitState(2, acc2.data());
  (*plain)->Apply(2, g.data(), w2.data(), acc2.data());
  CHECK(acc2[0] == 6.0f);
  CHECK(w2[0] == 1.0f);
  CHECK(w2[1] == 1.0f - 2.0f * 2.0f / (std::sqrt(6.0f) + 1.0f));
}

TEST_CASE("rowwise_adagrad keeps one float of state whatever the dim",
          "[storage][optimizer][rowwise]") {
  const uint32_t dim = GENERATE(1u, 2u, 7u, 16u, 128u, 4096u);
  auto opt = Optimizer::Create(RowwiseOptions(0.05f, 0.3f, 1e-8f, 0.0f));
  REQUIRE(opt.ok());
  CHECK((*opt)->StateFloats(dim) == 1);
  float acc = 0;
  (*opt)->InitState(dim, &acc);
  CHECK(acc == 0.3f);
}

TEST_CASE("rowwise_adagrad moves a row as adagrad does when all its gradients are equal",
          "[storage][optimizer][rowwise]") {
  // Then the mean of the squares is each square, so the one accumulator equals each of adagrad's
  // and the weights agree bit for bit. The gradient of a step is k / 256, whose square has a short
  // significand, so the sum of dim of them is exact in double for any dim; with weight decay the
  // gradient involves w (all of whose coordinates start, and so stay, equal), and rows of up to
  // 32 floats keep the sum exact.
  const float l2 = GENERATE(0.0f, 0.25f);
  const uint32_t dim = GENERATE(1u, 2u, 7u, 16u, 32u, 33u, 1000u, 4096u);
  if (l2 > 0 && dim > 32) return;
  CAPTURE(l2, dim);
  auto rowwise = Optimizer::Create(RowwiseOptions(0.05f, 0.1f, 1e-8f, l2));
  config::Optimizer full_options = RowwiseOptions(0.05f, 0.1f, 1e-8f, l2);
  full_options.set_type("adagrad");
  auto full = Optimizer::Create(full_options);
  REQUIRE(rowwise.ok());
  REQUIRE(full.ok());

  std::mt19937_64 rng(dim * 31 + (l2 > 0 ? 1 : 0));
  std::vector<float> w_rowwise(dim), w_full, acc_rowwise(1), acc_full(dim), g(dim);
  if (l2 > 0) {
    w_rowwise.assign(dim, Uniform(rng, -0.5f, 0.5f));
  } else {
    for (float& x : w_rowwise) x = Uniform(rng, -0.5f, 0.5f);
  }
  w_full = w_rowwise;
  (*rowwise)->InitState(dim, acc_rowwise.data());
  (*full)->InitState(dim, acc_full.data());
  for (int step = 0; step < 30; ++step) {
    const int k = static_cast<int>(rng() % 511) - 255;  // -255 .. 255, 0 included
    g.assign(dim, static_cast<float>(k) / 256.0f);
    (*rowwise)->Apply(dim, g.data(), w_rowwise.data(), acc_rowwise.data());
    (*full)->Apply(dim, g.data(), w_full.data(), acc_full.data());
    INFO("step " << step);
    for (uint32_t i = 0; i < dim; ++i) REQUIRE(acc_full[i] == acc_rowwise[0]);
    REQUIRE(std::memcmp(w_rowwise.data(), w_full.data(), dim * sizeof(float)) == 0);
  }
}

TEST_CASE("rowwise_adagrad scales a row's step by the mean of its squares",
          "[storage][optimizer][rowwise]") {
  // Unequal gradients: the coordinates share one step size, so the update is parallel to g
  // (unlike adagrad's, which normalises each coordinate), and the accumulator grows by the mean.
  const uint32_t dim = GENERATE(3u, 16u, 100u);
  auto opt = Optimizer::Create(RowwiseOptions(0.1f, 0.1f, 1e-8f, 0.0f));
  REQUIRE(opt.ok());
  std::mt19937_64 rng(dim);
  std::vector<float> w(dim, 0.0f), g(dim);
  float acc;
  (*opt)->InitState(dim, &acc);
  double mean = 0;
  for (float& x : g) {
    x = Uniform(rng, -2.0f, 2.0f);
    mean += double{x} * x / dim;
  }
  (*opt)->Apply(dim, g.data(), w.data(), &acc);
  CHECK(acc == Approx(0.1 + mean).epsilon(1e-6));
  const double step = 0.1 / std::sqrt(0.1 + mean);
  for (uint32_t i = 0; i < dim; ++i) CHECK(w[i] == Approx(-step * g[i]).epsilon(1e-5));
}

}  // namespace
}  // namespace ps

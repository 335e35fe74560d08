#include "worker/model/cpu_model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "worker/model/internal/random_inputs.h"

namespace ps {
namespace worker {
namespace {

using testing::Inputs;
using testing::RandomInputs;

// Small specs of every family and variant, named for the test's output.
struct Case {
  std::string name;
  ModelSpec spec;
};

ModelSpec Base(config::Model::Type type) {
  ModelSpec s;
  s.type = type;
  s.num_dense = 3;
  s.field_dims = {4, 4, 4};
  s.bottom.clear();
  s.top = {6};
  return s;
}

Case MakeCase(int which) {
  switch (which) {
    case 0: {
      ModelSpec s = Base(config::Model::DLRM);
      s.bottom = {5, 4};
      return {"DLRM", s};
    }
    case 1: {
      ModelSpec s = Base(config::Model::DLRM);
      s.bottom = {5, 4};
      s.dot_interaction = true;
      return {"DLRM dot_interaction", s};
    }
    case 2: {
      ModelSpec s = Base(config::Model::DLRM);
      s.field_dims = {2, 5, 3};
      s.bottom = {5, 3};
      s.top = {6, 4};
      return {"DLRM unequal dims", s};
    }
    case 3: {
      ModelSpec s = Base(config::Model::WIDE_DEEP);
      s.field_dims = {2, 5};
      s.num_linear = 3;
      return {"WIDE_DEEP", s};
    }
    case 4: {
      ModelSpec s = Base(config::Model::DEEPFM);
      s.num_linear = 3;
      return {"DEEPFM", s};
    }
    case 7: {  // dim 16: the interaction's compile-time kernel (case 1 runs the generic one)
      ModelSpec s = Base(config::Model::DLRM);
      s.field_dims = {16, 16};
      s.bottom = {16};
      s.dot_interaction = true;
      return {"DLRM dot_interaction dim 16", s};
    }
    case 5: {
      ModelSpec s = Base(config::Model::DCN_V2);
      s.field_dims = {2, 3};
      s.cross_layers = 2;
      s.cross_rank = 0;
      return {"DCN_V2 full rank", s};
    }
    case 6: {
      ModelSpec s = Base(config::Model::DCN_V2);
      s.field_dims = {2, 3};
      s.cross_layers = 3;
      s.cross_rank = 2;
      return {"DCN_V2 rank 2", s};
    }
  }
  FAIL("no case " << which);
  return {};
}
constexpr int kCases = 8;

// The mean loss of a batch, from Predict, accumulated in double.
double Loss(CpuModel& model, const Inputs& in) {
  std::vector<float> probs(in.batch);
  model.Predict(in.batch, in.dense.data(), in.emb.data(), probs.data());
  double loss = 0;
  for (int r = 0; r < in.batch; ++r) {
    const double p = std::min(std::max(double{probs[r]}, 1e-12), 1 - 1e-12);
    loss -= in.labels[r] * std::log(p) + (1 - in.labels[r]) * std::log(1 - p);
  }
  return loss / in.batch;
}

// Up to `n` offsets spread over [begin, end).
std::vector<size_t> Sample(size_t begin, size_t end, size_t n) {
  std::vector<size_t> out;
  const size_t step = std::max<size_t>(1, (end - begin) / n);
  for (size_t i = begin; i < end; i += step) out.push_back(i);
  return out;
}

// Central differences of the loss against the analytic gradient: |a - n| <= 2e-3 + 3e-2 |n|.
// h = 2e-3 keeps a ReLU's kink out of most intervals while the float forward pass's rounding
// (~1e-7 of the loss) stays far below the tolerance in the quotient; the second-order terms of
// the cross layers and the interactions make the quotient itself off by O(h^2).
bool Near(double analytic, double numeric) {
  return std::fabs(analytic - numeric) <= 2e-3 + 3e-2 * std::fabs(numeric);
}

TEST_CASE("every family's gradients match finite differences", "[worker][model]") {
  const Case c = MakeCase(GENERATE(range(0, kCases)));
  INFO(c.name);
  auto created = CpuModel::Create(c.spec, 3);
  REQUIRE(created.ok());
  CpuModel& m = **created;
  const Inputs in = RandomInputs(c.spec, 11, 7);
  REQUIRE(in.emb.size() == size_t(11) * c.spec.emb_width());
  std::vector<float> dense_grad(m.num_params()), emb_grad(in.emb.size(), -99.0f), probs(11);
  const float loss = m.ForwardBackward(in.batch, in.dense.data(), in.emb.data(), in.labels.data(),
                                       1.0f, dense_grad.data(), emb_grad.data(), probs.data());
  CHECK(loss == Approx(Loss(m, in)).epsilon(1e-4));

  // A sample of every weight matrix and bias of every layer.
  std::vector<size_t> params;
  auto add_dense = [&](const DenseLayer& l) {
    const size_t w = l.weight, b = w + size_t(l.in) * l.out;
    for (size_t i : Sample(w, b, 12)) params.push_back(i);
    for (size_t i : Sample(b, b + l.out, 4)) params.push_back(i);
  };
  const ModelLayout& layout = m.layout();
  for (const DenseLayer& l : layout.bottom) add_dense(l);
  for (const DenseLayer& l : layout.top) add_dense(l);
  for (const CrossLayer& x : layout.cross) {
    const size_t w = x.weight;
    const size_t b = w + (x.rank == 0 ? size_t(x.width) * x.width : 2 * size_t(x.width) * x.rank);
    if (x.rank > 0) {  // V, then U
      const size_t u = w + size_t(x.rank) * x.width;
      for (size_t i : Sample(w, u, 10)) params.push_back(i);
      for (size_t i : Sample(u, b, 10)) params.push_back(i);
    } else {
      for (size_t i : Sample(w, b, 16)) params.push_back(i);
    }
    for (size_t i : Sample(b, b + x.width, 4)) params.push_back(i);
  }
  REQUIRE(layout.num_params == m.num_params());
  const float h = 2e-3f;
  const double at = Loss(m, in);
  int kinks = 0;
  for (size_t i : params) {
    const float saved = m.params()[i];
    m.params()[i] = saved + h;
    const double up = Loss(m, in);
    m.params()[i] = saved - h;
    const double down = Loss(m, in);
    m.params()[i] = saved;
    const double numeric = (up - down) / (2 * h);
    // A ReLU's kink inside [-h, h] makes the one-sided slopes disagree: no derivative to check.
    if (std::fabs((up - at) / h - (at - down) / h) > 2e-3) {
      ++kinks;
      continue;
    }
    INFO("param " << i << ": analytic " << dense_grad[i] << " numeric " << numeric);
    CHECK(Near(dense_grad[i], numeric));
  }
  CHECK(kinks * 20 <= static_cast<int>(params.size()));
  // Every input of emb: the fields (through the MLPs, the interaction, the FM) and the linear
  // inputs.
  Inputs moved = in;
  for (size_t i = 0; i < in.emb.size(); ++i) {
    moved.emb[i] = in.emb[i] + h;
    const double up = Loss(m, moved);
    moved.emb[i] = in.emb[i] - h;
    const double down = Loss(m, moved);
    moved.emb[i] = in.emb[i];
    const double numeric = (up - down) / (2 * h);
    INFO("emb " << i << ": analytic " << emb_grad[i] << " numeric " << numeric);
    CHECK(Near(emb_grad[i], numeric));
  }
}

TEST_CASE("two half batches sum to the gradient of the whole", "[worker][model]") {
  const Case c = MakeCase(GENERATE(range(0, kCases)));
  INFO(c.name);
  auto a = CpuModel::Create(c.spec, 5);
  REQUIRE(a.ok());
  const Inputs in = RandomInputs(c.spec, 16, 1);
  std::vector<float> whole((*a)->num_params()), half1(whole.size()), half2(whole.size());
  std::vector<float> eg(in.emb.size()), eg1(in.emb.size()), probs(16), probs1(16);
  (*a)->ForwardBackward(16, in.dense.data(), in.emb.data(), in.labels.data(), 1.0f, whole.data(),
                        eg.data(), probs.data());
  const size_t d = 8 * size_t(c.spec.num_dense), e = 8 * size_t(c.spec.emb_width());
  (*a)->ForwardBackward(8, in.dense.data(), in.emb.data(), in.labels.data(), 0.5f, half1.data(),
                        eg1.data(), probs1.data());
  (*a)->ForwardBackward(8, in.dense.data() + d, in.emb.data() + e, in.labels.data() + 8, 0.5f,
                        half2.data(), eg1.data() + e, probs1.data() + 8);
  for (size_t i = 0; i < whole.size(); ++i) {
    CHECK(half1[i] + half2[i] == Approx(whole[i]).margin(1e-6));
  }
  for (size_t i = 0; i < eg.size(); ++i) CHECK(eg1[i] == Approx(eg[i]).margin(1e-6));
  std::vector<float> predicted(16);
  (*a)->Predict(16, in.dense.data(), in.emb.data(), predicted.data());
  for (int r = 0; r < 16; ++r) {
    CHECK(probs1[r] == Approx(probs[r]).margin(1e-6));
    CHECK(predicted[r] == Approx(probs[r]).margin(1e-6));
  }
}

TEST_CASE("initialisation is deterministic, Glorot-bounded, with zero biases", "[worker][model]") {
  const Case c = MakeCase(GENERATE(range(0, kCases)));
  INFO(c.name);
  auto a = CpuModel::Create(c.spec, 9);
  auto b = CpuModel::Create(c.spec, 9);
  auto other = CpuModel::Create(c.spec, 10);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(other.ok());
  const std::vector<float> pa((*a)->params().begin(), (*a)->params().end());
  CHECK(pa == std::vector<float>((*b)->params().begin(), (*b)->params().end()));
  CHECK(pa != std::vector<float>((*other)->params().begin(), (*other)->params().end()));
  for (const DenseLayer& l : (*a)->layout().top) {
    const float limit = std::sqrt(6.0f / (l.in + l.out));
    const size_t bias = l.weight + size_t(l.in) * l.out;
    bool nonzero = false;
    for (size_t i = l.weight; i < bias; ++i) {
      CHECK(std::fabs(pa[i]) <= limit);
      nonzero = nonzero || pa[i] != 0.0f;
    }
    CHECK(nonzero);
    for (int i = 0; i < l.out; ++i) CHECK(pa[bias + i] == 0.0f);
  }
}

// A learnable problem: labels from a fixed random linear rule over the inputs.
TEST_CASE("every family learns a tiny problem with SGD", "[worker][model]") {
  const Case c = MakeCase(GENERATE(range(0, kCases)));
  INFO(c.name);
  auto created = CpuModel::Create(c.spec, 21);
  REQUIRE(created.ok());
  CpuModel& m = **created;
  const int batch = 64;
  Inputs in = RandomInputs(c.spec, batch, 33);
  const Inputs teacher = RandomInputs(c.spec, 1, 44);
  for (int r = 0; r < batch; ++r) {
    double s = -0.5;
    for (int i = 0; i < c.spec.num_dense; ++i) {
      s += teacher.dense[i] * in.dense[size_t(r) * c.spec.num_dense + i];
    }
    for (int i = 0; i < c.spec.emb_width(); ++i) {
      s += 3 * teacher.emb[i] * in.emb[size_t(r) * c.spec.emb_width() + i];
    }
    in.labels[r] = s > 0 ? 1.0f : 0.0f;
  }
  std::vector<float> dg(m.num_params()), eg(in.emb.size()), probs(batch);
  double before = 0, after = 0;
  for (int step = 0; step < 300; ++step) {
    after = m.ForwardBackward(batch, in.dense.data(), in.emb.data(), in.labels.data(), 1.0f,
                              dg.data(), eg.data(), probs.data());
    if (step == 0) before = after;
    for (size_t i = 0; i < dg.size(); ++i) m.params()[i] -= 0.1f * dg[i];
  }
  INFO("loss " << before << " -> " << after);
  CHECK(after < 0.6 * before);
}

TEST_CASE("Create refuses specs the family cannot take", "[worker][model]") {
  auto refused = [](const ModelSpec& s) {
    return CpuModel::Create(s, 1).status().code() == absl::StatusCode::kInvalidArgument;
  };
  ModelSpec s;
  CHECK(CpuModel::Create(s, 1).ok());  // the quickstart DLRM
  s.num_dense = 0;
  CHECK(refused(s));  // DLRM without dense features
  s = ModelSpec();
  s.dot_interaction = true;
  s.field_dims[1] = 8;
  CHECK(refused(s));  // dot_interaction over different dims
  s.field_dims[1] = 16;
  s.bottom = {64, 8};
  CHECK(refused(s));  // ... or a bottom output of another dim
  s = MakeCase(4).spec;
  s.field_dims = {4, 5, 4};
  CHECK(refused(s));  // DEEPFM over different dims
  s = MakeCase(5).spec;
  s.cross_layers = 0;
  CHECK(refused(s));
  s.cross_layers = 1;
  s.cross_rank = -1;
  CHECK(refused(s));
  s = MakeCase(0).spec;
  s.num_linear = 2;
  CHECK(refused(s));  // linear inputs outside WIDE_DEEP and DEEPFM
  s = MakeCase(3).spec;
  s.field_dims[0] = 0;
  CHECK(refused(s));
  s = MakeCase(3).spec;
  s.top = {4, 0};
  CHECK(refused(s));
}

}  // namespace
}  // namespace worker
}  // namespace ps

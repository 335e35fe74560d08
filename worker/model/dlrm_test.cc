#include "worker/model/dlrm.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "worker/model/internal/random_inputs.h"

namespace ps {
namespace worker {
namespace {

using testing::Inputs;
using testing::RandomInputs;

float Loss(Dlrm& model, const Inputs& in) {
  std::vector<float> probs(in.batch);
  model.Predict(in.batch, in.dense.data(), in.emb.data(), probs.data());
  double loss = 0;
  for (int r = 0; r < in.batch; ++r) {
    const double p = probs[r];
    loss -= in.labels[r] * std::log(p) + (1 - in.labels[r]) * std::log(1 - p);
  }
  return static_cast<float>(loss / in.batch);
}

TEST_CASE("gradients match finite differences", "[worker][model]") {
  DlrmShape shape;
  shape.num_dense = 3;
  shape.num_sparse = 2;
  shape.emb_dim = 4;
  shape.bottom = {5, 4};
  shape.top = {6};
  auto model = Dlrm::Create(shape, 3);
  REQUIRE(model.ok());
  Dlrm& m = **model;
  const Inputs in = RandomInputs(shape, 7, 11);
  std::vector<float> dense_grad(m.num_params()), emb_grad(in.emb.size()), probs(in.batch);
  const float loss = m.ForwardBackward(in.batch, in.dense.data(), in.emb.data(), in.labels.data(),
                                       1.0f, dense_grad.data(), emb_grad.data(), probs.data());
  CHECK(loss == Approx(Loss(m, in)).epsilon(1e-4));

  const float h = 1e-2f;
  int checked = 0;
  for (size_t i = 0; i < m.num_params(); i += 3) {
    const float saved = m.params()[i];
    m.params()[i] = saved + h;
    const float up = Loss(m, in);
    m.params()[i] = saved - h;
    const float down = Loss(m, in);
    m.params()[i] = saved;
    const float numeric = (up - down) / (2 * h);
    INFO("param " << i);
    CHECK(dense_grad[i] == Approx(numeric).margin(2e-3));
    ++checked;
  }
  Inputs moved = in;
  for (size_t i = 0; i < in.emb.size(); i += 5) {
    moved.emb[i] = in.emb[i] + h;
    const float up = Loss(m, moved);
    moved.emb[i] = in.emb[i] - h;
    const float down = Loss(m, moved);
    moved.emb[i] = in.emb[i];
    INFO("emb " << i);
    CHECK(emb_grad[i] == Approx((up - down) / (2 * h)).margin(2e-3));
    ++checked;
  }
  CHECK(checked > 20);
}

TEST_CASE("two half batches sum to the gradient of the whole", "[worker][model]") {
  DlrmShape shape;
  shape.num_dense = 4;
  shape.num_sparse = 3;
  shape.emb_dim = 8;
  shape.bottom = {8};
  shape.top = {16, 8};
  auto a = Dlrm::Create(shape, 5);
  REQUIRE(a.ok());
  const Inputs in = RandomInputs(shape, 16, 1);
  std::vector<float> whole(( *a)->num_params()), half1(whole.size()), half2(whole.size());
  std::vector<float> eg(in.emb.size()), probs(16);
  (*a)->ForwardBackward(16, in.dense.data(), in.emb.data(), in.labels.data(), 1.0f, whole.data(),
                        eg.data(), probs.data());
  const size_t d = 8 * 4, e = 8 * 3 * 8;
  (*a)->ForwardBackward(8, in.dense.data(), in.emb.data(), in.labels.data(), 0.5f, half1.data(),
                        eg.data(), probs.data());
  (*a)->ForwardBackward(8, in.dense.data() + d, in.emb.data() + e, in.labels.data() + 8, 0.5f,
                        half2.data(), eg.data(), probs.data());
  for (size_t i = 0; i < whole.size(); ++i) {
    CHECK(half1[i] + half2[i] == Approx(whole[i]).margin(1e-6));
  }
}

TEST_CASE("creation is deterministic and shapes are checked", "[worker][model]") {
  DlrmShape shape;
  auto a = Dlrm::Create(shape, 9);
  auto b = Dlrm::Create(shape, 9);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(std::vector<float>((*a)->params().begin(), (*a)->params().end()) ==
        std::vector<float>((*b)->params().begin(), (*b)->params().end()));
  config::Job job;
  auto* t = job.add_tables();
  t->set_name("emb");
  t->set_dim(8);
  job.mutable_model()->set_shared_table("emb");
  job.mutable_model()->add_bottom_mlp(32);
  job.mutable_model()->add_bottom_mlp(16);
  CHECK(DlrmShape::FromJob(job).status().code() == absl::StatusCode::kInvalidArgument);
  job.mutable_model()->set_bottom_mlp(1, 8);
  const absl::StatusOr<DlrmShape> ok = DlrmShape::FromJob(job);
  REQUIRE(ok.ok());
  CHECK(ok->emb_dim == 8);
}

}  // namespace
}  // namespace worker
}  // namespace ps

// GpuModel against the CPU model (CpuModel, DLRM) on the same inputs, on a GPU
// (cuda_kernels:gpu_test_main fails the test on a machine without one; model_test checks that
// Create refuses there).
//
// Tolerance: |gpu - cpu| <= 1e-4 |cpu| + 1e-5 max|cpu| (the max over that output). The two sum in
// different orders (cuBLAS's blocked GEMMs against OpenBLAS's, the kernels' column sums against
// sequential ones) and expf/log1pf differ from glibc's by an ulp or two, so every output is off by
// a few float roundings of the terms it sums, not of the result: when terms cancel, the error is
// relative to the output's scale, hence the absolute part. TF32 would be ~1e-3 off; cuBLAS runs in
// CUBLAS_PEDANTIC_MATH, so float products and sums are exact IEEE operations.
#include "worker/model/gpu_model.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "worker/model/cpu_model.h"
#include "worker/model/internal/random_inputs.h"

namespace ps {
namespace worker {
namespace {

ModelSpec TestShape(int which) {
  ModelSpec shape;  // 0: the quickstart shape
  if (which == 1) {
    shape.num_dense = 3;
    shape.field_dims = {4, 4};
    shape.bottom = {5, 4};
    shape.top = {6};
  } else if (which == 2) {  // no hidden top layer, one field
    shape.num_dense = 4;
    shape.field_dims = {8};
    shape.bottom = {8};
    shape.top = {};
  }
  return shape;
}

using testing::Inputs;
using testing::RandomInputs;

void CheckNear(const std::string& what, const std::vector<float>& gpu,
               const std::vector<float>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  double scale = 0;
  for (float v : cpu) scale = std::max(scale, double(std::fabs(v)));
  int bad = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double tol = 1e-4 * std::fabs(cpu[i]) + 1e-5 * scale;
    if (!(std::fabs(double(gpu[i]) - cpu[i]) <= tol)) {
      if (++bad <= 5) {
        UNSCOPED_INFO(what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i] << " tol "
                           << tol);
      }
    }
  }
  INFO(what << ": " << bad << " of " << cpu.size() << " outside tolerance, scale " << scale);
  CHECK(bad == 0);
}

TEST_CASE("GpuModel starts from CpuModel's parameters and computes what it computes",
          "[worker][model][gpu]") {
  const int which = GENERATE(0, 1, 2);
  const int batch = GENERATE(1, 7, 300);
  const ModelSpec shape = TestShape(which);
  INFO("shape " << which << ", batch " << batch);
  auto cpu_or = CpuModel::Create(shape, 17);
  auto gpu_or = GpuModel::Create(shape, 17);
  REQUIRE(cpu_or.ok());
  INFO(gpu_or.status().ToString());
  REQUIRE(gpu_or.ok());
  CpuModel& cpu = **cpu_or;
  GpuModel& gpu = **gpu_or;
  REQUIRE(gpu.num_params() == cpu.num_params());
  CHECK(std::vector<float>(gpu.params().begin(), gpu.params().end()) ==
        std::vector<float>(cpu.params().begin(), cpu.params().end()));

  const Inputs in = RandomInputs(shape, batch, 100 + which * 10 + batch);
  std::vector<float> cpu_dg(cpu.num_params()), gpu_dg(cpu.num_params());
  std::vector<float> cpu_eg(in.emb.size()), gpu_eg(in.emb.size());
  std::vector<float> cpu_p(batch), gpu_p(batch);
  // Two steps, with the same SGD update of both models' host parameters in between: the second
  // pass must see the updated parameters.
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const float scale = step == 0 ? 1.0f : 0.5f;
    const float cpu_loss =
        cpu.ForwardBackward(batch, in.dense.data(), in.emb.data(), in.labels.data(), scale,
                            cpu_dg.data(), cpu_eg.data(), cpu_p.data());
    const float gpu_loss =
        gpu.ForwardBackward(batch, in.dense.data(), in.emb.data(), in.labels.data(), scale,
                            gpu_dg.data(), gpu_eg.data(), gpu_p.data());
    CHECK(gpu_loss == Approx(cpu_loss).epsilon(1e-5));
    CheckNear("dense_grad", gpu_dg, cpu_dg);
    CheckNear("emb_grad", gpu_eg, cpu_eg);
    CheckNear("probs", gpu_p, cpu_p);
    for (size_t i = 0; i < cpu.num_params(); ++i) {
      cpu.params()[i] -= 0.5f * cpu_dg[i];
      gpu.params()[i] -= 0.5f * cpu_dg[i];
    }
  }
  cpu.Predict(batch, in.dense.data(), in.emb.data(), cpu_p.data());
  gpu.Predict(batch, in.dense.data(), in.emb.data(), gpu_p.data());
  CheckNear("Predict", gpu_p, cpu_p);
}

TEST_CASE("GpuModel rejects a bottom MLP that does not end in emb_dim", "[worker][model][gpu]") {
  ModelSpec shape = TestShape(1);
  shape.bottom = {5, 3};
  CHECK(GpuModel::Create(shape, 1).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace worker
}  // namespace ps

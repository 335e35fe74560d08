// GpuModel against the CPU model (CpuModel) on the same inputs, for every family and variant.
// Built twice: as gpu_model_test on a GPU (cuda_kernels:gpu_test_main fails the test on a machine
// without one; model_test checks that Create refuses there), and as gpu_model_emulated_test over
// cuda_kernels' host stand-in (testing/host_emulation.cc: host memory, a loop GEMM, the kernels'
// per-thread functions called for every thread), which runs without a GPU and checks GpuModel's
// own part: its buffers, offsets and leading dimensions, and the order of its steps.
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
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "worker/model/cpu_model.h"
#include "worker/model/internal/random_inputs.h"

namespace ps {
namespace worker {
namespace {

using testing::Inputs;
using testing::RandomInputs;

// The configurations compared: every family and variant CpuModel runs.
ModelSpec Config(const std::string& name) {
  ModelSpec s;  // DLRM at the quickstart shape: 13 dense, 26 fields of dim 16, bottom 64,16
  if (name == "dlrm") return s;
  if (name == "dlrm_small") {
    s.num_dense = 3;
    s.field_dims = {4, 4};
    s.bottom = {5, 4};
    s.top = {6};
  } else if (name == "dlrm_no_hidden_top") {  // one field, no hidden top layer
    s.num_dense = 4;
    s.field_dims = {8};
    s.bottom = {8};
    s.top = {};
  } else if (name == "dlrm_dot") {
    s.dot_interaction = true;
  } else if (name == "dlrm_dot_no_bottom") {  // z is the dense input itself
    s.num_dense = 4;
    s.field_dims = {4, 4, 4};
    s.bottom = {};
    s.top = {5};
    s.dot_interaction = true;
  } else if (name == "dlrm_mixed_dims") {  // fields of different dims, a bottom of another width
    s.num_dense = 5;
    s.field_dims = {3, 8, 1, 5};
    s.bottom = {6, 2};
    s.top = {7};
  } else if (name == "wide_deep") {
    s.type = config::Model::WIDE_DEEP;
    s.num_dense = 5;
    s.field_dims = {4, 4, 2};
    s.num_linear = 3;
    s.bottom = {};
    s.top = {8, 4};
  } else if (name == "wide_deep_no_dense") {
    s.type = config::Model::WIDE_DEEP;
    s.num_dense = 0;
    s.field_dims = {4, 2};
    s.num_linear = 2;
    s.bottom = {};
    s.top = {3};
  } else if (name == "deepfm") {
    s.type = config::Model::DEEPFM;
    s.num_dense = 6;
    s.field_dims = std::vector<int>(5, 4);
    s.num_linear = 5;
    s.bottom = {};
    s.top = {8};
  } else if (name == "deepfm_quickstart") {
    s.type = config::Model::DEEPFM;
    s.num_linear = 26;
    s.bottom = {};
  } else if (name == "dcn_v2") {
    s.type = config::Model::DCN_V2;
    s.num_dense = 5;
    s.field_dims = {4, 4, 3};
    s.bottom = {};
    s.top = {8, 4};
    s.cross_layers = 2;
    s.cross_rank = 0;
  } else if (name == "dcn_v2_rank8") {
    s = Config("dcn_v2");
    s.cross_rank = 8;
  } else if (name == "dcn_v2_no_dense_rank3") {
    s.type = config::Model::DCN_V2;
    s.num_dense = 0;
    s.field_dims = {4, 4};
    s.bottom = {};
    s.top = {};
    s.cross_layers = 3;
    s.cross_rank = 3;
  } else {
    FAIL("unknown configuration " << name);
  }
  return s;
}

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
  const std::string name =
      GENERATE(as<std::string>{}, "dlrm", "dlrm_small", "dlrm_no_hidden_top", "dlrm_dot",
               "dlrm_dot_no_bottom", "dlrm_mixed_dims", "wide_deep", "wide_deep_no_dense", "deepfm",
               "deepfm_quickstart", "dcn_v2", "dcn_v2_rank8", "dcn_v2_no_dense_rank3");
  const int batch = GENERATE(1, 7, 300);
  const ModelSpec spec = Config(name);
  INFO(name << ", batch " << batch);
  auto cpu_or = CpuModel::Create(spec, 17);
  auto gpu_or = GpuModel::Create(spec, 17);
  REQUIRE(cpu_or.ok());
  INFO(gpu_or.status().ToString());
  REQUIRE(gpu_or.ok());
  CpuModel& cpu = **cpu_or;
  GpuModel& gpu = **gpu_or;
  REQUIRE(gpu.num_params() == cpu.num_params());
  CHECK(std::vector<float>(gpu.params().begin(), gpu.params().end()) ==
        std::vector<float>(cpu.params().begin(), cpu.params().end()));

  const Inputs in = RandomInputs(spec, batch, 100 + batch + std::hash<std::string>()(name) % 997);
  std::vector<float> cpu_dg(cpu.num_params()), gpu_dg(cpu.num_params(), 1e30f);
  std::vector<float> cpu_eg(in.emb.size()), gpu_eg(in.emb.size(), 1e30f);
  std::vector<float> cpu_p(batch), gpu_p(batch, 1e30f);
  // Two steps, with the same SGD update of both models' host parameters in between: the second
  // pass must see the updated parameters. The GPU's outputs start as 1e30: every float must be
  // written.
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
  std::fill(gpu_p.begin(), gpu_p.end(), 1e30f);
  cpu.Predict(batch, in.dense.data(), in.emb.data(), cpu_p.data());
  gpu.Predict(batch, in.dense.data(), in.emb.data(), gpu_p.data());
  CheckNear("Predict", gpu_p, cpu_p);
}

TEST_CASE("a smaller batch after a larger one reuses the workspace", "[worker][model][gpu]") {
  const std::string name = GENERATE(as<std::string>{}, "dlrm_dot", "deepfm", "dcn_v2_rank8");
  const ModelSpec spec = Config(name);
  INFO(name);
  auto cpu = CpuModel::Create(spec, 3);
  auto gpu = GpuModel::Create(spec, 3);
  REQUIRE(cpu.ok());
  REQUIRE(gpu.ok());
  CHECK((*gpu)->last_copy_time() == absl::ZeroDuration());
  for (int batch : {64, 5, 64}) {
    const Inputs in = RandomInputs(spec, batch, batch);
    std::vector<float> cpu_dg((*cpu)->num_params()), gpu_dg((*cpu)->num_params());
    std::vector<float> cpu_eg(in.emb.size()), gpu_eg(in.emb.size());
    std::vector<float> cpu_p(batch), gpu_p(batch);
    const float cpu_loss =
        (*cpu)->ForwardBackward(batch, in.dense.data(), in.emb.data(), in.labels.data(), 1.0f,
                                cpu_dg.data(), cpu_eg.data(), cpu_p.data());
    const float gpu_loss =
        (*gpu)->ForwardBackward(batch, in.dense.data(), in.emb.data(), in.labels.data(), 1.0f,
                                gpu_dg.data(), gpu_eg.data(), gpu_p.data());
    CHECK(gpu_loss == Approx(cpu_loss).epsilon(1e-5));
    CheckNear("dense_grad", gpu_dg, cpu_dg);
    CheckNear("emb_grad", gpu_eg, cpu_eg);
    // The pass's copies in and out, timed apart from its kernels (the step breakdown's copy).
    CHECK((*gpu)->last_copy_time() > absl::ZeroDuration());
  }
}

TEST_CASE("GpuModel refuses what CpuModel refuses", "[worker][model][gpu]") {
  ModelSpec spec = Config("dlrm_small");
  spec.dot_interaction = true;
  spec.bottom = {5, 3};  // does not end in the fields' dim
  CHECK(GpuModel::Create(spec, 1).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace worker
}  // namespace ps

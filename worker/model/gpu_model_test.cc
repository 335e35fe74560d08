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

using testing::HostPool;
using testing::HostSpread;
using testing::Inputs;
using testing::RandomInputs;
using testing::RandomRowInputs;
using testing::RowInputs;

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

// The fewest tables such that slot i (the fields, then the linear inputs) can read table i %
// tables: the slots of one table share its dim.
int SharedTables(const ModelSpec& spec) {
  std::vector<int> dims = spec.field_dims;
  for (int i = 0; i < spec.num_linear; ++i) dims.push_back(1);
  for (int t = 1;; ++t) {
    bool fits = true;
    for (size_t i = 0; i < dims.size(); ++i) fits = fits && dims[i] == dims[i % t];
    if (fits) return t;
  }
}

// Whether two float vectors are the same floats.
void CheckSame(const std::string& what, const std::vector<float>& got,
               const std::vector<float>& want) {
#ifdef PS_GPU_EMULATED
  INFO(what);
  CHECK(got == want);
#else
  // On a GPU the scatter's sums use fused multiply-adds: a rounding apart.
  CheckNear(what, got, want);
#endif
}

TEST_CASE("ForwardBackwardRows pools and scatters on the device as the host pools and spreads",
          "[worker][model][gpu]") {
  const std::string name = GENERATE(as<std::string>{}, "dlrm", "dlrm_small", "dlrm_dot",
                                    "dlrm_mixed_dims", "wide_deep", "deepfm", "dcn_v2_rank8");
  const std::string pooling = GENERATE(as<std::string>{}, "sum", "mean", "mixed");
  const int batch = GENERATE(1, 7, 300);
  const ModelSpec spec = Config(name);
  const int tables = SharedTables(spec);
  // Few rows a table: samples and slots share keys, and some rows are read by no value.
  const int num_rows = 3 + batch / 4;
  INFO(name << ", " << pooling << ", batch " << batch << ", " << tables << " tables");
  const RowInputs r = RandomRowInputs(spec, batch, tables, num_rows, /*max_values=*/4,
                                      pooling == "mixed", pooling == "mean", 31 + batch);
  auto cpu_or = CpuModel::Create(spec, 5);
  auto gpu_or = GpuModel::Create(spec, 5);
  REQUIRE(cpu_or.ok());
  REQUIRE(gpu_or.ok());
  CpuModel& cpu = **cpu_or;
  GpuModel& gpu = **gpu_or;
  const int width = spec.emb_width();

  // The CPU backend's step: the host pools, the CPU model runs, the host spreads.
  const std::vector<float> emb = HostPool(r.in, width);
  std::vector<float> cpu_dg(cpu.num_params()), cpu_eg(emb.size()), cpu_p(batch);
  const float cpu_loss =
      cpu.ForwardBackward(batch, r.base.dense.data(), emb.data(), r.base.labels.data(), 0.5f,
                          cpu_dg.data(), cpu_eg.data(), cpu_p.data());
  const std::vector<std::vector<float>> cpu_rows = HostSpread(r.in, width, cpu_eg);

  // The GPU's: rows and bags in, rows' gradients out. Outputs start as 1e30: every float must be
  // written, the gradients of rows no value reads too.
  std::vector<float> gpu_dg(cpu.num_params(), 1e30f), gpu_p(batch, 1e30f);
  std::vector<std::vector<float>> gpu_rows(tables, std::vector<float>(7, 1e30f));
  absl::StatusOr<float> gpu_loss =
      gpu.ForwardBackwardRows(r.in, 0.5f, gpu_dg.data(), &gpu_rows, gpu_p.data());
  INFO(gpu_loss.status().ToString());
  REQUIRE(gpu_loss.ok());
  CHECK(*gpu_loss == Approx(cpu_loss).epsilon(1e-5));
  CHECK(gpu.last_copy_time() > absl::ZeroDuration());
  CheckNear("dense_grad", gpu_dg, cpu_dg);
  CheckNear("probs", gpu_p, cpu_p);
  REQUIRE(gpu_rows.size() == cpu_rows.size());
  for (int g = 0; g < tables; ++g)
    CheckNear("row_grad " + std::to_string(g), gpu_rows[g], cpu_rows[g]);

  // Against the GPU's own pass over the host-pooled emb: the device's pooling and scatter are
  // the host's floats (up to fused multiply-adds on a real device).
  std::vector<float> ref_dg(cpu.num_params()), ref_eg(emb.size()), ref_p(batch);
  const float ref_loss =
      gpu.ForwardBackward(batch, r.base.dense.data(), emb.data(), r.base.labels.data(), 0.5f,
                          ref_dg.data(), ref_eg.data(), ref_p.data());
  const std::vector<std::vector<float>> ref_rows = HostSpread(r.in, width, ref_eg);
#ifdef PS_GPU_EMULATED
  CHECK(*gpu_loss == ref_loss);
#else
  CHECK(*gpu_loss == Approx(ref_loss).epsilon(1e-6));
#endif
  CheckSame("dense_grad", gpu_dg, ref_dg);
  CheckSame("probs", gpu_p, ref_p);
  for (int g = 0; g < tables; ++g)
    CheckSame("row_grad " + std::to_string(g), gpu_rows[g], ref_rows[g]);

  // A second, smaller batch reuses the buffers.
  if (batch > 1) {
    const RowInputs small = RandomRowInputs(spec, 2, tables, 3, 2, false, true, 77);
    const std::vector<float> small_emb = HostPool(small.in, width);
    std::vector<float> eg(small_emb.size()), p(2);
    gpu.ForwardBackward(2, small.base.dense.data(), small_emb.data(), small.base.labels.data(),
                        1.0f, ref_dg.data(), eg.data(), p.data());
    REQUIRE(gpu.ForwardBackwardRows(small.in, 1.0f, gpu_dg.data(), &gpu_rows, gpu_p.data()).ok());
    const std::vector<std::vector<float>> want = HostSpread(small.in, width, eg);
    for (int g = 0; g < tables; ++g) CheckSame("small row_grad", gpu_rows[g], want[g]);
  }
}

TEST_CASE("ForwardBackwardRows serves the row cache's hits from the device and admits its misses",
          "[worker][model][gpu]") {
  const std::string name = GENERATE(as<std::string>{}, "dlrm_mixed_dims", "deepfm");
  const int batch = GENERATE(7, 300);
  const ModelSpec spec = Config(name);
  const int tables = SharedTables(spec);
  const int num_rows = 3 + batch / 4;
  INFO(name << ", batch " << batch << ", " << tables << " tables");
  const RowInputs r = RandomRowInputs(spec, batch, tables, num_rows, 4, true, false, 5 + batch);
  auto gpu_or = GpuModel::Create(spec, 5);
  auto ref_or = GpuModel::Create(spec, 5);  // the same passes without the cache
  REQUIRE(gpu_or.ok());
  REQUIRE(ref_or.ok());
  GpuModel& gpu = **gpu_or;
  GpuModel& ref = **ref_or;
  const int64_t cache_rows = num_rows + 5;
  // Row p of every table sits in slot (5p + 2) mod cache_rows (distinct: cache_rows is not a
  // multiple of 5 for these sizes) once admitted.
  REQUIRE(cache_rows % 5 != 0);
  const auto slot_of = [&](uint32_t p) { return static_cast<uint32_t>((5 * p + 2) % cache_rows); };
  struct Pass {
    std::vector<std::vector<float>> rows;
    std::vector<std::vector<uint32_t>> hit_slots, hit_places, admit_slots, admit_places;
  };
  // A pass whose rows `hit(p)` come from the cache (their host floats NaN: never read) and whose
  // rows `admit(p)` go into it.
  const auto make = [&](auto hit, auto admit) {
    Pass pass;
    pass.rows = r.rows;
    pass.hit_slots.resize(tables);
    pass.hit_places.resize(tables);
    pass.admit_slots.resize(tables);
    pass.admit_places.resize(tables);
    for (int g = 0; g < tables; ++g) {
      const int dim = r.in.tables[g].dim;
      for (uint32_t p = 0; p < static_cast<uint32_t>(num_rows); ++p) {
        if (hit(p)) {
          pass.hit_slots[g].push_back(slot_of(p));
          pass.hit_places[g].push_back(p);
          for (int k = 0; k < dim; ++k) pass.rows[g][size_t(p) * dim + k] = std::nanf("");
        } else if (admit(p)) {
          pass.admit_slots[g].push_back(slot_of(p));
          pass.admit_places[g].push_back(p);
        }
      }
    }
    return pass;
  };
  const auto input_of = [&](const Pass& pass) {
    PooledInput in = r.in;
    for (int g = 0; g < tables; ++g) {
      PooledTable& t = in.tables[g];
      t.rows = pass.rows[g];
      t.cache_rows = cache_rows;
      t.hit_slots = pass.hit_slots[g];
      t.hit_places = pass.hit_places[g];
      t.admit_slots = pass.admit_slots[g];
      t.admit_places = pass.admit_places[g];
    }
    return in;
  };
  // 1: the even rows admitted; 2: the even rows hit, the odd ones admitted; 3: every row hit.
  const Pass passes[] = {
      make([](uint32_t) { return false; }, [](uint32_t p) { return p % 2 == 0; }),
      make([](uint32_t p) { return p % 2 == 0; }, [](uint32_t) { return true; }),
      make([](uint32_t) { return true; }, [](uint32_t) { return false; }),
  };
  for (int k = 0; k < 3; ++k) {
    INFO("pass " << k + 1);
    std::vector<float> dg(gpu.num_params()), p(batch), ref_dg(ref.num_params()), ref_p(batch);
    std::vector<std::vector<float>> rows, ref_rows;
    absl::StatusOr<float> loss =
        gpu.ForwardBackwardRows(input_of(passes[k]), 0.5f, dg.data(), &rows, p.data());
    absl::StatusOr<float> ref_loss =
        ref.ForwardBackwardRows(r.in, 0.5f, ref_dg.data(), &ref_rows, ref_p.data());
    INFO(loss.status().ToString());
    REQUIRE(loss.ok());
    REQUIRE(ref_loss.ok());
    // The same floats as the pass over every row from the host: nothing NaN was read.
    CHECK(*loss == *ref_loss);
    CHECK(dg == ref_dg);
    CHECK(p == ref_p);
    REQUIRE(rows.size() == ref_rows.size());
    for (int g = 0; g < tables; ++g) CHECK(rows[g] == ref_rows[g]);
  }
  // Against the CPU model: its pass over the host-pooled rows.
  auto cpu = CpuModel::Create(spec, 5);
  REQUIRE(cpu.ok());
  const std::vector<float> emb = HostPool(r.in, spec.emb_width());
  std::vector<float> cpu_dg((*cpu)->num_params()), cpu_eg(emb.size()), cpu_p(batch);
  const float cpu_loss =
      (*cpu)->ForwardBackward(batch, r.base.dense.data(), emb.data(), r.base.labels.data(), 0.5f,
                              cpu_dg.data(), cpu_eg.data(), cpu_p.data());
  std::vector<float> dg(gpu.num_params()), p(batch);
  std::vector<std::vector<float>> rows;
  absl::StatusOr<float> loss =
      gpu.ForwardBackwardRows(input_of(passes[2]), 0.5f, dg.data(), &rows, p.data());
  REQUIRE(loss.ok());
  CHECK(*loss == Approx(cpu_loss).epsilon(1e-5));
  CheckNear("dense_grad", dg, cpu_dg);
  const std::vector<std::vector<float>> cpu_rows = HostSpread(r.in, spec.emb_width(), cpu_eg);
  for (int g = 0; g < tables; ++g) CheckNear("row_grad " + std::to_string(g), rows[g], cpu_rows[g]);
  // A slot past the cache, or a place past the rows, is refused.
  Pass bad = passes[2];
  bad.hit_slots[0][0] = static_cast<uint32_t>(cache_rows);
  CHECK(gpu.ForwardBackwardRows(input_of(bad), 0.5f, dg.data(), &rows, p.data()).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ForwardBackwardRows refuses inputs that do not fit", "[worker][model][gpu]") {
  const ModelSpec spec = Config("dlrm_small");
  auto gpu = GpuModel::Create(spec, 5);
  REQUIRE(gpu.ok());
  RowInputs r = RandomRowInputs(spec, 4, 1, 3, 2, false, false, 9);
  std::vector<float> dg((*gpu)->num_params()), p(4);
  std::vector<std::vector<float>> rows;
  SECTION("a value names a row the table does not have") {
    REQUIRE(!r.index[0].empty());
    r.index[0][0] = 3;
    CHECK((*gpu)->ForwardBackwardRows(r.in, 1.0f, dg.data(), &rows, p.data()).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
  SECTION("a slot missing") {
    r.in.tables[0].slot_offset.pop_back();
    r.in.tables[0].slot_mean.pop_back();
    CHECK((*gpu)->ForwardBackwardRows(r.in, 1.0f, dg.data(), &rows, p.data()).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
  SECTION("an empty batch") {
    r.in.batch = 0;
    r.in.tables[0].ends = {};
    r.in.tables[0].index = {};
    CHECK((*gpu)->ForwardBackwardRows(r.in, 1.0f, dg.data(), &rows, p.data()).status().code() ==
          absl::StatusCode::kInvalidArgument);
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

#include "worker/model/model.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cuda_kernels/device.h"
#include "worker/model/gpu_model.h"

namespace ps {
namespace worker {
namespace {

TEST_CASE("the backend is chosen at run time", "[worker][model]") {
  ModelSpec shape;
  auto cpu = CreateModel(shape, 1, Backend::kCpu);
  REQUIRE(cpu.ok());
  CHECK(std::string((*cpu)->backend()) == "cpu");
  CHECK(!(*cpu)->last_copy_time().has_value());  // no copies: the step breakdown has no copy
  // The CPU pools on the host: the rows' entry is not its.
  CHECK(!(*cpu)->pools_rows());
  std::vector<std::vector<float>> row_grads;
  CHECK((*cpu)
            ->ForwardBackwardRows(PooledInput(), 1.0f, nullptr, &row_grads, nullptr)
            .status()
            .code() == absl::StatusCode::kUnimplemented);
  auto automatic = CreateModel(shape, 1, Backend::kAuto);
  REQUIRE(automatic.ok());
  CHECK(std::string((*automatic)->backend()) == (cuda::DeviceCount() > 0 ? "gpu" : "cpu"));
  CHECK((*automatic)->pools_rows() == (cuda::DeviceCount() > 0));
  // Every backend starts from the same parameters.
  CHECK(std::vector<float>((*cpu)->params().begin(), (*cpu)->params().end()) ==
        std::vector<float>((*automatic)->params().begin(), (*automatic)->params().end()));
  if (cuda::DeviceCount() == 0) {
    CHECK(CreateModel(shape, 1, Backend::kGpu).status().code() ==
          absl::StatusCode::kFailedPrecondition);
  }
  CHECK(ParseBackend("tpu").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(*ParseBackend("gpu") == Backend::kGpu);
}

// Every family and variant the CPU runs, the GPU takes too: without a device kGpu fails with
// FAILED_PRECONDITION (never UNIMPLEMENTED) and kAuto runs it on the CPU; with one, both run it on
// the GPU (gpu_model_test compares the numbers).
TEST_CASE("every family is accepted by the GPU backend", "[worker][model]") {
  ModelSpec spec;
  SECTION("another family") {
    spec.type = GENERATE(config::Model::WIDE_DEEP, config::Model::DEEPFM, config::Model::DCN_V2);
    spec.bottom.clear();
    spec.num_linear = spec.type == config::Model::DCN_V2 ? 0 : 26;
  }
  SECTION("dot_interaction") { spec.dot_interaction = true; }
  SECTION("fields of different dims") { spec.field_dims[3] = 8; }
  SECTION("DCN_V2 of low rank") {
    spec.type = config::Model::DCN_V2;
    spec.bottom.clear();
    spec.cross_rank = 8;
  }
  const bool gpu = cuda::DeviceCount() > 0;
  const absl::StatusOr<std::unique_ptr<Model>> on_gpu = CreateModel(spec, 1, Backend::kGpu);
  if (gpu) {
    INFO(on_gpu.status().ToString());
    REQUIRE(on_gpu.ok());
    CHECK(std::string((*on_gpu)->backend()) == "gpu");
  } else {
    CHECK(on_gpu.status().code() == absl::StatusCode::kFailedPrecondition);
  }
  auto automatic = CreateModel(spec, 1, Backend::kAuto);
  REQUIRE(automatic.ok());
  CHECK(std::string((*automatic)->backend()) == (gpu ? "gpu" : "cpu"));
  auto cpu = CreateModel(spec, 1, Backend::kCpu);
  REQUIRE(cpu.ok());
  CHECK(std::string((*cpu)->backend()) == "cpu");
  CHECK(std::vector<float>((*cpu)->params().begin(), (*cpu)->params().end()) ==
        std::vector<float>((*automatic)->params().begin(), (*automatic)->params().end()));
}

// A spec no backend takes is refused as the CPU refuses it, on every backend and machine.
TEST_CASE("a spec the CPU refuses is INVALID_ARGUMENT on every backend", "[worker][model]") {
  ModelSpec spec;
  spec.dot_interaction = true;
  spec.field_dims[3] = 8;
  const Backend backend = GENERATE(Backend::kAuto, Backend::kCpu, Backend::kGpu);
  CHECK(CreateModel(spec, 1, backend).status().code() == absl::StatusCode::kInvalidArgument);
}

// On a GPU, gpu_model_test compares the backends; here there is none to compare.
TEST_CASE("without a GPU, GpuModel::Create fails with FAILED_PRECONDITION", "[worker][model]") {
  if (cuda::DeviceCount() > 0) return;
  CHECK_FALSE(GpuModel::Available());
  const absl::StatusOr<std::unique_ptr<GpuModel>> model = GpuModel::Create(ModelSpec(), 1);
  REQUIRE_FALSE(model.ok());
  CHECK(model.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(model.status().message() == "no CUDA device");
}

}  // namespace
}  // namespace worker
}  // namespace ps

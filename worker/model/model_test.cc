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
  auto automatic = CreateModel(shape, 1, Backend::kAuto);
  REQUIRE(automatic.ok());
  CHECK(std::string((*automatic)->backend()) == (cuda::DeviceCount() > 0 ? "gpu" : "cpu"));
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

// The GPU runs plain DLRM only: the rest is refused on every machine, kAuto included (never
// silently moved to the CPU on a machine with a GPU), and runs on the CPU when asked.
TEST_CASE("what the GPU does not run yet is refused with UNIMPLEMENTED", "[worker][model]") {
  ModelSpec spec;
  std::string what;
  SECTION("another family") {
    spec.type = GENERATE(config::Model::WIDE_DEEP, config::Model::DEEPFM, config::Model::DCN_V2);
    spec.bottom.clear();
    spec.num_linear = spec.type == config::Model::DCN_V2 ? 0 : 26;
    what = "model on the GPU is not implemented yet";
  }
  SECTION("dot_interaction") {
    spec.dot_interaction = true;
    what = "model.dot_interaction on the GPU is not implemented yet";
  }
  SECTION("fields of different dims") {
    spec.field_dims[3] = 8;
    what = "fields of different dims on the GPU are not implemented yet";
  }
  const absl::Status gpu = CreateModel(spec, 1, Backend::kGpu).status();
  CHECK(gpu.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(gpu.message()), Catch::Contains(what));
  if (cuda::DeviceCount() > 0) {
    CHECK(CreateModel(spec, 1, Backend::kAuto).status().code() == absl::StatusCode::kUnimplemented);
  } else {
    auto automatic = CreateModel(spec, 1, Backend::kAuto);
    REQUIRE(automatic.ok());
    CHECK(std::string((*automatic)->backend()) == "cpu");
  }
  auto cpu = CreateModel(spec, 1, Backend::kCpu);
  REQUIRE(cpu.ok());
  CHECK(std::string((*cpu)->backend()) == "cpu");
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

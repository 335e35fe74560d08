#include "worker/model/model.h"

#include <catch2/catch.hpp>
#include <vector>

#include "cuda_kernels/device.h"
#include "worker/model/dlrm_gpu.h"

namespace ps {
namespace worker {
namespace {

TEST_CASE("the backend is chosen at run time", "[worker][model]") {
  DlrmShape shape;
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

// On a GPU, dlrm_gpu_test compares the backends; here there is none to compare.
TEST_CASE("without a GPU, DlrmGpu::Create fails with FAILED_PRECONDITION", "[worker][model]") {
  if (cuda::DeviceCount() > 0) return;
  CHECK_FALSE(DlrmGpu::Available());
  const absl::StatusOr<std::unique_ptr<DlrmGpu>> model = DlrmGpu::Create(DlrmShape(), 1);
  REQUIRE_FALSE(model.ok());
  CHECK(model.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(model.status().message() == "no CUDA device");
}

}  // namespace
}  // namespace worker
}  // namespace ps

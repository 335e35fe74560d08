// What the kernels check without a device: BuildRowCsr, argument checks, and the runtime's errors
// on a machine without a GPU. The kernels against host references are in kernels_gpu_test.cc.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "cuda_kernels/blas.h"
#include "cuda_kernels/dense.h"
#include "cuda_kernels/device.h"
#include "cuda_kernels/embedding.h"
#include "cuda_kernels/interaction.h"
#include "cuda_kernels/memory.h"
#include "cuda_kernels/testing/require_ok.h"

namespace ps {
namespace cuda {
namespace {

TEST_CASE("BuildRowCsr lists the bags of every row in the values' order", "[cuda][embedding]") {
  // 2 samples of 2 slots (4 bags) over 4 rows: bag 0 reads rows 2 and 0, bag 1 row 2 twice, bag 2
  // nothing, bag 3 row 2; slot 1 pools by MEAN.
  const std::vector<uint32_t> index = {2, 0, 2, 2, 2};
  const std::vector<uint32_t> ends = {2, 4, 4, 5};
  RowCsr csr;
  SECTION("sum") {
    const std::vector<uint8_t> mean = {0, 0};
    REQUIRE_OK(BuildRowCsr(index.data(), ends.data(), 2, 2, mean.data(), 4, &csr));
    CHECK(csr.offsets == std::vector<int32_t>{0, 1, 1, 5, 5});
    CHECK(csr.bags == std::vector<int32_t>{0, 0, 1, 1, 3});
    CHECK(csr.bag_weight == std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f});
  }
  SECTION("mean") {
    const std::vector<uint8_t> mean = {1, 1};
    REQUIRE_OK(BuildRowCsr(index.data(), ends.data(), 2, 2, mean.data(), 4, &csr));
    CHECK(csr.bags == std::vector<int32_t>{0, 0, 1, 1, 3});
    CHECK(csr.bag_weight == std::vector<float>{0.5f, 0.5f, 1.0f, 1.0f});
  }
  SECTION("mean on one slot only") {
    const std::vector<uint8_t> mean = {0, 1};
    REQUIRE_OK(BuildRowCsr(index.data(), ends.data(), 2, 2, mean.data(), 4, &csr));
    CHECK(csr.bag_weight == std::vector<float>{1.0f, 0.5f, 1.0f, 1.0f});
  }
  SECTION("a row out of range or decreasing ends are invalid arguments") {
    const std::vector<uint8_t> mean = {0};
    const std::vector<uint32_t> bad = {0, 4};
    const std::vector<uint32_t> bad_ends = {2};
    const Error e = BuildRowCsr(bad.data(), bad_ends.data(), 1, 1, mean.data(), 4, &csr);
    CHECK(e.kind == Error::kInvalidArgument);
    CHECK(e.message.find("row 4 of 4") != std::string::npos);
    const std::vector<uint32_t> decreasing = {2, 1};
    CHECK(BuildRowCsr(bad.data(), decreasing.data(), 2, 1, mean.data(), 4, &csr).kind ==
          Error::kInvalidArgument);
    CHECK(BuildRowCsr(bad.data(), bad_ends.data(), 1, 0, mean.data(), 4, &csr).kind ==
          Error::kInvalidArgument);
  }
}

TEST_CASE("launchers reject bad arguments before touching the device", "[cuda]") {
  float* const none = nullptr;
  Bags bags;
  bags.batch = 1;
  bags.slots = 1;
  CHECK(GatherPooled(none, 1, 0, bags, none, 0, nullptr).kind == Error::kInvalidArgument);
  CHECK(GatherPooled(none, 1, 4, bags, none, 3, nullptr).kind == Error::kInvalidArgument);
  CHECK(ScatterRows(none, 3, 4, bags, nullptr, nullptr, nullptr, 1, none, nullptr).kind ==
        Error::kInvalidArgument);
  Bags no_slots = bags;
  no_slots.slots = 0;
  CHECK(GatherPooled(none, 1, 4, no_slots, none, 4, nullptr).kind == Error::kInvalidArgument);
  CHECK(BiasRelu(none, none, -1, 3, true, nullptr).kind == Error::kInvalidArgument);
  CHECK(BiasReluBackward(none, none, 3, -1, true, none, nullptr).kind == Error::kInvalidArgument);
  CHECK(SigmoidBce(none, none, -1, 1.0f, none, none, nullptr, nullptr).kind ==
        Error::kInvalidArgument);
  CHECK(Sigmoid(none, -1, none, nullptr).kind == Error::kInvalidArgument);
  // Empty work is no work: nothing is launched, so this succeeds even without a GPU.
  Bags empty;
  empty.slots = 3;
  CHECK(GatherPooled(none, 0, 4, empty, none, 12, nullptr).ok());
  CHECK(ScatterRows(none, 12, 4, empty, nullptr, nullptr, nullptr, 0, none, nullptr).ok());
  CHECK(BiasRelu(none, none, 0, 3, true, nullptr).ok());
}

TEST_CASE("the interaction launchers check their sizes before touching the device", "[cuda]") {
  float* const none = nullptr;
  auto invalid = [](const Error& e) { return e.kind == Error::kInvalidArgument; };
  // DotInteraction: 3 fields of dim 4 make 6 pairs.
  CHECK(invalid(DotInteraction(none, 4, none, 12, -1, 3, 4, none, 6, nullptr)));
  CHECK(invalid(DotInteraction(none, 4, none, 12, 2, 3, 0, none, 6, nullptr)));
  CHECK(invalid(DotInteraction(none, 3, none, 12, 2, 3, 4, none, 6, nullptr)));
  CHECK(invalid(DotInteraction(none, 4, none, 11, 2, 3, 4, none, 6, nullptr)));
  CHECK(invalid(DotInteraction(none, 4, none, 12, 2, 3, 4, none, 5, nullptr)));
  CHECK(invalid(
      DotInteractionBackward(none, 5, none, 4, none, 12, 2, 3, 4, none, 4, none, 12, nullptr)));
  CHECK(invalid(
      DotInteractionBackward(none, 6, none, 4, none, 12, 2, 3, 4, none, 3, none, 12, nullptr)));
  CHECK(invalid(
      DotInteractionBackward(none, 6, none, 4, none, 12, 2, 3, 4, none, 4, none, 11, nullptr)));
  CHECK(invalid(LinearForward(none, 10, 8, 3, 2, none, nullptr)));
  CHECK(invalid(LinearForward(none, 11, -1, 3, 2, none, nullptr)));
  CHECK(invalid(LinearBackward(none, 8, 3, 2, none, 10, nullptr)));
  CHECK(invalid(LinearBackward(none, 8, 3, -2, none, 11, nullptr)));
  CHECK(invalid(FmForward(none, 11, 3, 4, 2, none, nullptr)));
  CHECK(invalid(FmForward(none, 12, 3, 0, 2, none, nullptr)));
  CHECK(invalid(FmBackward(none, 12, 3, 4, 2, none, none, 11, nullptr)));
  CHECK(invalid(FmBackward(none, 12, -3, 4, 2, none, none, 12, nullptr)));
  CHECK(invalid(CrossForward(none, none, none, -1, 4, none, none, nullptr)));
  CHECK(invalid(CrossBackward(none, none, none, 2, -4, none, none, nullptr)));
  CHECK(invalid(Add(none, -1, none, nullptr)));
  // Empty work is no work: nothing is launched, so this succeeds even without a GPU.
  CHECK(DotInteraction(none, 4, none, 12, 0, 3, 4, none, 6, nullptr).ok());
  CHECK(DotInteraction(none, 4, none, 0, 2, 0, 4, none, 0, nullptr).ok());
  CHECK(DotInteractionBackward(none, 0, none, 4, none, 0, 2, 0, 4, none, 4, none, 0, nullptr).ok());
  CHECK(LinearForward(none, 8, 8, 0, 2, none, nullptr).ok());
  CHECK(LinearBackward(none, 8, 0, 2, none, 8, nullptr).ok());
  CHECK(FmForward(none, 12, 3, 4, 0, none, nullptr).ok());
  CHECK(FmBackward(none, 0, 0, 4, 2, none, none, 0, nullptr).ok());
  CHECK(CrossForward(none, none, none, 0, 4, none, none, nullptr).ok());
  CHECK(CrossBackward(none, none, none, 2, 0, none, none, nullptr).ok());
  CHECK(Add(none, 0, none, nullptr).ok());
}

TEST_CASE("without a GPU, memory and cuBLAS calls fail with the runtime's error", "[cuda]") {
  if (DeviceCount() > 0) return;
  void* p = nullptr;
  const Error e = DeviceAlloc(64, &p);
  CHECK_FALSE(e.ok());
  CHECK(p == nullptr);
  CHECK_FALSE(e.message.empty());
  std::unique_ptr<Blas> blas;
  CHECK_FALSE(Blas::Create(nullptr, &blas).ok());
  CHECK(blas == nullptr);
}

}  // namespace
}  // namespace cuda
}  // namespace ps

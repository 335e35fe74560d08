#include "cuda_kernels/device.h"

#include <catch2/catch.hpp>
#include <cstdio>

namespace ps {
namespace cuda {
namespace {

TEST_CASE("device detection never fails, with or without a GPU", "[cuda]") {
  const int count = DeviceCount();
  REQUIRE(count >= 0);
  if (count == 0) {
    std::printf("no CUDA device: the CPU path is taken\n");
    return;
  }
  for (int i = 0; i < count; ++i) {
    const std::string d = DeviceDescription(i);
    std::printf("device %d: %s\n", i, d.c_str());
    CHECK(d.find("sm_") != std::string::npos);
  }
}

}  // namespace
}  // namespace cuda
}  // namespace ps

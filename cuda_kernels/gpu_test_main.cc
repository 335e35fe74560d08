// main() of the tests that need a CUDA device: on a machine without one they fail, saying so,
// instead of passing without having run. They are tagged "gpu" and "manual", so `bazel test //...`
// leaves them out; `./deploy/test.sh --gpu` runs them.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "cuda_kernels/device.h"

int main(int argc, char** argv) {
  if (ps::cuda::DeviceCount() == 0) {
    std::fprintf(stderr,
                 "FAILED: this test needs a CUDA device and none was found (run it on a machine "
                 "with an NVIDIA GPU and its driver; see tests/README.md, \"GPU tests\")\n");
    return 1;
  }
  return Catch::Session().run(argc, argv);
}

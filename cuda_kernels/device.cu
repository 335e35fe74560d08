#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "cuda_kernels/device.h"

namespace ps {
namespace cuda {

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return count;
}

std::string DeviceDescription(int index) {
  cudaDeviceProp prop;
  const cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s, sm_%d%d, %.1f GiB", prop.name, prop.major, prop.minor,
                prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace cuda
}  // namespace ps

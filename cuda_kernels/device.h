// Run-time detection of CUDA devices. Every program asks this before taking the GPU path; on a
// machine without a GPU (or without a driver) it reports zero devices and the CPU path is taken.
#ifndef PS_CUDA_KERNELS_DEVICE_H_
#define PS_CUDA_KERNELS_DEVICE_H_

#include <string>

namespace ps {
namespace cuda {

// Usable CUDA devices: 0 when there is no GPU, no driver, or the runtime fails to initialise.
// Thread-safe.
int DeviceCount();

// A one-line description of device `index` ("NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB"), or the
// runtime's error text when it cannot be queried.
std::string DeviceDescription(int index);

}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_DEVICE_H_

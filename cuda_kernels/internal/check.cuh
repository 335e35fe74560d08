// Maps the CUDA runtime's and cuBLAS's status values onto Error. Included by .cu files only.
#ifndef PS_CUDA_KERNELS_INTERNAL_CHECK_CUH_
#define PS_CUDA_KERNELS_INTERNAL_CHECK_CUH_

#include <cuda_runtime.h>

#include <string>

#include "cuda_kernels/error.h"

namespace ps {
namespace cuda {
namespace internal {

inline Error FromCuda(cudaError_t e, const char* where) {
  Error r;
  if (e == cudaSuccess) return r;
  r.kind = e == cudaErrorMemoryAllocation ? Error::kOutOfMemory : Error::kRuntime;
  r.code = static_cast<int>(e);
  r.message = std::string(where) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  return r;
}

// The status of the launch just made (bad configuration, no device...). Faults while the kernel
// runs surface at the next synchronising call on the stream.
inline Error LaunchStatus(const char* where) { return FromCuda(cudaGetLastError(), where); }

inline Error InvalidArgument(const char* where, const std::string& what) {
  Error r;
  r.kind = Error::kInvalidArgument;
  r.message = std::string(where) + ": " + what;
  return r;
}

inline cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Blocks of kThreads threads covering n items; n > 0.
constexpr int kThreads = 256;
inline unsigned BlocksFor(long long n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

}  // namespace internal
}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_INTERNAL_CHECK_CUH_

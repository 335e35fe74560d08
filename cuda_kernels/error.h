// The outcome of a call into the CUDA runtime or cuBLAS, as plain C++ so that callers compiled
// without CUDA's headers can read it.
#ifndef PS_CUDA_KERNELS_ERROR_H_
#define PS_CUDA_KERNELS_ERROR_H_

#include <string>

namespace ps {
namespace cuda {

// What a launcher or a memory call reports. Success is the default-constructed value.
struct Error {
  enum Kind {
    kOk = 0,
    // The launcher rejected its arguments before touching the device.
    kInvalidArgument,
    // cudaErrorMemoryAllocation or CUBLAS_STATUS_ALLOC_FAILED.
    kOutOfMemory,
    // Any other cudaError_t (code holds its value). Includes cudaErrorNoDevice and
    // cudaErrorInsufficientDriver on a machine without a usable GPU.
    kRuntime,
    // Any other cublasStatus_t (code holds its value).
    kBlas,
  };

  Kind kind = kOk;
  // The cudaError_t or cublasStatus_t value; 0 for kOk and kInvalidArgument.
  int code = 0;
  // "where: what", empty on success.
  std::string message;

  bool ok() const { return kind == kOk; }
};

}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_ERROR_H_

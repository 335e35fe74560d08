#include <cuda_runtime.h>

#include "cuda_kernels/internal/check.cuh"
#include "cuda_kernels/memory.h"

namespace ps {
namespace cuda {

using internal::AsStream;
using internal::FromCuda;

Error DeviceAlloc(size_t bytes, void** ptr) {
  if (bytes == 0) {
    *ptr = nullptr;
    return Error();
  }
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; keep later calls clean
    return FromCuda(e, "cudaMalloc");
  }
  *ptr = p;
  return Error();
}

Error DeviceFree(void* ptr) {
  if (ptr == nullptr) return Error();
  return FromCuda(cudaFree(ptr), "cudaFree");
}

Error HostAlloc(size_t bytes, void** ptr) {
  if (bytes == 0) {
    *ptr = nullptr;
    return Error();
  }
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return FromCuda(e, "cudaMallocHost");
  }
  *ptr = p;
  return Error();
}

Error HostFree(void* ptr) {
  if (ptr == nullptr) return Error();
  return FromCuda(cudaFreeHost(ptr), "cudaFreeHost");
}

Error Copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return Error();
  return FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, AsStream(stream)),
                  "cudaMemcpyAsync");
}

Error Copy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width_bytes,
             size_t height, void* stream) {
  if (width_bytes == 0 || height == 0) return Error();
  return FromCuda(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width_bytes, height,
                                    cudaMemcpyDefault, AsStream(stream)),
                  "cudaMemcpy2DAsync");
}

Error Zero(void* ptr, size_t bytes, void* stream) {
  if (bytes == 0) return Error();
  return FromCuda(cudaMemsetAsync(ptr, 0, bytes, AsStream(stream)), "cudaMemsetAsync");
}

Error StreamCreate(void** stream) {
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return FromCuda(e, "cudaStreamCreate");
  }
  *stream = s;
  return Error();
}

Error StreamDestroy(void* stream) {
  if (stream == nullptr) return Error();
  return FromCuda(cudaStreamDestroy(AsStream(stream)), "cudaStreamDestroy");
}

Error StreamSynchronize(void* stream) {
  return FromCuda(cudaStreamSynchronize(AsStream(stream)), "cudaStreamSynchronize");
}

Error EventCreate(void** event) {
  cudaEvent_t ev = nullptr;
  const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return FromCuda(e, "cudaEventCreate");
  }
  *event = ev;
  return Error();
}

Error EventDestroy(void* event) {
  if (event == nullptr) return Error();
  return FromCuda(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy");
}

Error EventRecord(void* event, void* stream) {
  return FromCuda(cudaEventRecord(static_cast<cudaEvent_t>(event), AsStream(stream)),
                  "cudaEventRecord");
}

Error StreamWaitEvent(void* stream, void* event) {
  return FromCuda(cudaStreamWaitEvent(AsStream(stream), static_cast<cudaEvent_t>(event), 0),
                  "cudaStreamWaitEvent");
}

}  // namespace cuda
}  // namespace ps

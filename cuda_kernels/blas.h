// Single-precision GEMM on row-major matrices, by cuBLAS, without the reduced-precision modes
// (TF32, BF16x9 emulation), so that results stay within float rounding of a CPU GEMM and are the
// same bit for bit from run to run on one GPU model.
#ifndef PS_CUDA_KERNELS_BLAS_H_
#define PS_CUDA_KERNELS_BLAS_H_

#include <memory>

#include "cuda_kernels/error.h"

namespace ps {
namespace cuda {

// A Blas holds a cuBLAS handle bound to one stream. Thread-compatible; use one per thread.
class Blas {
 public:
  // A handle that queues its work on `stream` (a cudaStream_t, nullptr for the default stream),
  // in CUBLAS_PEDANTIC_MATH mode. Sets *out on success; kBlas (CUBLAS_STATUS_NOT_INITIALIZED...)
  // without a GPU, and *out is untouched.
  static Error Create(void* stream, std::unique_ptr<Blas>* out);

  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // C = alpha * op(A) * op(B) + beta * C, all row-major on the device: C is m x n with leading
  // dimension ldc; op(A) is m x k (A is m x k, or k x m when trans_a) with leading dimension lda;
  // op(B) is k x n likewise. kInvalidArgument on negative sizes or leading dimensions shorter
  // than a row; kBlas for cuBLAS's own errors.
  Error Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
             const float* b, int ldb, float beta, float* c, int ldc);

 private:
  explicit Blas(void* handle) : handle_(handle) {}

  void* const handle_;  // a cublasHandle_t
};

}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_BLAS_H_

#include <cublas_v2.h>

#include <algorithm>
#include <string>

#include "cuda_kernels/blas.h"
#include "cuda_kernels/internal/check.cuh"

namespace ps {
namespace cuda {
namespace {

Error FromBlas(cublasStatus_t s, const char* where) {
  Error r;
  if (s == CUBLAS_STATUS_SUCCESS) return r;
  r.kind = s == CUBLAS_STATUS_ALLOC_FAILED ? Error::kOutOfMemory : Error::kBlas;
  r.code = static_cast<int>(s);
  r.message = std::string(where) + ": " + cublasGetStatusName(s) + ": " + cublasGetStatusString(s);
  return r;
}

cublasHandle_t AsHandle(void* h) { return static_cast<cublasHandle_t>(h); }

}  // namespace

Error Blas::Create(void* stream, std::unique_ptr<Blas>* out) {
  cublasHandle_t handle = nullptr;
  Error e = FromBlas(cublasCreate(&handle), "cublasCreate");
  if (!e.ok()) {
    cudaGetLastError();  // cuBLAS may leave the runtime's error set when there is no device
    return e;
  }
  e = FromBlas(cublasSetStream(handle, internal::AsStream(stream)), "cublasSetStream");
  if (e.ok()) e = FromBlas(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  if (!e.ok()) {
    cublasDestroy(handle);
    return e;
  }
  out->reset(new Blas(handle));
  return Error();
}

Blas::~Blas() { cublasDestroy(AsHandle(handle_)); }

Error Blas::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  constexpr char kWhere[] = "Blas::Gemm";
  if (m < 0 || n < 0 || k < 0) return internal::InvalidArgument(kWhere, "negative sizes");
  // A row-major matrix is its transpose in column-major order.
  if (lda < std::max(1, trans_a ? m : k) || ldb < std::max(1, trans_b ? k : n) ||
      ldc < std::max(1, n)) {
    return internal::InvalidArgument(kWhere, "a leading dimension is shorter than a row");
  }
  if (m == 0 || n == 0) return Error();
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands, keep the
  // transpose flags (the column-major view of a row-major X is already X^T).
  return FromBlas(cublasSgemm(AsHandle(handle_), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                              trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda,
                              &beta, c, ldc),
                  "cublasSgemm");
}

}  // namespace cuda
}  // namespace ps

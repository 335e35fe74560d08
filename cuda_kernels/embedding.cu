#include <cuda_runtime.h>

#include "cuda_kernels/embedding.h"
#include "cuda_kernels/internal/check.cuh"
#include "cuda_kernels/internal/embedding_math.h"

namespace ps {
namespace cuda {
namespace {

using internal::AsStream;
using internal::BlocksFor;
using internal::InvalidArgument;
using internal::kThreads;
using internal::LaunchStatus;

__device__ inline int64_t ThreadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// One thread per (bag, d): consecutive threads read consecutive floats of a row.
__global__ void GatherPooledKernel(const float* __restrict__ rows, int64_t num_rows, int dim,
                                   Bags b, float* __restrict__ out, int64_t out_stride, int64_t n) {
  const int64_t t = ThreadIndex();
  if (t < n) internal::GatherPooledThread(t, rows, num_rows, dim, b, out, out_stride);
}

// One thread per (row, d), summing the row's bags in CSR order.
__global__ void ScatterRowsKernel(const float* __restrict__ bag_grad, int64_t in_stride, int dim,
                                  Bags b, const int32_t* __restrict__ offsets,
                                  const int32_t* __restrict__ bags,
                                  const float* __restrict__ bag_weight,
                                  float* __restrict__ row_grad, int64_t n) {
  const int64_t t = ThreadIndex();
  if (t < n) {
    internal::ScatterRowsThread(t, bag_grad, in_stride, dim, b, offsets, bags, bag_weight,
                                row_grad);
  }
}

__global__ void CopyRowsKernel(const float* __restrict__ src, const uint32_t* __restrict__ src_rows,
                               float* __restrict__ dst, const uint32_t* __restrict__ dst_rows,
                               int dim, int64_t n) {
  const int64_t t = ThreadIndex();
  if (t < n) internal::CopyRowsThread(t, src, src_rows, dst, dst_rows, dim);
}

}  // namespace

Error GatherPooled(const float* rows, int64_t num_rows, int dim, const Bags& bags, float* out,
                   int64_t out_stride, void* stream) {
  constexpr char kWhere[] = "GatherPooled";
  if (num_rows < 0 || bags.batch < 0 || dim < 1 || bags.slots < 1) {
    return InvalidArgument(kWhere, "negative sizes, dim < 1 or slots < 1");
  }
  if (out_stride < dim) return InvalidArgument(kWhere, "out_stride is shorter than dim");
  const int64_t n = internal::GatherThreads(bags, dim);
  if (n == 0) return Error();
  GatherPooledKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(rows, num_rows, dim, bags,
                                                                      out, out_stride, n);
  return LaunchStatus(kWhere);
}

Error BuildRowCsr(const uint32_t* index, const uint32_t* ends, int batch, int slots,
                  const uint8_t* slot_mean, int64_t num_rows, RowCsr* csr) {
  return internal::BuildRowCsrOnHost(index, ends, batch, slots, slot_mean, num_rows, csr);
}

Error ScatterRows(const float* bag_grad, int64_t in_stride, int dim, const Bags& b,
                  const int32_t* offsets, const int32_t* bags, const float* bag_weight,
                  int64_t num_rows, float* row_grad, void* stream) {
  constexpr char kWhere[] = "ScatterRows";
  if (num_rows < 0 || dim < 1 || b.slots < 1 || b.batch < 0) {
    return InvalidArgument(kWhere, "negative sizes, dim < 1 or slots < 1");
  }
  if (in_stride < dim) return InvalidArgument(kWhere, "in_stride is shorter than dim");
  const int64_t n = num_rows * dim;
  if (n == 0) return Error();
  ScatterRowsKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(
      bag_grad, in_stride, dim, b, offsets, bags, bag_weight, row_grad, n);
  return LaunchStatus(kWhere);
}

Error CopyRows(const float* src, const uint32_t* src_rows, float* dst, const uint32_t* dst_rows,
               int64_t n, int dim, void* stream) {
  constexpr char kWhere[] = "CopyRows";
  if (n < 0 || dim < 1) return InvalidArgument(kWhere, "n < 0 or dim < 1");
  const int64_t threads = n * dim;
  if (threads == 0) return Error();
  CopyRowsKernel<<<BlocksFor(threads), kThreads, 0, AsStream(stream)>>>(src, src_rows, dst,
                                                                        dst_rows, dim, threads);
  return LaunchStatus(kWhere);
}

}  // namespace cuda
}  // namespace ps

#include <cuda_runtime.h>

#include <limits>
#include <string>

#include "cuda_kernels/embedding.h"
#include "cuda_kernels/internal/check.cuh"

namespace ps {
namespace cuda {
namespace {

using internal::AsStream;
using internal::BlocksFor;
using internal::InvalidArgument;
using internal::kThreads;
using internal::LaunchStatus;

// One thread per (bag, d): consecutive threads read consecutive floats of a row.
__global__ void GatherPooledKernel(const float* __restrict__ rows, int64_t num_rows, int dim,
                                   const int32_t* __restrict__ index, int64_t num_bags, int fields,
                                   int slots, bool mean, float* __restrict__ out,
                                   int64_t out_stride) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= num_bags * dim) return;
  const int64_t bag = t / dim;
  const int d = static_cast<int>(t - bag * dim);
  const int32_t* idx = index + bag * slots;
  float sum = 0.0f;
  int count = 0;
  for (int k = 0; k < slots; ++k) {
    const int32_t r = idx[k];
    if (r < 0 || r >= num_rows) continue;
    sum += rows[static_cast<int64_t>(r) * dim + d];
    ++count;
  }
  if (mean && count > 0) sum /= static_cast<float>(count);
  const int64_t s = bag / fields;
  const int f = static_cast<int>(bag - s * fields);
  out[s * out_stride + static_cast<int64_t>(f) * dim + d] = sum;
}

// One thread per (row, d), summing the row's bags in CSR order.
__global__ void ScatterRowsKernel(const float* __restrict__ bag_grad, int fields, int64_t in_stride,
                                  int dim, const int32_t* __restrict__ offsets,
                                  const int32_t* __restrict__ bags,
                                  const float* __restrict__ bag_weight, int64_t num_rows,
                                  float* __restrict__ row_grad) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= num_rows * dim) return;
  const int64_t row = t / dim;
  const int d = static_cast<int>(t - row * dim);
  float acc = 0.0f;
  for (int32_t j = offsets[row]; j < offsets[row + 1]; ++j) {
    const int32_t b = bags[j];
    const int32_t s = b / fields;
    const int32_t f = b - s * fields;
    acc += bag_weight[b] * bag_grad[s * in_stride + static_cast<int64_t>(f) * dim + d];
  }
  row_grad[t] = acc;
}

}  // namespace

Error GatherPooled(const float* rows, int64_t num_rows, int dim, const int32_t* index, int batch,
                   int fields, int slots, Pooling pooling, float* out, int64_t out_stride,
                   void* stream) {
  constexpr char kWhere[] = "GatherPooled";
  if (num_rows < 0 || batch < 0 || fields < 0 || dim < 1 || slots < 1) {
    return InvalidArgument(kWhere, "negative sizes, dim < 1 or slots < 1");
  }
  if (out_stride < static_cast<int64_t>(fields) * dim) {
    return InvalidArgument(kWhere, "out_stride is shorter than fields * dim");
  }
  const int64_t num_bags = static_cast<int64_t>(batch) * fields;
  if (num_bags == 0) return Error();
  GatherPooledKernel<<<BlocksFor(num_bags * dim), kThreads, 0, AsStream(stream)>>>(
      rows, num_rows, dim, index, num_bags, fields, slots, pooling == Pooling::kMean, out,
      out_stride);
  return LaunchStatus(kWhere);
}

Error BuildRowCsr(const int32_t* index, int64_t num_bags, int slots, int64_t num_rows,
                  Pooling pooling, RowCsr* csr) {
  constexpr char kWhere[] = "BuildRowCsr";
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (num_bags < 0 || slots < 1 || num_rows < 0) {
    return InvalidArgument(kWhere, "negative sizes or slots < 1");
  }
  if (num_bags * slots > kMax || num_rows > kMax - 1) {
    return InvalidArgument(kWhere, "more entries than int32 offsets can address");
  }
  csr->offsets.assign(num_rows + 1, 0);
  csr->bag_weight.assign(num_bags, 1.0f);
  // Counting sort by row, stable in bag order.
  for (int64_t b = 0; b < num_bags; ++b) {
    int count = 0;
    for (int k = 0; k < slots; ++k) {
      const int32_t r = index[b * slots + k];
      if (r == -1) continue;
      if (r < -1 || r >= num_rows) {
        return InvalidArgument(kWhere, "bag " + std::to_string(b) + " slot " + std::to_string(k) +
                                           " names row " + std::to_string(r) + " of " +
                                           std::to_string(num_rows));
      }
      ++csr->offsets[r + 1];
      ++count;
    }
    if (pooling == Pooling::kMean && count > 0) {
      csr->bag_weight[b] = 1.0f / static_cast<float>(count);
    }
  }
  for (int64_t r = 0; r < num_rows; ++r) csr->offsets[r + 1] += csr->offsets[r];
  csr->bags.assign(csr->offsets[num_rows], 0);
  std::vector<int32_t> next(csr->offsets.begin(), csr->offsets.end() - 1);
  for (int64_t b = 0; b < num_bags; ++b) {
    for (int k = 0; k < slots; ++k) {
      const int32_t r = index[b * slots + k];
      if (r >= 0) csr->bags[next[r]++] = static_cast<int32_t>(b);
    }
  }
  return Error();
}

Error ScatterRows(const float* bag_grad, int fields, int64_t in_stride, int dim,
                  const int32_t* offsets, const int32_t* bags, const float* bag_weight,
                  int64_t num_rows, float* row_grad, void* stream) {
  constexpr char kWhere[] = "ScatterRows";
  if (num_rows < 0 || dim < 1 || fields < 1) {
    return InvalidArgument(kWhere, "negative num_rows, dim < 1 or fields < 1");
  }
  if (in_stride < static_cast<int64_t>(fields) * dim) {
    return InvalidArgument(kWhere, "in_stride is shorter than fields * dim");
  }
  if (num_rows == 0) return Error();
  ScatterRowsKernel<<<BlocksFor(num_rows * dim), kThreads, 0, AsStream(stream)>>>(
      bag_grad, fields, in_stride, dim, offsets, bags, bag_weight, num_rows, row_grad);
  return LaunchStatus(kWhere);
}

}  // namespace cuda
}  // namespace ps

// The per-thread work of the kernels in embedding.h, and BuildRowCsr, as inline functions that
// both nvcc (for the device) and the host compiler compile: embedding.cu's kernels call them once
// per thread, and testing/host_emulation.cc loops them over every thread index, so a CUDA model's
// pooling and scatter run without a GPU in the same order of sums. Plain C++: no CUDA header.
#ifndef PS_CUDA_KERNELS_INTERNAL_EMBEDDING_MATH_H_
#define PS_CUDA_KERNELS_INTERNAL_EMBEDDING_MATH_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cuda_kernels/embedding.h"
#include "cuda_kernels/error.h"

#ifdef __CUDACC__
#define PS_EMB_HOST_DEVICE __host__ __device__
#else
#define PS_EMB_HOST_DEVICE
#endif

namespace ps {
namespace cuda {
namespace internal {

// GatherPooled: one thread per (bag, d), t = bag * dim + d; threads t < GatherThreads.
PS_EMB_HOST_DEVICE inline int64_t GatherThreads(const Bags& b, int dim) {
  return static_cast<int64_t>(b.batch) * b.slots * dim;
}

PS_EMB_HOST_DEVICE inline void GatherPooledThread(int64_t t, const float* rows, int64_t num_rows,
                                                  int dim, const Bags& b, float* out,
                                                  int64_t out_stride) {
  const int64_t bag = t / dim;
  const int d = static_cast<int>(t - bag * dim);
  const int64_t s = bag / b.slots;
  const int j = static_cast<int>(bag - s * b.slots);
  const uint32_t begin = bag == 0 ? 0u : b.ends[bag - 1];
  const uint32_t end = b.ends[bag];
  float* o = out + s * out_stride + b.slot_offset[j] + d;
  if (end - begin == 1) {
    const uint32_t r = b.index[begin];
    *o = r < num_rows ? rows[static_cast<int64_t>(r) * dim + d] : 0.0f;
    return;
  }
  float sum = 0.0f;
  for (uint32_t k = begin; k < end; ++k) {
    const uint32_t r = b.index[k];
    if (r >= num_rows) continue;
    sum += rows[static_cast<int64_t>(r) * dim + d];
  }
  if (b.slot_mean[j] && end - begin > 1) sum *= 1.0f / static_cast<float>(end - begin);
  *o = sum;
}

// ScatterRows: one thread per (row, d), t = row * dim + d; threads t < num_rows * dim.
PS_EMB_HOST_DEVICE inline void ScatterRowsThread(int64_t t, const float* bag_grad,
                                                 int64_t in_stride, int dim, const Bags& b,
                                                 const int32_t* offsets, const int32_t* bags,
                                                 const float* bag_weight, float* row_grad) {
  const int64_t row = t / dim;
  const int d = static_cast<int>(t - row * dim);
  float acc = 0.0f;
  for (int32_t e = offsets[row]; e < offsets[row + 1]; ++e) {
    const int32_t bag = bags[e];
    const int32_t s = bag / b.slots;
    const int32_t j = bag - s * b.slots;
    acc += bag_weight[bag] * bag_grad[s * in_stride + b.slot_offset[j] + d];
  }
  row_grad[t] = acc;
}

inline Error CsrInvalid(const std::string& what) {
  Error r;
  r.kind = Error::kInvalidArgument;
  r.message = "BuildRowCsr: " + what;
  return r;
}

// BuildRowCsr's body (embedding.h), shared by embedding.cu and the host emulation.
inline Error BuildRowCsrOnHost(const uint32_t* index, const uint32_t* ends, int batch, int slots,
                               const uint8_t* slot_mean, int64_t num_rows, RowCsr* csr) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (batch < 0 || slots < 1 || num_rows < 0) {
    return CsrInvalid("negative sizes or slots < 1");
  }
  const int64_t num_bags = static_cast<int64_t>(batch) * slots;
  const int64_t values = num_bags == 0 ? 0 : ends[num_bags - 1];
  if (num_bags > kMax || values > kMax || num_rows > kMax - 1) {
    return CsrInvalid("more entries than int32 offsets can address");
  }
  csr->offsets.assign(num_rows + 1, 0);
  csr->bag_weight.assign(num_bags, 1.0f);
  uint32_t begin = 0;
  for (int64_t bag = 0; bag < num_bags; ++bag) {
    const uint32_t end = ends[bag];
    if (end < begin) {
      return CsrInvalid("ends decrease at bag " + std::to_string(bag));
    }
    for (uint32_t k = begin; k < end; ++k) {
      if (index[k] >= num_rows) {
        return CsrInvalid("value " + std::to_string(k) + " of bag " + std::to_string(bag) +
                          " names row " + std::to_string(index[k]) + " of " +
                          std::to_string(num_rows));
      }
      ++csr->offsets[index[k] + 1];
    }
    if (slot_mean[bag % slots] && end - begin > 1) {
      csr->bag_weight[bag] = 1.0f / static_cast<float>(end - begin);
    }
    begin = end;
  }
  for (int64_t r = 0; r < num_rows; ++r) csr->offsets[r + 1] += csr->offsets[r];
  csr->bags.assign(csr->offsets[num_rows], 0);
  std::vector<int32_t> next(csr->offsets.begin(), csr->offsets.end() - 1);
  begin = 0;
  for (int64_t bag = 0; bag < num_bags; ++bag) {
    for (uint32_t k = begin; k < ends[bag]; ++k) {
      csr->bags[next[index[k]]++] = static_cast<int32_t>(bag);
    }
    begin = ends[bag];
  }
  return Error();
}

// CopyRows' thread t: float t % dim of pair t / dim.
PS_EMB_HOST_DEVICE inline void CopyRowsThread(int64_t t, const float* src, const uint32_t* src_rows,
                                              float* dst, const uint32_t* dst_rows, int dim) {
  const int64_t i = t / dim;
  const int d = static_cast<int>(t - i * dim);
  dst[static_cast<int64_t>(dst_rows[i]) * dim + d] =
      src[static_cast<int64_t>(src_rows[i]) * dim + d];
}

}  // namespace internal
}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_INTERNAL_EMBEDDING_MATH_H_

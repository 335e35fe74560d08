// Embedding kernels of a batch whose rows were pulled from the servers, in the worker's layout of
// one table's keys (worker/embedding_io.h's TableKeys): the table's distinct rows in one buffer,
// and per bag (a sample's slot reading the table: bag b = sample * slots + j for the table's j-th
// slot) its values, index[begin_b, ends[b]) with begin_b = ends[b - 1] (0 for the first bag), each
// the row it reads. A bag's pooled embedding is the SUM, or the MEAN, of its values' rows (zeros
// for a bag without values), written at its slot's offset in the sample's row of the model's input.
//
// All pointers passed to launchers are device pointers unless said otherwise; launchers queue
// work on `stream` (a cudaStream_t, nullptr for the default stream) and return at once.
#ifndef PS_CUDA_KERNELS_EMBEDDING_H_
#define PS_CUDA_KERNELS_EMBEDDING_H_

#include <cstdint>
#include <vector>

#include "cuda_kernels/error.h"

namespace ps {
namespace cuda {

// One table's bags, as the launchers below read them (device pointers).
struct Bags {
  const uint32_t* index = nullptr;  // per value: its row
  const uint32_t* ends = nullptr;   // per bag: where its values end in index
  int batch = 0;                    // samples
  int slots = 0;                    // bags a sample (the table's slots)
  // Per slot j: the offset of its dim floats in a sample's row, and whether it pools by MEAN.
  // slot_offset[j] + dim <= the row's stride is the caller's to ensure (not checked: device data).
  const int32_t* slot_offset = nullptr;
  const uint8_t* slot_mean = nullptr;
};

// Pools every bag of `bags`: for sample s, slot j and d < dim,
//   out[s * out_stride + slot_offset[j] + d] = SUM or MEAN over the bag's values v of
//       rows[index[v] * dim + d]
// summed in the values' order from 0 (a bag of one value copies its row; MEAN multiplies a sum of
// count > 1 values by 1.0f / count), as the worker's host pooling (PoolRows) does: the same
// floats up to the device's fused multiply-adds. rows: num_rows x dim. A value naming a row
// outside [0, num_rows) reads nothing (never out of bounds); BuildRowCsr reports it.
// kInvalidArgument on negative sizes, dim < 1, slots < 1 or out_stride < dim; no work when batch
// is 0.
Error GatherPooled(const float* rows, int64_t num_rows, int dim, const Bags& bags, float* out,
                   int64_t out_stride, void* stream);

// The transpose of a table's bags, built on the host, for a deterministic reduce-by-key: the
// values that read row u belong to bags[offsets[u]] .. bags[offsets[u + 1] - 1], in the values'
// order, one entry per value (a row read twice by one bag is listed twice).
struct RowCsr {
  std::vector<int32_t> offsets;  // num_rows + 1
  std::vector<int32_t> bags;     // bag = sample * slots + j
  // Per bag: the factor its gradient contributes with (1, or 1.0f / values for MEAN with more
  // than one value).
  std::vector<float> bag_weight;
};

// Builds *csr from host copies of a table's bags: index (ends[num_bags - 1] values), ends
// (num_bags = batch * slots), slot_mean (slots flags). kInvalidArgument when a value names a row
// outside [0, num_rows), when ends decrease, or when the sizes are negative, slots < 1 or
// overflow int32 (csr is then unspecified). Host only: works without a GPU.
Error BuildRowCsr(const uint32_t* index, const uint32_t* ends, int batch, int slots,
                  const uint8_t* slot_mean, int64_t num_rows, RowCsr* csr);

// The gradient of GatherPooled: for every row u and d < dim,
//   row_grad[u * dim + d] = sum over the CSR's entries e of row u, in order, of
//       bag_weight[b] * bag_grad[(b / slots) * in_stride + slot_offset[b % slots] + d]
// with b = bags[e], summed from 0, as the worker's host spreading (SpreadGrads) does. offsets,
// bags and bag_weight are the device copies of a RowCsr; of `b`, only batch, slots and
// slot_offset are read. Every row is written (rows no bag reads get 0). One thread per (row, d)
// sums its entries sequentially: no atomics, the result is the same bit for bit on every run.
// kInvalidArgument on negative sizes, dim < 1, slots < 1 or in_stride < dim.
Error ScatterRows(const float* bag_grad, int64_t in_stride, int dim, const Bags& b,
                  const int32_t* offsets, const int32_t* bags, const float* bag_weight,
                  int64_t num_rows, float* row_grad, void* stream);

// Copies n rows of dim floats: for every i < n, row dst_rows[i] of dst gets row src_rows[i] of
// src (the row cache's hits into a batch's rows, and its admitted rows into the cache). The
// dst_rows must be distinct (the copies run side by side); the rows are not bounds-checked here
// (the caller checked them). One thread per float. kInvalidArgument on n < 0 or dim < 1.
Error CopyRows(const float* src, const uint32_t* src_rows, float* dst, const uint32_t* dst_rows,
               int64_t n, int dim, void* stream);

}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_EMBEDDING_H_

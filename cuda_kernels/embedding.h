// Embedding kernels of a batch whose rows were pulled from the servers. The rows come as one
// buffer of unique rows; each sample has `fields` bags (one per sparse field) of `slots` slots,
// and each slot names the unique row it reads, or -1 when the bag has fewer values than slots
// (multi-hot fields are padded). A bag's pooled embedding is the sum or the mean of its rows.
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

enum class Pooling {
  kSum,
  // The sum divided by the number of non-empty slots; a bag with none pools to zeros.
  kMean,
};

// Pools every bag: for sample s and field f,
//   out[s * out_stride + f * dim + d] = pool over slots k of rows[index[(s * fields + f) * slots +
//   k] * dim + d]
// rows: num_rows x dim; index: batch x fields x slots, each in [0, num_rows) or -1. A slot outside
// that range is skipped like -1 (it never reads out of bounds); BuildRowCsr reports it.
// out_stride >= fields * dim lets the pooled embeddings land inside a wider row (the concatenated
// input of an MLP). kInvalidArgument on negative sizes, dim < 1, slots < 1 or a short out_stride;
// no work when batch or fields is 0.
Error GatherPooled(const float* rows, int64_t num_rows, int dim, const int32_t* index, int batch,
                   int fields, int slots, Pooling pooling, float* out, int64_t out_stride,
                   void* stream);

// The transpose of `index`, built on the host, for a deterministic reduce-by-key: the bags that
// read unique row u are bags[offsets[u]] .. bags[offsets[u + 1] - 1], in increasing order, one
// entry per slot (a row read twice by one bag is listed twice).
struct RowCsr {
  std::vector<int32_t> offsets;  // num_rows + 1
  std::vector<int32_t> bags;     // bag = sample * fields + field
  // Per bag: the factor its gradient contributes with (1, or 1 / non-empty slots for kMean).
  std::vector<float> bag_weight;
};

// Builds *csr from a host copy of index (num_bags x slots). kInvalidArgument when a slot is
// neither -1 nor in [0, num_rows), or when the sizes are negative or overflow int32 (csr is then
// unspecified). Host only: works without a GPU.
Error BuildRowCsr(const int32_t* index, int64_t num_bags, int slots, int64_t num_rows,
                  Pooling pooling, RowCsr* csr);

// The gradient of GatherPooled: for every unique row u and d < dim,
//   row_grad[u * dim + d] = sum over the CSR's entries j of row u, in order, of
//       bag_weight[b] * bag_grad[(b / fields) * in_stride + (b % fields) * dim + d],  b = bags[j]
// offsets, bags and bag_weight are the device copies of a RowCsr. Every row is written (rows no
// bag reads get 0). One thread per (row, d) sums its entries sequentially: no atomics, the result
// is the same bit for bit on every run. kInvalidArgument on negative sizes, dim < 1, fields < 1
// or in_stride < fields * dim.
Error ScatterRows(const float* bag_grad, int fields, int64_t in_stride, int dim,
                  const int32_t* offsets, const int32_t* bags, const float* bag_weight,
                  int64_t num_rows, float* row_grad, void* stream);

}  // namespace cuda
}  // namespace ps

#endif  // PS_CUDA_KERNELS_EMBEDDING_H_

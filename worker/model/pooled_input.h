// A batch's embedding inputs before pooling, for a model that pools on its own device
// (Model::pools_rows()): per table, the distinct rows pulled for the batch and, per sample and
// slot, which of them the slot's values read (worker/embedding_io.h's TableKeys), with where
// each slot's pooled floats go in a sample's row of the model's input (model_spec.h's emb
// layout). The model pools them as the worker's host pooling (PoolRows) does and gives back, per
// table, the gradient of every distinct row, as the host's spreading (SpreadGrads) does.
#ifndef PS_WORKER_MODEL_POOLED_INPUT_H_
#define PS_WORKER_MODEL_POOLED_INPUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ps {
namespace worker {

// One table's rows and bags. A bag is one sample's slot reading the table: bag b = sample *
// slots + j for the table's j-th slot; its values are index[begin, ends[b]), begin = ends[b - 1]
// (0 for the first bag).
struct PooledTable {
  int dim = 0;
  absl::Span<const float> rows;      // distinct rows x dim floats (host memory)
  absl::Span<const uint32_t> index;  // per value: the row it reads, < rows.size() / dim
  absl::Span<const uint32_t> ends;   // per bag (batch x slots): where its values end in index
  // Per slot of the table: the offset of its dim floats in a sample's emb row, and whether it
  // pools by MEAN (else SUM). SUM of no values is zeros; MEAN of no values too.
  std::vector<int32_t> slot_offset;
  std::vector<uint8_t> slot_mean;
  // The worker's row cache on the model's device (worker/row_cache.h, on_device), or 0 rows: the
  // model keeps cache_rows x dim floats for the table. Before pooling, the rows of `hit_slots`
  // are copied from the cache into the distinct rows at `hit_places` (whose floats in `rows` are
  // not read), then the rows at `admit_places` into the cache at `admit_slots` (no slot twice).
  int64_t cache_rows = 0;
  absl::Span<const uint32_t> hit_slots;
  absl::Span<const uint32_t> hit_places;
  absl::Span<const uint32_t> admit_slots;
  absl::Span<const uint32_t> admit_places;

  int slots() const { return static_cast<int>(slot_offset.size()); }
  int64_t num_rows() const { return dim > 0 ? static_cast<int64_t>(rows.size()) / dim : 0; }
};

// A batch as a model that pools on its device takes it. The pointers are host buffers that stay
// valid for the call.
struct PooledInput {
  int batch = 0;
  const float* dense = nullptr;   // batch x num_dense
  const float* labels = nullptr;  // batch
  std::vector<PooledTable> tables;
};

// Whether `in`'s shapes fit a model whose emb rows are `emb_width` floats: OK when every table
// has dim >= 1, rows a multiple of dim, as many slot_mean as slot_offset flags, batch x slots
// ends, non-decreasing and ending at index.size(), when the tables' slots cover every float of an
// emb row exactly once, and when the cache's slots are < cache_rows and its places < the rows,
// in pairs of equal lengths. INVALID_ARGUMENT naming the table and what is wrong otherwise. The
// values' rows (index) are not checked here: the model checks them as it reads them.
absl::Status CheckPooledInput(const PooledInput& in, int emb_width);

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_MODEL_POOLED_INPUT_H_

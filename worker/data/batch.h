// The unit of training data that readers hand to the worker's step, and the schema that sizes it.
#ifndef PS_WORKER_DATA_BATCH_H_
#define PS_WORKER_DATA_BATCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/schema_columns.h"

namespace ps {
namespace worker {

// ColumnRef (a column by number or by header name) is common/schema_columns.h's.

// How a delimited text column becomes a feature (the job's data.schema, compiled by
// worker/data/schema.h).
struct DenseColumnSpec {
  std::string name;
  ColumnRef column;
  enum class Transform { kNone, kLog1p, kStandardize } transform = Transform::kNone;
  float mean = 0;    // kStandardize
  float stddev = 1;  // kStandardize, > 0
};

struct SparseFieldSpec {
  std::string name;
  ColumnRef column;
  // 0: single-valued; else the character between the values of a multi-valued column.
  char separator = 0;
  // Multi-valued: the most values kept; with skip_overflow a line with more is malformed.
  int max_values = 64;
  bool skip_overflow = false;
};

struct TextSchema {
  char delimiter = '\t';
  // Every file's first line names its columns (delimited as the data): the columns named by name
  // are looked up in it, every line must then have as many columns, and it is never trained on.
  // Without a header a line must have at least the columns the schema reads.
  bool header = false;
  ColumnRef label;
  std::vector<DenseColumnSpec> dense;
  std::vector<SparseFieldSpec> sparse;
};

// How many features a sample has and, for delimited text, where they are. Criteo's click logs
// have 13 integer and 26 categorical ones.
struct SchemaOptions {
  // Integer ("dense") features per sample, after the label. Default 13; must be >= 0.
  int num_dense = 13;
  // Categorical ("sparse") fields per sample, after the dense ones. Default 26; must be >= 0.
  int num_sparse = 26;
  // Null: the Criteo layout of the counts above. Else delimited text as it says, whose dense and
  // sparse sizes are num_dense and num_sparse.
  std::shared_ptr<const TextSchema> text;
};

// A batch of samples laid out for the compute backends: one flat row-major array per kind of value.
// Readers resize the vectors to exactly `size` rows and reuse their capacity from batch to batch.
struct Batch {
  // Number of samples (rows).
  int size = 0;
  // size values, 0 or 1.
  std::vector<float> labels;
  // size x num_dense, row-major: the transformed dense features.
  std::vector<float> dense;
  // The hashed keys of the sparse fields' values, sample-major then field: the values of field f
  // of sample r are keys[offsets[r * num_sparse + f], offsets[r * num_sparse + f + 1]). A
  // single-valued field has exactly one; a multi-valued one zero or more.
  std::vector<uint64_t> keys;
  // size x num_sparse + 1 positions in keys, offsets[0] == 0, non-decreasing.
  std::vector<uint32_t> offsets;

  // Whether every field of every sample has exactly one value (keys is then size x num_sparse).
  // Scans the offsets.
  bool SingleValued() const {
    for (size_t i = 0; i < offsets.size(); ++i) {
      if (offsets[i] != i) return false;
    }
    return true;
  }
};

// Sets batch->offsets for `batch->size` samples of `num_sparse` single-valued fields.
inline void SetSingleValuedOffsets(int num_sparse, Batch* batch) {
  const size_t n = size_t(batch->size) * num_sparse;
  batch->offsets.resize(n + 1);
  for (size_t i = 0; i <= n; ++i) batch->offsets[i] = static_cast<uint32_t>(i);
}

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_DATA_BATCH_H_

// The unit of training data that readers hand to the worker's step, and the schema that sizes it.
#ifndef PS_WORKER_DATA_BATCH_H_
#define PS_WORKER_DATA_BATCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ps {
namespace worker {

// How a delimited text column becomes a feature (the job's data.schema, resolved by
// worker/data/schema.h). Columns are 0-based here.
struct DenseColumnSpec {
  std::string name;
  int column = 0;
  enum class Transform { kNone, kLog1p, kStandardize } transform = Transform::kNone;
  float mean = 0;    // kStandardize
  float stddev = 1;  // kStandardize, > 0
};

struct SparseFieldSpec {
  std::string name;
  int column = 0;
  // 0: single-valued; else the character between the values of a multi-valued column.
  char separator = 0;
  // Multi-valued: the most values kept; with skip_overflow a line with more is malformed.
  int max_values = 64;
  bool skip_overflow = false;
};

struct TextSchema {
  char delimiter = '\t';
  // Every file's first line names the columns; it is checked against `column_names` (the names
  // the job used, "" for a column named by number) and never trained on.
  bool header = false;
  std::vector<std::string> column_names;
  int num_columns = 0;  // the columns a line must have
  int label_column = 0;
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
  bool SingleValued() const { return keys.size() + 1 == offsets.size(); }
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

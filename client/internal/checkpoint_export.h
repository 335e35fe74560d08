// `ps_ctl export`: one table's embeddings from a checkpoint on disk, in a file for users who serve
// or analyse them. Reads the checkpoint with common/checkpoint_reader.h, without a server.
// Private to ps_ctl.
#ifndef PS_CLIENT_INTERNAL_CHECKPOINT_EXPORT_H_
#define PS_CLIENT_INTERNAL_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {
namespace client_internal {

enum class ExportFormat {
  // Text, one line a row: the id in decimal, then the embedding's floats, each written with the
  // fewest digits that strtof reads back as the same float; tab-separated.
  kTsv,
  // A NumPy .npy file (format 1.0) of a 1-D structured array of shape (rows,) and dtype
  // [('id', '<u8'), ('emb', '<f4', (dim,))]: `a = np.load(f)`, then a['id'] holds the ids and
  // a['emb'] the (rows, dim) embeddings.
  kNpy,
};

// "tsv" or "npy"; INVALID_ARGUMENT otherwise.
absl::StatusOr<ExportFormat> ParseExportFormat(absl::string_view name);

struct ExportSummary {
  uint64_t rows = 0;
  uint32_t dim = 0;
};

// Writes the embeddings of `table` in the checkpoint in `folder` (the table's first dim floats of
// every row, not its optimizer's state) to the file `out`, sorted by id, in `format`. An
// incremental checkpoint is read with its chain (the bases beside `folder`, down to a full one):
// each row as the newest file of its shard's chain holds it, as a restore gives it. Checks every
// shard file of the chain against its manifest (size and XXH3-64) before writing anything; writes
// `out`.tmp, then renames it to `out`, so that `out` is either whole or as it was (the temporary
// file is removed on any error). Returns the rows written and the table's dim.
// NOT_FOUND if `folder` does not exist, or the checkpoint has no table `table` (naming those it
// has); FAILED_PRECONDITION if `folder` is not a complete checkpoint; DATA_LOSS naming the
// checkpoint when a base is missing or does not fit (ReadCheckpointChain), naming the file if a
// shard file is missing, differs from the manifest, is corrupt, or holds an id that another
// shard holds too; INTERNAL if `out` cannot be written.
absl::StatusOr<ExportSummary> ExportTable(const std::string& folder, const std::string& table,
                                          ExportFormat format, const std::string& out);

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_CHECKPOINT_EXPORT_H_

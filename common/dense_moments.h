// The moments of a delimited schema's STANDARDIZE columns that the job leaves to be computed: a
// dense column with `transform: STANDARDIZE` and neither `mean` nor `stddev` is standardised with
// the mean and standard deviation of its values in the first lines of the training data, computed
// once before the run by whoever hands the job out (ps_coordinator, which gives every worker the
// job with them filled in, so that all workers standardise alike), and by `ps_ctl validate` and
// `ps_ctl convert`, which read the same lines and so compute the same values.
#ifndef PS_COMMON_DENSE_MOMENTS_H_
#define PS_COMMON_DENSE_MOMENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace ps {

struct DenseMomentsOptions {
  // Lines read from the start of the training files, in the order of data.train_paths (globs
  // expanded, each file's header line not counted); >= 1. Default 1,000,000.
  int64_t max_lines = 1000000;
};

// What FillDenseMoments computed, one line per column, for the log:
//   data.schema.dense[2] (age): STANDARDIZE mean 30.0125 stddev 12.4031, from 1000000 lines
struct DenseMomentsReport {
  std::vector<std::string> lines;
  int64_t lines_read = 0;
  int64_t lines_skipped = 0;  // too few columns, or a value that is not a number
};

// Fills in `mean` and `stddev` (the population standard deviation) of every STANDARDIZE column of
// `job`'s delimited schema that has neither, from the first options.max_lines lines of its
// training files: an empty value counts as 0 (as the reader takes it), a line with too few columns
// or a value that is not a number is skipped (the reader skips it too). OK with nothing done when
// no column needs it. Otherwise OK with the moments set and *report filled; NOT_FOUND or
// PERMISSION_DENIED (naming the file) when a training file cannot be read; INVALID_ARGUMENT when
// the header lacks the column, or when a column has no usable line or no spread (stddev 0, which
// STANDARDIZE cannot divide by: give the moments in the job).
absl::Status FillDenseMoments(config::Job* job, const DenseMomentsOptions& options,
                              DenseMomentsReport* report);

// Whether `job` has a STANDARDIZE column whose moments FillDenseMoments would compute.
bool NeedsDenseMoments(const config::Job& job);

}  // namespace ps

#endif  // PS_COMMON_DENSE_MOMENTS_H_

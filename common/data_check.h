// The checks of a job's data before anything starts: that every file a worker will read exists
// and can be read, and how many steps the job will train, with a warning when they are too few to
// train well. `ps_ctl validate` and `ps_coordinator` (at start, before members join) run them.
//
// Which files a worker reads (worker/trainer.cc): every rank reads every training file (each step
// takes the next block of num_workers x batch_size lines, of which each rank parses its share;
// binary files are read only in the rank's share, but any file may hold it), and rank 0 the eval
// files at the end. A binary file's samples are counted from its header; a delimited schema's
// header line in each file is not a sample. So every rank's part is every file of data.train_paths,
// and rank 0's also every file of data.eval_paths. Paths and globs (common/data_paths.h) are taken
// from the checking process's current directory, which the messages name: a worker started
// elsewhere may see other files.
#ifndef PS_COMMON_DATA_CHECK_H_
#define PS_COMMON_DATA_CHECK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/job.pb.h"

namespace ps {

struct DataCheckOptions {
  // The job's file: messages start with it and, when its text can be read, the position of the
  // field they are about ("jobs/ctr.pbtxt:23:3: data.train_paths[0]: ..."). Default "": messages
  // start with "job: ".
  std::string job_path;
  // Who checks, for messages about relative paths ("relative to DIR, the current directory of
  // ps_ctl"). Default "this process".
  std::string checker = "this process";
  // Lines read from the start of a file to estimate its bytes per line (the first training file,
  // and each gzip file for its compression); >= 1. Default 1000.
  int64_t sample_lines = 1000;
  // Training data of at most this many bytes on disk is read whole and its lines counted, not
  // estimated; >= 0. Default 64 MiB.
  int64_t count_bytes = int64_t{64} << 20;
  // Jobs that train fewer steps than this are warned; >= 0 (0: never). Default 100.
  int64_t min_steps = 100;
};

// How many steps a job trains, from its training data. The trainer's count: a step takes the
// next block of batch_size x num_workers lines (every line counts, malformed ones too), an epoch
// is ceil(lines / block) steps, and the job is training.steps steps, else epochs (at least 1)
// epochs.
struct StepsEstimate {
  // Training files (globs expanded), their bytes on disk, and whether some are gzip.
  int files = 0;
  int64_t bytes = 0;
  bool gzip = false;
  // Lines of one pass over the training files; `exact` when every file was read to its end,
  // else estimated from the bytes per line of a file's first lines (sample_lines), and for gzip
  // files from the compression of their first lines.
  int64_t lines = 0;
  bool exact = false;
  int64_t batch_size = 0;
  int64_t workers = 0;
  int64_t steps_per_epoch = 0;
  // training.epochs (1 when neither it nor training.steps is set); 0 when training.steps is set.
  int64_t epochs = 0;
  // The job's steps: steps_per_epoch x epochs, or training.steps.
  int64_t total_steps = 0;

  // "8000 lines (counted) of 2 files, 2.2 MB: 8 steps an epoch (8000 lines / (512 x 2 workers)),
  // 16 steps in all (2 epochs)".
  std::string Describe() const;
};

// What CheckJobData found. Errors and warnings are whole sentences starting with the job's file
// (and position); callers add "warning: " or their name in front.
struct DataCheckResult {
  // Files that cannot be read, globs that match nothing, training data without a line, a
  // delimited schema's column missing from (or named twice in) a file's header line. A job with
  // errors must not start: its workers would fail.
  std::vector<std::string> errors;
  // A job of fewer than min_steps steps, saying what to change.
  std::vector<std::string> warnings;
  // When the job has training files and every one could be read.
  std::optional<StepsEstimate> estimate;

  bool ok() const { return errors.empty(); }
};

// Checks the files of `job`'s data section (nothing, without train_paths: a job for clients
// only) and estimates its steps. Reads every training file whole when they are at most
// count_bytes together, else the first sample_lines lines of the first one and of each gzip file
// and the first bytes of the others; the first bytes of each eval file. Thread-safe.
DataCheckResult CheckJobData(const config::Job& job, const DataCheckOptions& options = {});

}  // namespace ps

#endif  // PS_COMMON_DATA_CHECK_H_

// Loading and validating a training job (proto/job.proto) from protobuf text format.
//
// A job with a mistake is refused as a whole, with an INVALID_ARGUMENT status whose message starts
// with `path:line:col: ` and says what is wrong, e.g.
//   jobs/ctr.pbtxt:12:5: tables[1] "item": dim must be between 1 and 4096, got 0
// Syntax errors carry protobuf's own position and message; semantic errors point at the offending
// field (or, for a missing field, at the message that lacks it).
#ifndef PS_COMMON_JOB_CONFIG_H_
#define PS_COMMON_JOB_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace ps {

// Parses and validates `text`, naming it `path` in error messages.
// Returns the job on success; INVALID_ARGUMENT with `path:line:col: message` on the first syntax
// error or on the first semantic error (in file order of the checks: tables, model, data,
// training, cluster).
absl::StatusOr<config::Job> ParseJob(absl::string_view text, absl::string_view path);

// Reads and parses the file at `path`. NOT_FOUND if it does not exist, PERMISSION_DENIED or
// FAILED_PRECONDITION if it cannot be read, otherwise as ParseJob.
absl::StatusOr<config::Job> LoadJobFile(const std::string& path);

// Checks the semantic rules of a job built in code (no positions: the message starts `job: `).
// OK or INVALID_ARGUMENT.
absl::Status ValidateJob(const config::Job& job);

// Where element `index` of the field `field_path` (field names from the job's root, joined by
// '.', e.g. "data.train_paths" or "training.batch_size"; `index` -1 for a field that is not
// repeated) was written in the job text `text`: "path:line:col" (1-based), for messages about a
// job that loaded. `path` alone when the text does not parse, a name is not a field, or the field
// was not written (an element of a list written `[a, b]` gets the list's position).
std::string JobFieldPosition(absl::string_view text, absl::string_view path,
                             absl::string_view field_path, int index = -1);

// Protobuf's text parser reports an unknown field or enum value at the token after it, which may
// be on the next line. When `message` quotes the offending name (its last quoted word), moves the
// 0-based (*line, *column) back to where that name was written in `text`, the last time before
// the reported position; otherwise leaves them. For every config file parsed from text.
void PointAtQuotedName(const std::string& text, const std::string& message, int* line, int* column);

// The names of the optimizers the servers implement: "sgd", "adagrad", "rowwise_adagrad", "adam",
// "ftrl" (common/optimizer.h).
bool IsKnownOptimizer(absl::string_view type);

}  // namespace ps

#endif  // PS_COMMON_JOB_CONFIG_H_

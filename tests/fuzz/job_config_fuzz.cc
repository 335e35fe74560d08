// libFuzzer target: the job-file loader (common/job_config.h) over arbitrary text. Every input
// must give a job or an INVALID_ARGUMENT status, never a crash; a job that loads must also pass
// ValidateJob, and its fields' positions must be computable.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/job_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<ps::config::Job> job = ps::ParseJob(text, "fuzz.pbtxt");
  if (!job.ok()) {
    if (job.status().code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  if (!ps::ValidateJob(*job).ok()) __builtin_trap();
  ps::JobFieldPosition(text, "fuzz.pbtxt", "tables", 0);
  ps::JobFieldPosition(text, "fuzz.pbtxt", "data.train_paths", 0);
  ps::JobFieldPosition(text, "fuzz.pbtxt", "training.batch_size");
  return 0;
}

// Argument checks shared by the AllReduce factories.
#ifndef PS_WORKER_COLLECTIVE_INTERNAL_GROUP_ARGS_H_
#define PS_WORKER_COLLECTIVE_INTERNAL_GROUP_ARGS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"

namespace ps {
namespace worker {
namespace internal {

// OK, or INVALID_ARGUMENT naming the first argument of a group's factory that is wrong.
inline absl::Status ValidateGroupArgs(const CoordinatorClient* coordinator,
                                      const std::string& group, int rank, int size,
                                      absl::Duration timeout) {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat("group size ", size, " < 1"));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " outside [0, ", size, ")"));
  }
  if (group.empty()) return absl::InvalidArgumentError("empty group name");
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout must be positive, got ", absl::FormatDuration(timeout)));
  }
  if (size > 1 && coordinator == nullptr) {
    return absl::InvalidArgumentError("a group of more than one rank needs a coordinator");
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_INTERNAL_GROUP_ARGS_H_

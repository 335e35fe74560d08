// The one place where grpc::Status and absl::Status are converted. The canonical codes are the same
// numbers in both; messages are kept as they are.
#ifndef PS_COMMON_GRPC_STATUS_H_
#define PS_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace ps {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace ps

#endif  // PS_COMMON_GRPC_STATUS_H_

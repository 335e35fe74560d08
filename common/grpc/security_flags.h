// The flags every daemon and tool takes to secure its gRPC traffic: --tls_cert, --tls_key,
// --tls_ca and --token_file (see security.h for what each does). Linking this library defines
// them; a binary that links it must pass them on through SecurityFromFlags.
#ifndef PS_COMMON_GRPC_SECURITY_FLAGS_H_
#define PS_COMMON_GRPC_SECURITY_FLAGS_H_

#include "absl/status/statusor.h"
#include "common/grpc/auth.h"
#include "common/grpc/security.h"

namespace ps {
namespace grpc_util {

// The files the flags name.
SecurityFiles SecurityFilesFromFlags();

// Security::Load of the flags' files, presenting `presents`'s token.
absl::StatusOr<Security> SecurityFromFlags(TokenRole presents);

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_SECURITY_FLAGS_H_

// The flags every daemon and tool takes to secure its gRPC traffic: --tls_cert, --tls_key,
// --tls_ca and --token_file (see security.h for what each does). Linking this library defines
// them; a binary that links it must pass them on through SecurityFromFlags.
#ifndef PS_COMMON_GRPC_SECURITY_FLAGS_H_
#define PS_COMMON_GRPC_SECURITY_FLAGS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grpc/auth.h"
#include "common/grpc/security.h"

namespace ps {
namespace grpc_util {

// The files the flags name.
SecurityFiles SecurityFilesFromFlags();

// Security::Load of the flags' files, presenting `presents`'s token.
absl::StatusOr<Security> SecurityFromFlags(TokenRole presents);

// What a daemon (the coordinator, a server) serves and dials with.
struct DaemonSecurity {
  Security security;
  // Its server's credentials (Security::ServerCredentials of `program`).
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
  // Its channels' credentials, presenting the admin token (Security::ChannelCredentials).
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
};

// The flags' security for the daemon `program` ("ps_server"): SecurityFromFlags(kAdmin)'s errors,
// and ServerCredentials's.
absl::StatusOr<DaemonSecurity> DaemonSecurityFromFlags(const std::string& program);

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_SECURITY_FLAGS_H_

#include "common/grpc/security_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) this process serves with and presents as a client; with "
          "--tls_key, turns TLS on (then nothing falls back to plaintext)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s) that peers' certificates must be signed by: clients verify "
          "servers against it; a server given it requires and verifies client certificates "
          "(mutual TLS)");
ABSL_FLAG(std::string, token_file, "",
          "bearer tokens, one \"ROLE TOKEN\" line each (ROLE admin or worker); daemons accept "
          "every token of the file, and each process presents one of them on its calls; needs TLS");

namespace ps {
namespace grpc_util {

SecurityFiles SecurityFilesFromFlags() {
  SecurityFiles files;
  files.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  files.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  files.tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
  files.token_file = absl::GetFlag(FLAGS_token_file);
  return files;
}

absl::StatusOr<Security> SecurityFromFlags(TokenRole presents) {
  return Security::Load(SecurityFilesFromFlags(), presents);
}

absl::StatusOr<DaemonSecurity> DaemonSecurityFromFlags(const std::string& program) {
  DaemonSecurity daemon;
  PS_ASSIGN_OR_RETURN(daemon.security, SecurityFromFlags(TokenRole::kAdmin));
  PS_ASSIGN_OR_RETURN(daemon.server_credentials, daemon.security.ServerCredentials(program));
  daemon.channel_credentials = daemon.security.ChannelCredentials();
  return daemon;
}

}  // namespace grpc_util
}  // namespace ps

// What a process secures its gRPC traffic with: TLS (tls_options.h) and bearer tokens (auth.h),
// loaded once from the flags --tls_cert, --tls_key, --tls_ca and --token_file, and turned into
// its server's credentials (with the token check) and its channels' credentials (presenting its
// token).
#ifndef PS_COMMON_GRPC_SECURITY_H_
#define PS_COMMON_GRPC_SECURITY_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "common/grpc/auth.h"
#include "common/grpc/tls_options.h"

namespace ps {
namespace grpc_util {

// What to add to an UNAVAILABLE error of a call: a failed TLS handshake looks the same to the
// caller as nobody listening, so this names the likeliest mismatch for a caller that dials with
// TLS (`tls`) or in plaintext.
std::string UnreachableHint(bool tls);

// The files a process is given. Empty: not given.
struct SecurityFiles {
  TlsFiles tls;
  std::string token_file;  // --token_file
};

// A process's TLS material and tokens. Thread-compatible; the credentials it hands out are
// thread-safe.
class Security {
 public:
  // Plaintext, no tokens.
  Security() = default;

  // Loads `files`; `presents` is the role whose token this process presents on its calls (see
  // PresentedToken: daemons and ps_ctl present admin, workers and clients worker). Errors are
  // LoadTlsOptions's and LoadTokenFile's, and FAILED_PRECONDITION for a token file without TLS
  // (a bearer token must not cross the network in plaintext).
  static absl::StatusOr<Security> Load(const SecurityFiles& files, TokenRole presents);

  // Whether calls use TLS / carry a token.
  bool tls() const { return tls_.enabled(); }
  bool tokens() const { return token_file_.has_value(); }

  // The credentials of a server of `program` ("ps_server"): plaintext, TLS, or mutual TLS (see
  // ServerCredentials in tls_options.h), checking every call's token when there is a token file.
  // FAILED_PRECONDITION when TLS is on without a certificate and key to serve with.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
      const std::string& program) const;

  // The credentials of a channel: plaintext or TLS (see ChannelCredentials in tls_options.h),
  // carrying the presented token on every call when there is a token file.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

  // One line for the start-up log: "plaintext", "TLS", "mutual TLS, tokens (3 accepted,
  // presents admin)".
  std::string Describe() const;

 private:
  TlsOptions tls_;
  absl::optional<TokenFile> token_file_;
  absl::optional<Token> presented_;
};

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_SECURITY_H_

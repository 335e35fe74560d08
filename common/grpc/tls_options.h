// TLS material of a daemon or tool (--tls_cert, --tls_key, --tls_ca), loaded once from PEM files
// and turned into the credentials of its server and of its channels.
//
// Server side: with a certificate and key it serves TLS; with a CA too, mutual TLS (a client
// certificate signed by that CA is required). Client side: with a CA it dials TLS and verifies the
// server against that CA; with a certificate and key it presents them as its client certificate.
// Anything set means TLS: a process given TLS material never falls back to plaintext.
#ifndef PS_COMMON_GRPC_TLS_OPTIONS_H_
#define PS_COMMON_GRPC_TLS_OPTIONS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ps {
namespace grpc_util {

// Paths of the PEM files, as given by the flags. Empty: not given.
struct TlsFiles {
  std::string cert_file;  // --tls_cert: this process's certificate (chain)
  std::string key_file;   // --tls_key: its private key
  std::string ca_file;    // --tls_ca: the CA that peers' certificates must be signed by
};

// The PEM contents. Thread-compatible.
struct TlsOptions {
  std::string cert_pem;
  std::string key_pem;
  std::string ca_pem;

  // Whether any TLS material is set (then every server and channel uses TLS).
  bool enabled() const { return !cert_pem.empty() || !key_pem.empty() || !ca_pem.empty(); }
};

// Reads the files named in `files`. Returns empty options when no file is named. Errors name the
// flag and the file: INVALID_ARGUMENT when a certificate comes without its key or a key without
// its certificate, or when a file holds no PEM block ("-----BEGIN "); NOT_FOUND for a missing file;
// PERMISSION_DENIED or INTERNAL for one that cannot be read.
absl::StatusOr<TlsOptions> LoadTlsOptions(const TlsFiles& files);

// The credentials of a server: plaintext when !tls.enabled(); else TLS with tls's certificate and
// key, and mutual TLS when it has a CA. FAILED_PRECONDITION when TLS is enabled but there is no
// certificate and key to serve with.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsOptions& tls);

// The credentials of a channel: plaintext when !tls.enabled(); else TLS verifying the server
// against tls's CA (the system's roots when there is none), presenting tls's certificate and key
// when it has them.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsOptions& tls);

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_TLS_OPTIONS_H_

#include "common/grpc/tls_options.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace grpc_util {
namespace {

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string what = absl::StrCat("--", flag, " ", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(what);
    if (error == EACCES) return absl::PermissionDeniedError(what);
    return absl::InternalError(what);
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::InternalError(absl::StrCat("--", flag, " ", path, ": cannot be read"));
  }
  std::string pem = contents.str();
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": not a PEM file (no \"-----BEGIN \" line)"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<TlsOptions> LoadTlsOptions(const TlsFiles& files) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        files.cert_file.empty() ? "--tls_key given without --tls_cert"
                                : "--tls_cert given without --tls_key");
  }
  TlsOptions tls;
  const struct {
    const char* flag;
    const std::string& path;
    std::string* pem;
  } wanted[] = {{"tls_cert", files.cert_file, &tls.cert_pem},
                {"tls_key", files.key_file, &tls.key_pem},
                {"tls_ca", files.ca_file, &tls.ca_pem}};
  for (const auto& w : wanted) {
    if (w.path.empty()) continue;
    absl::StatusOr<std::string> pem = ReadPem(w.flag, w.path);
    if (!pem.ok()) return pem.status();
    *w.pem = *std::move(pem);
  }
  return tls;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert_pem.empty() || tls.key_pem.empty()) {
    return absl::FailedPreconditionError(
        "a TLS server needs --tls_cert and --tls_key (only --tls_ca was given)");
  }
  grpc::SslServerCredentialsOptions options(
      tls.ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                         : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.ca_pem;
  options.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca_pem;
  options.pem_private_key = tls.key_pem;
  options.pem_cert_chain = tls.cert_pem;
  return grpc::SslCredentials(options);
}

}  // namespace grpc_util
}  // namespace ps

#include "common/grpc/security.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace grpc_util {

std::string UnreachableHint(bool tls) {
  return tls ? "this process dials with TLS: the server must serve TLS with a certificate of "
               "--tls_ca's CA naming the address dialled and, where it requires client "
               "certificates, accept this process's --tls_cert (of its CA, not expired)"
             : "this process dials in plaintext: a cluster that serves TLS needs --tls_ca here "
               "(and --tls_cert/--tls_key where it requires client certificates)";
}

absl::StatusOr<Security> Security::Load(const SecurityFiles& files, TokenRole presents) {
  Security security;
  PS_ASSIGN_OR_RETURN(security.tls_, LoadTlsOptions(files.tls));
  if (files.token_file.empty()) return security;
  if (!security.tls_.enabled()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--token_file ", files.token_file,
        " needs TLS (--tls_cert and --tls_key on daemons, --tls_ca on clients): a bearer token "
        "must not cross the network in plaintext"));
  }
  PS_ASSIGN_OR_RETURN(TokenFile file, LoadTokenFile(files.token_file));
  PS_ASSIGN_OR_RETURN(Token token, PresentedToken(file, presents));
  security.token_file_ = std::move(file);
  security.presented_ = std::move(token);
  return security;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Security::ServerCredentials(
    const std::string& program) const {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                      grpc_util::ServerCredentials(tls_));
  if (token_file_.has_value()) {
    credentials->SetAuthMetadataProcessor(
        std::make_shared<TokenAuthProcessor>(program, *token_file_));
  }
  return credentials;
}

std::shared_ptr<grpc::ChannelCredentials> Security::ChannelCredentials() const {
  std::shared_ptr<grpc::ChannelCredentials> channel = grpc_util::ChannelCredentials(tls_);
  if (!presented_.has_value()) return channel;
  return grpc::CompositeChannelCredentials(channel,
                                           grpc::AccessTokenCredentials(presented_->secret));
}

std::string Security::Describe() const {
  if (!tls_.enabled()) return "plaintext";
  std::string out = tls_.ca_pem.empty() || tls_.cert_pem.empty()
                        ? "TLS"
                        : "mutual TLS (peers' certificates verified against --tls_ca)";
  if (token_file_.has_value()) {
    absl::StrAppend(&out, ", bearer tokens (", token_file_->tokens.size(),
                    " accepted; presents its ", TokenRoleName(presented_->role), " token)");
  }
  return out;
}

}  // namespace grpc_util
}  // namespace ps

#include "common/grpc/auth.h"

#include <grpc/grpc_security_constants.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps {
namespace grpc_util {
namespace {

// The auth context property that carries the caller's role to the service.
constexpr char kRoleProperty[] = "ps_token_role";

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 512;

// Peers whose refusals are logged; later ones are counted, not logged, so that a flood of new
// peers cannot grow the log or the set without bound.
constexpr size_t kMaxLoggedPeers = 1024;

// What a worker token may call: the data path, the rendezvous store, its own membership and
// clocks. Register (as a server), StartCheckpoint (other than the job's end-of-training one and
// early stopping's best model) and RestoreCheckpoint (other than early stopping's) are checked
// again by the coordinator's service with RequireAdmin.
constexpr absl::string_view kWorkerMethods[] = {
    "/ps.rpc.ParameterServer/Pull",     "/ps.rpc.ParameterServer/Push",
    "/ps.rpc.ParameterServer/PullDense", "/ps.rpc.ParameterServer/PushDense",
    "/ps.rpc.ParameterServer/EndStep",
    "/ps.rpc.ParameterServer/OpenSharedRegion",
    "/ps.rpc.ParameterServer/CloseSharedRegion",
    "/ps.rpc.Coordinator/Register",
    "/ps.rpc.Coordinator/GetMemberIds", "/ps.rpc.Coordinator/Heartbeat",
    "/ps.rpc.Coordinator/Leave",        "/ps.rpc.Coordinator/GetShardMap",
    "/ps.rpc.Coordinator/ReportClock",  "/ps.rpc.Coordinator/WaitClock",
    "/ps.rpc.Coordinator/KvSet",        "/ps.rpc.Coordinator/KvGet",
    "/ps.rpc.Coordinator/KvWait",       "/ps.rpc.Coordinator/ReportFailure",
    "/ps.rpc.Coordinator/StartCheckpoint", "/ps.rpc.Coordinator/RestoreCheckpoint",
};

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
         c == '~' || c == '+' || c == '/' || c == '=';
}

// Compares in time that depends on the lengths only, so that a caller cannot learn a token's
// prefix from how long a refusal takes.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Who the peer is, for the log: its certificate's subject when it showed one, else "a peer
// without a client certificate".
std::string PeerName(const grpc::AuthContext& context) {
  for (const char* property : {GRPC_X509_SUBJECT_PROPERTY_NAME, GRPC_X509_CN_PROPERTY_NAME}) {
    std::vector<grpc::string_ref> values = context.FindPropertyValues(property);
    if (!values.empty()) {
      return absl::StrCat("peer with certificate \"",
                          absl::string_view(values[0].data(), values[0].size()), "\"");
    }
  }
  return "a peer without a client certificate";
}

}  // namespace

const char* TokenRoleName(TokenRole role) {
  return role == TokenRole::kAdmin ? "admin" : "worker";
}

absl::StatusOr<TokenFile> LoadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    const int error = errno;
    const std::string what = absl::StrCat("--token_file ", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(what);
    if (error == EACCES) return absl::PermissionDeniedError(what);
    return absl::InternalError(what);
  }
  TokenFile file;
  file.path = path;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", what));
    };
    std::vector<absl::string_view> fields =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return bad(absl::StrCat("expected \"ROLE TOKEN\" (ROLE is admin or worker), got ",
                              fields.size(), " fields"));
    }
    Token token;
    if (fields[0] == "admin") {
      token.role = TokenRole::kAdmin;
    } else if (fields[0] == "worker") {
      token.role = TokenRole::kWorker;
    } else {
      return bad(absl::StrCat("unknown role \"", fields[0], "\" (admin or worker)"));
    }
    const absl::string_view secret = fields[1];
    if (secret.size() < kMinTokenLength || secret.size() > kMaxTokenLength) {
      return bad(absl::StrCat("the token has ", secret.size(), " characters; ", kMinTokenLength,
                              " to ", kMaxTokenLength, " are allowed"));
    }
    for (char c : secret) {
      if (!IsTokenChar(c)) {
        return bad("the token has a character other than A-Z a-z 0-9 - . _ ~ + / =");
      }
    }
    for (const Token& earlier : file.tokens) {
      if (earlier.secret == secret) return bad("this token is listed twice");
    }
    token.secret = std::string(secret);
    file.tokens.push_back(std::move(token));
  }
  if (in.bad()) return absl::InternalError(absl::StrCat(path, ": cannot be read"));
  if (file.tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no token (lines \"ROLE TOKEN\")"));
  }
  return file;
}

absl::StatusOr<Token> PresentedToken(const TokenFile& file, TokenRole wanted) {
  for (const Token& token : file.tokens) {
    if (token.role == wanted) return token;
  }
  if (!file.tokens.empty()) return file.tokens.front();
  return absl::FailedPreconditionError(
      absl::StrCat("--token_file ", file.path, ": no token to present on this process's calls"));
}

bool MayCall(TokenRole role, absl::string_view method) {
  if (role == TokenRole::kAdmin) return true;
  for (absl::string_view allowed : kWorkerMethods) {
    if (method == allowed) return true;
  }
  return false;
}

absl::optional<TokenRole> CallerRole(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return absl::nullopt;
  const std::vector<grpc::string_ref> values = auth->FindPropertyValues(kRoleProperty);
  if (values.empty()) return absl::nullopt;
  return values[0] == "admin" ? TokenRole::kAdmin : TokenRole::kWorker;
}

absl::Status RequireAdmin(const grpc::ServerContextBase& context, absl::string_view what) {
  const absl::optional<TokenRole> role = CallerRole(context);
  if (role.has_value() && *role != TokenRole::kAdmin) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " needs an admin token; this call came with a worker token"));
  }
  return absl::OkStatus();
}

TokenAuthProcessor::TokenAuthProcessor(std::string program, const TokenFile& file)
    : program_(std::move(program)), tokens_(file.tokens) {}

grpc::Status TokenAuthProcessor::Process(const InputMetadata& auth_metadata,
                                         grpc::AuthContext* context,
                                         OutputMetadata* consumed_auth_metadata,
                                         OutputMetadata* response_metadata) {
  absl::string_view method;
  if (auto path = auth_metadata.find(":path"); path != auth_metadata.end()) {
    method = absl::string_view(path->second.data(), path->second.size());
  }
  const Token* matched = nullptr;
  bool had_token = false;
  const auto range = auth_metadata.equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    absl::string_view value(it->second.data(), it->second.size());
    if (!absl::ConsumePrefix(&value, "Bearer ")) continue;
    had_token = true;
    for (const Token& token : tokens_) {
      if (SameSecret(value, token.secret)) matched = &token;
    }
    consumed_auth_metadata->insert({std::string(it->first.data(), it->first.size()),
                                    std::string(it->second.data(), it->second.size())});
  }
  if (matched == nullptr) {
    const std::string peer = PeerName(*context);
    const char* const why = had_token ? "a token that is not in --token_file" : "no token";
    LogOnce(peer, why,
            absl::StrCat(program_, ": refused ", peer, " (", why, "; calling ", method,
                         "): UNAUTHENTICATED; later refusals of this peer are not logged"));
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        had_token ? "the bearer token is not accepted by this server"
                                  : "this server needs a bearer token (--token_file)");
  }
  if (!MayCall(matched->role, method)) {
    const std::string peer = PeerName(*context);
    LogOnce(peer, method,
            absl::StrCat(program_, ": refused ", peer, " with a ", TokenRoleName(matched->role),
                         " token calling ", method,
                         ": PERMISSION_DENIED; later refusals of this peer for it are not logged"));
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat(method, " needs an admin token; this call came with a ",
                                     TokenRoleName(matched->role), " token"));
  }
  context->AddProperty(kRoleProperty, TokenRoleName(matched->role));
  return grpc::Status::OK;
}

void TokenAuthProcessor::LogOnce(const std::string& peer, absl::string_view kind,
                                 const std::string& message) {
  absl::MutexLock lock(&mu_);
  if (logged_.size() >= kMaxLoggedPeers) return;
  if (!logged_.insert(absl::StrCat(peer, "\n", kind)).second) return;
  std::fprintf(stderr, "%s\n", message.c_str());
  if (logged_.size() == kMaxLoggedPeers) {
    std::fprintf(stderr, "%s: %zu peers refused; further refusals are not logged\n",
                 program_.c_str(), kMaxLoggedPeers);
  }
}

}  // namespace grpc_util
}  // namespace ps

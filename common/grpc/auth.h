// Bearer tokens (--token_file): who may call what.
//
// A token file lists tokens with their role, one per line:
//
//   # role   token (16 to 512 characters of A-Z a-z 0-9 and - . _ ~ + / =)
//   admin    4f0c9b1e2d7a8c3f5e6b7a9d0c1e2f3a
//   worker   9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d
//
// A `worker` token may pull, push, end steps, use the rendezvous store and keep its own
// membership (register as a worker or client, heartbeat, leave), and take the job's
// end-of-training checkpoint. An `admin` token may do all that and everything else: register
// servers, replicate, write and start checkpoints, read statuses. Daemons accept every token of
// their file; a process presents one token of its file on each call (see PresentedToken).
#ifndef PS_COMMON_GRPC_AUTH_H_
#define PS_COMMON_GRPC_AUTH_H_

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/server_context.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/optional.h"

namespace ps {
namespace grpc_util {

enum class TokenRole { kWorker, kAdmin };

// "worker" or "admin".
const char* TokenRoleName(TokenRole role);

// One line of a token file.
struct Token {
  TokenRole role = TokenRole::kWorker;
  std::string secret;
};

// The tokens of a token file, in the file's order. Thread-compatible.
struct TokenFile {
  std::string path;
  std::vector<Token> tokens;
};

// Reads a token file. Blank lines and lines starting with '#' are skipped. Errors name the file
// and the line (never the token): NOT_FOUND for a missing file, PERMISSION_DENIED for one that
// cannot be read, INVALID_ARGUMENT for a line that is not "ROLE TOKEN", an unknown role, a token
// that is too short, too long or has other characters, a token listed twice, or a file with no
// token.
absl::StatusOr<TokenFile> LoadTokenFile(const std::string& path);

// Which token of `file` a process presents: the first of role `wanted`, else the file's first
// (a worker's file given to ps_ctl: the servers then refuse what needs an admin, saying so).
// FAILED_PRECONDITION naming the file when it has no token.
absl::StatusOr<Token> PresentedToken(const TokenFile& file, TokenRole wanted);

// Whether `role` may call the method with the full name `method`
// ("/ps.rpc.ParameterServer/Pull"). Methods not named in auth.cc are admin's only.
bool MayCall(TokenRole role, absl::string_view method);

// The role of the token a call came with: absent when the server checks no tokens (then any
// caller that reached the service may do anything its transport allows).
absl::optional<TokenRole> CallerRole(const grpc::ServerContextBase& context);

// PERMISSION_DENIED ("<what> needs an admin token") when the call came with a worker token,
// else OK. For the calls a worker may make only in part (a worker registering as a server).
absl::Status RequireAdmin(const grpc::ServerContextBase& context, absl::string_view what);

// Checks the bearer token of every call of a TLS server ("authorization: Bearer <token>") before
// the service sees it: UNAUTHENTICATED when there is none or it is not in the file, and
// PERMISSION_DENIED when its role may not call the method (MayCall). On success the role is set
// on the call's auth context (CallerRole) and the token is taken out of the metadata the service
// sees. Each refusal is logged to stderr once per peer and kind of refusal, naming the peer (its
// certificate's subject, or its address) and never the token. Thread-safe.
class TokenAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // `program` prefixes the log lines ("ps_server").
  TokenAuthProcessor(std::string program, const TokenFile& file);

  // The check is a few comparisons: done on gRPC's own thread.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  // Logs `message` unless this peer was already logged for `kind`.
  void LogOnce(const std::string& peer, absl::string_view kind, const std::string& message);

  const std::string program_;
  const std::vector<Token> tokens_;

  absl::Mutex mu_;
  absl::flat_hash_set<std::string> logged_ ABSL_GUARDED_BY(mu_);
};

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_AUTH_H_

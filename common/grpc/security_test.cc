#include "common/grpc/security.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/grpc/auth.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/kv_set_service_for_test.h"
#include "common/grpc/server_builder.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/testing/credentials.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace grpc_util {
namespace {

constexpr char kAdmin[] = "adminadminadminadmin0123";
constexpr char kWorker[] = "workerworkerworker-0123_~+/=";

std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("LoadTokenFile reads roles and tokens and names file and line of a mistake",
          "[grpc][auth]") {
  absl::StatusOr<std::unique_ptr<testing::ScopedTempDir>> dir =
      testing::ScopedTempDir::Create("security_test");
  REQUIRE(dir.ok());
  const std::string path = (*dir)->path() + "/tokens";

  WriteFile(path, absl::StrCat("# comment\n\n  admin  ", kAdmin, "\nworker\t", kWorker, "\n"));
  absl::StatusOr<TokenFile> file = LoadTokenFile(path);
  REQUIRE(file.ok());
  REQUIRE(file->tokens.size() == 2);
  CHECK(file->tokens[0].role == TokenRole::kAdmin);
  CHECK(file->tokens[0].secret == kAdmin);
  CHECK(file->tokens[1].role == TokenRole::kWorker);
  CHECK(file->tokens[1].secret == kWorker);
  CHECK(PresentedToken(*file, TokenRole::kWorker)->secret == kWorker);
  CHECK(PresentedToken(*file, TokenRole::kAdmin)->secret == kAdmin);

  // A worker's file given to a process that presents admin: the worker token goes, and the
  // servers refuse what needs an admin.
  WriteFile(path, absl::StrCat("worker ", kWorker, "\n"));
  file = LoadTokenFile(path);
  REQUIRE(file.ok());
  CHECK(PresentedToken(*file, TokenRole::kAdmin)->secret == kWorker);
  CHECK(PresentedToken(TokenFile(), TokenRole::kAdmin).status().code() ==
        absl::StatusCode::kFailedPrecondition);

  struct Bad {
    std::string text;
    std::string message;
  };
  const Bad bad[] = {
      {absl::StrCat("admin ", kAdmin, " extra\n"),
       ":1: expected \"ROLE TOKEN\" (ROLE is admin or worker), got 3 fields"},
      {absl::StrCat("# x\nroot ", kAdmin, "\n"), ":2: unknown role \"root\" (admin or worker)"},
      {"worker short\n", ":1: the token has 5 characters; 16 to 512 are allowed"},
      {"worker abcdefghijklmnop\"q\n",
       ":1: the token has a character other than A-Z a-z 0-9 - . _ ~ + / ="},
      {absl::StrCat("admin ", kAdmin, "\nworker ", kAdmin, "\n"), ":2: this token is listed twice"},
      {"# nothing\n", ": no token (lines \"ROLE TOKEN\")"},
  };
  for (const Bad& b : bad) {
    WriteFile(path, b.text);
    const absl::Status status = LoadTokenFile(path).status();
    INFO(b.text);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(status.message() == path + b.message);
    // The token itself is never in an error.
    CHECK(status.message().find(kAdmin) == absl::string_view::npos);
  }
  const absl::Status missing = LoadTokenFile(path + ".missing").status();
  CHECK(missing.code() == absl::StatusCode::kNotFound);
}

TEST_CASE("MayCall gives a worker token the data path and an admin token everything",
          "[grpc][auth]") {
  for (const char* method :
       {"/ps.rpc.ParameterServer/Pull", "/ps.rpc.ParameterServer/Push",
        "/ps.rpc.ParameterServer/EndStep", "/ps.rpc.ParameterServer/OpenSharedRegion",
        "/ps.rpc.ParameterServer/CloseSharedRegion", "/ps.rpc.Coordinator/KvWait",
        "/ps.rpc.Coordinator/Register", "/ps.rpc.Coordinator/Heartbeat"}) {
    CHECK(MayCall(TokenRole::kWorker, method));
    CHECK(MayCall(TokenRole::kAdmin, method));
  }
  for (const char* method :
       {"/ps.rpc.ParameterServer/Replicate", "/ps.rpc.ParameterServer/WriteCheckpoint",
        "/ps.rpc.ParameterServer/GetStatus", "/ps.rpc.Coordinator/GetStatus",
        "/ps.rpc.Coordinator/GetServerStatuses", "/grpc.health.v1.Health/Check", ""}) {
    CHECK_FALSE(MayCall(TokenRole::kWorker, method));
    CHECK(MayCall(TokenRole::kAdmin, method));
  }
}

// Calls `method` of a KvSetService (KvSet answers OK, the rest UNIMPLEMENTED) at `address`.
grpc::Status Call(const std::string& address, const Security& security, bool kv_set) {
  ChannelOptions options = CoordinatorChannelOptions();
  options.credentials = security.ChannelCredentials();
  auto stub = rpc::Coordinator::NewStub(NewChannel(address, options));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (kv_set) {
    rpc::KvSetResponse response;
    return stub->KvSet(&context, rpc::KvSetRequest(), &response);
  }
  rpc::ClusterStatus response;
  return stub->GetStatus(&context, rpc::StatusRequest(), &response);
}

TEST_CASE("a TLS server with a token file checks every call's token and role", "[grpc][auth]") {
  absl::StatusOr<std::unique_ptr<testing::ScopedTempDir>> dir =
      testing::ScopedTempDir::Create("security_test");
  REQUIRE(dir.ok());
  absl::StatusOr<testing::TestCredentials> made = testing::MakeTestCredentials((*dir)->path());
  REQUIRE(made.ok());
  const testing::TestCredentials& c = *made;

  auto load = [](const std::string& cert, const std::string& key, const std::string& ca,
                 const std::string& tokens, TokenRole presents) {
    SecurityFiles files;
    files.tls = {cert, key, ca};
    files.token_file = tokens;
    absl::StatusOr<Security> security = Security::Load(files, presents);
    REQUIRE(security.ok());
    return *security;
  };
  const Security server = load(c.node_cert, c.node_key, c.ca, c.tokens, TokenRole::kAdmin);
  CHECK(server.tls());
  CHECK(server.tokens());
  CHECK(server.Describe() ==
        "mutual TLS (peers' certificates verified against --tls_ca), bearer tokens (2 accepted; "
        "presents its admin token)");

  KvSetService service;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      server.ServerCredentials("security_test");
  REQUIRE(credentials.ok());
  options.credentials = *credentials;
  absl::StatusOr<StartedServer> started = StartServer(std::move(options), {&service});
  REQUIRE(started.ok());
  const std::string address = absl::StrCat("127.0.0.1:", started->port);

  const Security admin = load(c.client_cert, c.client_key, c.ca, c.tokens, TokenRole::kAdmin);
  const Security worker =
      load(c.client_cert, c.client_key, c.ca, c.worker_token, TokenRole::kWorker);
  const Security no_token = load(c.client_cert, c.client_key, c.ca, "", TokenRole::kWorker);
  const std::string wrong_path =
      WriteFile((*dir)->path() + "/wrong", "admin wrongwrongwrongwrong\n");
  const Security wrong = load(c.client_cert, c.client_key, c.ca, wrong_path, TokenRole::kAdmin);

  // KvSet is a worker's call; GetStatus an admin's (the service itself answers UNIMPLEMENTED).
  CHECK(Call(address, worker, true).ok());
  CHECK(Call(address, admin, true).ok());
  CHECK(Call(address, admin, false).error_code() == grpc::StatusCode::UNIMPLEMENTED);
  const grpc::Status denied = Call(address, worker, false);
  CHECK(denied.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(denied.error_message() ==
        "/ps.rpc.Coordinator/GetStatus needs an admin token; this call came with a worker token");
  const grpc::Status missing = Call(address, no_token, true);
  CHECK(missing.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(missing.error_message() == "this server needs a bearer token (--token_file)");
  const grpc::Status unknown = Call(address, wrong, true);
  CHECK(unknown.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(unknown.error_message() == "the bearer token is not accepted by this server");
  // Still serving the legitimate caller.
  CHECK(Call(address, worker, true).ok());
  started->server->Shutdown();
}

TEST_CASE("a token file without TLS is refused: a token must not travel in plaintext",
          "[grpc][auth]") {
  absl::StatusOr<std::unique_ptr<testing::ScopedTempDir>> dir =
      testing::ScopedTempDir::Create("security_test");
  REQUIRE(dir.ok());
  SecurityFiles files;
  files.token_file = WriteFile((*dir)->path() + "/tokens", absl::StrCat("admin ", kAdmin, "\n"));
  const absl::Status status = Security::Load(files, TokenRole::kAdmin).status();
  CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(status.message().find("needs TLS") != absl::string_view::npos);
  CHECK(Security().Describe() == "plaintext");
  CHECK_FALSE(Security().tls());
}

}  // namespace
}  // namespace grpc_util
}  // namespace ps

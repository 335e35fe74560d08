#include "common/grpc/tls_options.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/server_builder.h"
#include "common/grpc/kv_set_service_for_test.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace grpc_util {
namespace {


void Run(const std::string& command) {
  INFO(command);
  REQUIRE(std::system((command + " >/dev/null 2>&1").c_str()) == 0);
}

// Two CAs; under "ca" a server certificate for 127.0.0.1/localhost and a client certificate;
// under "other" a client certificate. Made with Debian's openssl command.
struct Certificates {
  explicit Certificates(const std::string& dir) : dir(dir) {
    for (const std::string ca : {"ca", "other"}) {
      Run(absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=", ca,
                       " -keyout ", dir, "/", ca, ".key -out ", dir, "/", ca, ".pem"));
    }
    Issue("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost");
    Issue("client", "ca", "subjectAltName=DNS:client");
    Issue("stranger", "other", "subjectAltName=DNS:stranger");
  }
  void Issue(const std::string& name, const std::string& ca, const std::string& san) {
    Run(absl::StrCat("openssl req -new -newkey rsa:2048 -nodes -subj /CN=", name, " -addext ",
                     san, " -keyout ", dir, "/", name, ".key -out ", dir, "/", name, ".csr"));
    Run(absl::StrCat("openssl x509 -req -days 2 -copy_extensions copyall -in ", dir, "/", name,
                     ".csr -CA ", dir, "/", ca, ".pem -CAkey ", dir, "/", ca,
                     ".key -CAcreateserial -out ", dir, "/", name, ".pem"));
  }
  TlsOptions Load(const std::string& cert, const std::string& ca) const {
    TlsFiles files;
    if (!cert.empty()) {
      files.cert_file = absl::StrCat(dir, "/", cert, ".pem");
      files.key_file = absl::StrCat(dir, "/", cert, ".key");
    }
    if (!ca.empty()) files.ca_file = absl::StrCat(dir, "/", ca, ".pem");
    absl::StatusOr<TlsOptions> tls = LoadTlsOptions(files);
    REQUIRE(tls.ok());
    return *tls;
  }
  const std::string dir;
};

// A server with `tls` serving KvSetService on a port of 127.0.0.1.
struct TestServer {
  explicit TestServer(const TlsOptions& tls) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = ServerCredentials(tls);
    REQUIRE(credentials.ok());
    options.credentials = *credentials;
    absl::StatusOr<StartedServer> started = StartServer(std::move(options), {&service});
    REQUIRE(started.ok());
    server = std::move(started->server);
    address = absl::StrCat("127.0.0.1:", started->port);
  }
  ~TestServer() { server->Shutdown(); }
  KvSetService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

grpc::Status Call(const std::string& address, const TlsOptions& tls, const char* what) {
  ChannelOptions options = CoordinatorChannelOptions();
  options.credentials = ChannelCredentials(tls);
  auto stub = rpc::Coordinator::NewStub(NewChannel(address, options));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  rpc::KvSetResponse response;
  grpc::Status status = stub->KvSet(&context, rpc::KvSetRequest(), &response);
  std::printf("%s: code %d: %s\n", what, static_cast<int>(status.error_code()),
              status.error_message().c_str());
  return status;
}

TEST_CASE("TLS and mutual TLS between the channel factory and the server builder",
          "[grpc][tls]") {
  absl::StatusOr<std::unique_ptr<testing::ScopedTempDir>> dir =
      testing::ScopedTempDir::Create("tls_options_test");
  REQUIRE(dir.ok());
  const Certificates certs((*dir)->path());

  SECTION("TLS: the client verifies the server against the CA") {
    TestServer server(certs.Load("server", ""));
    CHECK(Call(server.address, certs.Load("", "ca"), "tls").ok());
    const grpc::Status plain = Call(server.address, TlsOptions(), "plaintext client, TLS server");
    CHECK(plain.error_code() == grpc::StatusCode::UNAVAILABLE);
    const grpc::Status wrong_ca =
        Call(server.address, certs.Load("", "other"), "client trusting another CA");
    CHECK(wrong_ca.error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  SECTION("mutual TLS: the server requires a client certificate of its CA") {
    TestServer server(certs.Load("server", "ca"));
    CHECK(Call(server.address, certs.Load("client", "ca"), "mtls").ok());
    const grpc::Status no_cert =
        Call(server.address, certs.Load("", "ca"), "client without a certificate, mTLS server");
    CHECK(no_cert.error_code() == grpc::StatusCode::UNAVAILABLE);
    const grpc::Status stranger =
        Call(server.address, certs.Load("stranger", "ca"), "client cert of another CA");
    CHECK(stranger.error_code() == grpc::StatusCode::UNAVAILABLE);
    const grpc::Status plain = Call(server.address, TlsOptions(), "plaintext client, mTLS server");
    CHECK(plain.error_code() == grpc::StatusCode::UNAVAILABLE);
  }
}

TEST_CASE("LoadTlsOptions names the flag and the file it cannot use", "[grpc][tls]") {
  absl::StatusOr<std::unique_ptr<testing::ScopedTempDir>> dir =
      testing::ScopedTempDir::Create("tls_options_test");
  REQUIRE(dir.ok());
  const std::string not_pem = (*dir)->path() + "/not.pem";
  std::ofstream(not_pem) << "hello\n";
  const std::string missing = (*dir)->path() + "/missing.pem";

  CHECK(LoadTlsOptions(TlsFiles())->enabled() == false);

  TlsFiles files;
  files.ca_file = missing;
  absl::Status status = LoadTlsOptions(files).status();
  CHECK(status.code() == absl::StatusCode::kNotFound);
  CHECK(status.message() == "--tls_ca " + missing + ": No such file or directory");

  files.ca_file = not_pem;
  status = LoadTlsOptions(files).status();
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(status.message() == "--tls_ca " + not_pem + ": not a PEM file (no \"-----BEGIN \" line)");

  files = TlsFiles();
  files.cert_file = not_pem;
  status = LoadTlsOptions(files).status();
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(status.message() == "--tls_cert given without --tls_key");

  TlsOptions only_ca;
  only_ca.ca_pem = "-----BEGIN CERTIFICATE-----\n";
  CHECK(ServerCredentials(only_ca).status().code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace grpc_util
}  // namespace ps

#include "common/grpc/tls_options.h"

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/server_builder.h"
#include "common/grpc/kv_set_service_for_test.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/testing/credentials.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace grpc_util {
namespace {

// The PEM files of `cert` (cert and key; empty for none) and `ca` (empty for none).
TlsOptions Load(const std::string& cert, const std::string& key, const std::string& ca) {
  TlsFiles files;
  files.cert_file = cert;
  files.key_file = key;
  files.ca_file = ca;
  absl::StatusOr<TlsOptions> tls = LoadTlsOptions(files);
  REQUIRE(tls.ok());
  return *tls;
}

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
  const absl::StatusOr<testing::TestCredentials> made =
      testing::MakeTestCredentials((*dir)->path());
  REQUIRE(made.ok());
  const testing::TestCredentials& c = *made;
  const TlsOptions trusting_ca = Load("", "", c.ca);

  SECTION("TLS: the client verifies the server against the CA") {
    TestServer server(Load(c.node_cert, c.node_key, ""));
    CHECK(Call(server.address, trusting_ca, "tls").ok());
    const grpc::Status plain = Call(server.address, TlsOptions(), "plaintext client, TLS server");
    CHECK(plain.error_code() == grpc::StatusCode::UNAVAILABLE);
    const grpc::Status wrong_ca =
        Call(server.address, Load("", "", c.other_ca), "client trusting another CA");
    CHECK(wrong_ca.error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  SECTION("mutual TLS: the server requires a client certificate of its CA") {
    TestServer server(Load(c.node_cert, c.node_key, c.ca));
    CHECK(Call(server.address, Load(c.client_cert, c.client_key, c.ca), "mtls").ok());
    const grpc::Status no_cert =
        Call(server.address, trusting_ca, "client without a certificate, mTLS server");
    CHECK(no_cert.error_code() == grpc::StatusCode::UNAVAILABLE);
    const grpc::Status stranger = Call(server.address, Load(c.stranger_cert, c.stranger_key, c.ca),
                                       "client cert of another CA");
    CHECK(stranger.error_code() == grpc::StatusCode::UNAVAILABLE);
    const grpc::Status expired = Call(server.address, Load(c.expired_cert, c.expired_key, c.ca),
                                      "expired client cert");
    CHECK(expired.error_code() == grpc::StatusCode::UNAVAILABLE);
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

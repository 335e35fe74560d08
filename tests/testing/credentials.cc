#include "tests/testing/credentials.h"

#include <cstdlib>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace testing {
namespace {

absl::Status Run(const std::string& command) {
  const std::string quiet = absl::StrCat("(", command, ") >/dev/null 2>&1");
  if (std::system(quiet.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("failed: ", command));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TestCredentials> MakeTestCredentials(const std::string& dir,
                                                    const std::string& script) {
  TestCredentials c;
  const std::string cluster = absl::StrCat(dir, "/cluster");
  if (absl::Status made = Run(absl::StrCat(script, " ", cluster, " localhost 127.0.0.1"));
      !made.ok()) {
    return made;
  }
  c.ca = cluster + "/ca.pem";
  c.node_cert = cluster + "/node.pem";
  c.node_key = cluster + "/node.key";
  c.client_cert = cluster + "/client.pem";
  c.client_key = cluster + "/client.key";
  c.tokens = cluster + "/tokens";
  c.worker_token = cluster + "/worker_token";

  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  c.other_ca = dir + "/other_ca.pem";
  c.stranger_cert = dir + "/stranger.pem";
  c.stranger_key = dir + "/stranger.key";
  c.expired_cert = dir + "/expired.pem";
  c.expired_key = dir + "/expired.key";
  const std::string other_key = dir + "/other_ca.key";
  for (const std::string& command : {
           absl::StrCat("openssl req -x509 ", ec, " -days 2 -subj /CN=other-ca -keyout ",
                        other_key, " -out ", c.other_ca),
           absl::StrCat("openssl req -new ", ec, " -subj /CN=stranger -keyout ", c.stranger_key,
                        " -out ", dir, "/stranger.csr"),
           absl::StrCat("openssl x509 -req -days 2 -in ", dir, "/stranger.csr -CA ", c.other_ca,
                        " -CAkey ", other_key, " -CAcreateserial -out ", c.stranger_cert),
           absl::StrCat("openssl req -new ", ec, " -subj /CN=expired -keyout ", c.expired_key,
                        " -out ", dir, "/expired.csr"),
       }) {
    if (absl::Status ran = Run(command); !ran.ok()) return ran;
  }
  // `openssl x509` cannot date a certificate in the past; `openssl ca` can.
  const std::string ca_dir = dir + "/expired_ca";
  {
    if (absl::Status made = Run(absl::StrCat("mkdir -p ", ca_dir, " && touch ", ca_dir,
                                             "/index.txt && echo 01 > ", ca_dir, "/serial"));
        !made.ok()) {
      return made;
    }
    std::ofstream config(ca_dir + "/ca.cnf");
    config << "[ca]\ndefault_ca = test\n[test]\ndatabase = " << ca_dir
           << "/index.txt\nnew_certs_dir = " << ca_dir << "\ncertificate = " << c.ca
           << "\nprivate_key = " << cluster << "/ca.key\nserial = " << ca_dir
           << "/serial\ndefault_md = sha256\npolicy = anything\n[anything]\ncommonName = "
              "supplied\n";
    if (!config) return absl::InternalError("cannot write " + ca_dir + "/ca.cnf");
  }
  if (absl::Status signed_old = Run(absl::StrCat(
          "openssl ca -batch -config ", ca_dir, "/ca.cnf -startdate 20200101000000Z -enddate "
          "20200102000000Z -in ", dir, "/expired.csr -out ", c.expired_cert));
      !signed_old.ok()) {
    return signed_old;
  }
  return c;
}

}  // namespace testing
}  // namespace ps

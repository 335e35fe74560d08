// Credentials for tests of TLS and tokens: a cluster's, made by deploy/make_credentials.sh (a data
// dependency of the test, found from the runfiles root a test runs in), and the ones a cluster
// must refuse: a client certificate of another CA, and an expired one of the cluster's own CA.
#ifndef PS_TESTS_TESTING_CREDENTIALS_H_
#define PS_TESTS_TESTING_CREDENTIALS_H_

#include <string>

#include "absl/status/statusor.h"

namespace ps {
namespace testing {

// Paths of PEM and token files. Thread-compatible.
struct TestCredentials {
  // deploy/make_credentials.sh's, for localhost and 127.0.0.1.
  std::string ca;
  std::string node_cert, node_key;
  std::string client_cert, client_key;
  std::string tokens;        // an admin and a worker token
  std::string worker_token;  // the worker token alone
  // A CA of its own and a client certificate it signed.
  std::string other_ca;
  std::string stranger_cert, stranger_key;
  // A client certificate of `ca` valid only on 2020-01-01.
  std::string expired_cert, expired_key;
};

// Makes them all under `dir` (an existing, empty folder) with deploy/make_credentials.sh and
// openssl; `script` is the script's path. INTERNAL naming the command that failed.
absl::StatusOr<TestCredentials> MakeTestCredentials(
    const std::string& dir, const std::string& script = "deploy/make_credentials.sh");

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_CREDENTIALS_H_

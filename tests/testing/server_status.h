// A ps_server's own status (ParameterServer.GetStatus), asked over a plaintext channel of its own,
// for tests of real daemons.
#ifndef PS_TESTS_TESTING_SERVER_STATUS_H_
#define PS_TESTS_TESTING_SERVER_STATUS_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/server_status.pb.h"
#include "tests/testing/daemon.h"

namespace ps {
namespace testing {

// The status of `server`, or the call's error (as absl::Status) when it does not answer within
// `timeout`.
absl::StatusOr<rpc::ServerStatus> ServerStatusOf(const Daemon& server,
                                                 absl::Duration timeout = absl::Seconds(10));

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_SERVER_STATUS_H_

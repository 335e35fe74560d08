// A ps_server's own status (ParameterServer.GetStatus), asked over a plaintext channel of its own,
// and the cluster's tables as `ps_ctl tables --json` shows them, for tests of real daemons.
#ifndef PS_TESTS_TESTING_SERVER_STATUS_H_
#define PS_TESTS_TESTING_SERVER_STATUS_H_

#include <google/protobuf/struct.pb.h>

#include <string>

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

// What `client/ps_ctl --coordinator=<coordinator> tables --json` prints (ps_ctl from the test's
// runfiles), parsed. RunProcess's errors; INTERNAL with its stdout and stderr if ps_ctl exits
// other than 0 or prints what does not parse as JSON.
absl::StatusOr<google::protobuf::Struct> CtlTablesJson(const std::string& coordinator);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_SERVER_STATUS_H_

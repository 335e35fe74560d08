#include "tests/testing/server_status.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace testing {

absl::StatusOr<rpc::ServerStatus> ServerStatusOf(const Daemon& server, absl::Duration timeout) {
  auto stub = rpc::ParameterServer::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  rpc::ServerStatus status;
  const grpc::Status got = stub->GetStatus(&context, rpc::ServerStatusRequest(), &status);
  if (!got.ok()) return FromGrpcStatus(got);
  return status;
}

absl::StatusOr<google::protobuf::Struct> CtlTablesJson(const std::string& coordinator) {
  absl::StatusOr<ProcessResult> ctl =
      RunProcess("client/ps_ctl", {absl::StrCat("--coordinator=", coordinator), "tables", "--json"},
                 absl::Seconds(60));
  if (!ctl.ok()) return ctl.status();
  google::protobuf::Struct parsed;
  if (ctl->exit_code != 0 ||
      !google::protobuf::util::JsonStringToMessage(ctl->stdout_text, &parsed).ok()) {
    return absl::InternalError(absl::StrCat("ps_ctl tables --json exited with ", ctl->exit_code,
                                            ":\n", ctl->stdout_text, ctl->stderr_text));
  }
  return parsed;
}

}  // namespace testing
}  // namespace ps

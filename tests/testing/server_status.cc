#include "tests/testing/server_status.h"

#include <grpcpp/grpcpp.h>

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

}  // namespace testing
}  // namespace ps

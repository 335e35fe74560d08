// A service for the tests of common/grpc: a coordinator whose KvSet answers OK and whose every
// other method is gRPC's UNIMPLEMENTED, enough to make calls through channels and servers.
#ifndef PS_COMMON_GRPC_KV_SET_SERVICE_FOR_TEST_H_
#define PS_COMMON_GRPC_KV_SET_SERVICE_FOR_TEST_H_

#include <grpcpp/grpcpp.h>

#include "proto/coordinator.grpc.pb.h"

namespace ps {
namespace grpc_util {

// Thread-safe.
class KvSetService final : public rpc::Coordinator::CallbackService {
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context, const rpc::KvSetRequest*,
                                  rpc::KvSetResponse*) override {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

}  // namespace grpc_util
}  // namespace ps

#endif  // PS_COMMON_GRPC_KV_SET_SERVICE_FOR_TEST_H_

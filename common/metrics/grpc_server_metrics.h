// Metrics of every call a gRPC server answers, taken by a server interceptor, so that every
// service of every daemon is counted the same way without code in its handlers.
#ifndef PS_COMMON_METRICS_GRPC_SERVER_METRICS_H_
#define PS_COMMON_METRICS_GRPC_SERVER_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>

#include "common/metrics/registry.h"

namespace ps {
namespace metrics {

// An interceptor factory for grpc::ServerBuilder::experimental().SetInterceptorCreators that
// records, in `registry` (not owned; it must outlive the server):
//
//   <prefix>_rpcs_total{method, code}         calls answered, by method ("Pull": the name after
//                                             the service's) and status code ("OK", "NOT_FOUND")
//   <prefix>_rpc_duration_seconds{method}     histogram of the time from the call's arrival to
//                                             its status being sent (LatencyBuckets())
//
// A method's series are made on its first call; after that a call takes a reader lock, one clock
// read at each end and a few relaxed atomic increments, and allocates only the interceptor gRPC
// asks for. Thread-safe.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeServerMetricsInterceptorFactory(Registry* registry, const std::string& prefix);

// "NOT_FOUND" for grpc::StatusCode::NOT_FOUND; "UNKNOWN_CODE" outside the canonical codes.
const char* GrpcCodeName(int code);

}  // namespace metrics
}  // namespace ps

#endif  // PS_COMMON_METRICS_GRPC_SERVER_METRICS_H_

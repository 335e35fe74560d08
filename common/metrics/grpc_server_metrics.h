// Metrics of every call a gRPC server answers, taken by a server interceptor, so that every
// service of every daemon is counted the same way without code in its handlers.
#ifndef PS_COMMON_METRICS_GRPC_SERVER_METRICS_H_
#define PS_COMMON_METRICS_GRPC_SERVER_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <array>
#include <atomic>
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

// The same two series for the calls of one method answered outside gRPC (a parameter server's
// calls made in shared memory), so that a method's count and latency include them: <prefix>_rpcs_
// total{method, code} and <prefix>_rpc_duration_seconds{method}, shared with the interceptor's
// (the registry hands both the same series). Thread-safe.
class CallMetrics {
 public:
  // `registry` is not owned and must outlive this.
  CallMetrics(Registry* registry, const std::string& prefix, std::string method);
  CallMetrics(const CallMetrics&) = delete;
  CallMetrics& operator=(const CallMetrics&) = delete;

  // One call answered with grpc::StatusCode `code` (absl's codes are the same numbers), which
  // took `seconds` from its arrival.
  void Record(int code, double seconds);

 private:
  static constexpr int kNumCodes = 17;  // OK (0) .. UNAUTHENTICATED (16)

  Registry* const registry_;
  const std::string prefix_;
  const std::string method_;
  Histogram* const duration_;
  std::array<std::atomic<Counter*>, kNumCodes> by_code_;
};

// "NOT_FOUND" for grpc::StatusCode::NOT_FOUND; "UNKNOWN_CODE" outside the canonical codes.
const char* GrpcCodeName(int code);

}  // namespace metrics
}  // namespace ps

#endif  // PS_COMMON_METRICS_GRPC_SERVER_METRICS_H_

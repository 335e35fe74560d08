#include "common/metrics/grpc_server_metrics.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ps {
namespace metrics {
namespace {

constexpr int kNumCodes = 17;  // grpc::StatusCode OK (0) .. UNAUTHENTICATED (16)

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MetricsInterceptor(CallMetrics* method)
      : method_(method), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
      method_->Record(static_cast<int>(methods->GetSendStatus().error_code()), elapsed.count());
    }
    methods->Proceed();
  }

 private:
  CallMetrics* const method_;
  const std::chrono::steady_clock::time_point start_;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  MetricsInterceptorFactory(Registry* registry, std::string prefix)
      : registry_(registry), prefix_(std::move(prefix)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(Method(info->method()));
  }

 private:
  // By the method's full path ("/ps.rpc.ParameterServer/Pull").
  CallMetrics* Method(const char* c_path) {
    const absl::string_view path = c_path == nullptr ? "" : c_path;
    {
      absl::ReaderMutexLock lock(&mu_);
      if (const auto it = methods_.find(path); it != methods_.end()) return it->second.get();
    }
    std::string name(path);
    if (const size_t slash = name.rfind('/'); slash != std::string::npos) {
      name = name.substr(slash + 1);
    }
    absl::MutexLock lock(&mu_);
    if (const auto it = methods_.find(path); it != methods_.end()) return it->second.get();
    if (methods_.size() >= kMaxMethods) {
      // A client calling made-up methods must not grow the map: they share one series.
      if (unknown_ == nullptr) {
        unknown_ = std::make_unique<CallMetrics>(registry_, prefix_, "unknown");
      }
      return unknown_.get();
    }
    auto& slot = methods_[std::string(path)];
    slot = std::make_unique<CallMetrics>(registry_, prefix_, name);
    return slot.get();
  }

  static constexpr size_t kMaxMethods = 64;

  Registry* const registry_;
  const std::string prefix_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<CallMetrics>> methods_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CallMetrics> unknown_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

CallMetrics::CallMetrics(Registry* registry, const std::string& prefix, std::string method)
    : registry_(registry),
      prefix_(prefix),
      method_(std::move(method)),
      duration_(registry->GetHistogram(prefix + "_rpc_duration_seconds",
                                       "Time from a call's arrival to its status being sent.",
                                       LatencyBuckets(), {{"method", method_}})) {
  for (auto& counter : by_code_) counter.store(nullptr, std::memory_order_relaxed);
}

void CallMetrics::Record(int code, double seconds) {
  duration_->Observe(seconds);
  if (code < 0 || code >= kNumCodes) code = static_cast<int>(grpc::StatusCode::UNKNOWN);
  Counter* counter = by_code_[code].load(std::memory_order_acquire);
  if (counter == nullptr) {
    // The registry returns the same counter to racing threads.
    counter = registry_->GetCounter(prefix_ + "_rpcs_total", "Calls answered, by status code.",
                                    {{"method", method_}, {"code", GrpcCodeName(code)}});
    by_code_[code].store(counter, std::memory_order_release);
  }
  counter->Increment();
}

const char* GrpcCodeName(int code) {
  static constexpr const char* kNames[kNumCodes] = {"OK",
                                                    "CANCELLED",
                                                    "UNKNOWN",
                                                    "INVALID_ARGUMENT",
                                                    "DEADLINE_EXCEEDED",
                                                    "NOT_FOUND",
                                                    "ALREADY_EXISTS",
                                                    "PERMISSION_DENIED",
                                                    "RESOURCE_EXHAUSTED",
                                                    "FAILED_PRECONDITION",
                                                    "ABORTED",
                                                    "OUT_OF_RANGE",
                                                    "UNIMPLEMENTED",
                                                    "INTERNAL",
                                                    "UNAVAILABLE",
                                                    "DATA_LOSS",
                                                    "UNAUTHENTICATED"};
  if (code < 0 || code >= kNumCodes) return "UNKNOWN_CODE";
  return kNames[code];
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeServerMetricsInterceptorFactory(Registry* registry, const std::string& prefix) {
  return std::make_unique<MetricsInterceptorFactory>(registry, prefix);
}

}  // namespace metrics
}  // namespace ps

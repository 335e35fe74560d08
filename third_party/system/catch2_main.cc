#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
// LeakSanitizer's suppressions for every test process under --config=asan, through its hook (no
// file to find, whatever folder a test runs in). Each says why.
//
// OpenSSL's objects behind gRPC's TLS credentials (an SSL_CTX with its certificate store: blocks
// from CRYPTO_zalloc, CRYPTO_strdup, OPENSSL_sk_deep_copy) are freed by gRPC when a channel's
// subchannel is destroyed, on one of gRPC's event-engine threads after the channel itself is gone.
// A test that ends right after its last TLS call can exit before that cleanup has run, and then
// LeakSanitizer reports them (common/grpc:security_test, 1 run in 13 under load). Our code calls
// no OpenSSL function itself, so whatever libcrypto allocates is gRPC's; gRPC's own objects (a
// channel or credentials we failed to release) are allocated in libgrpc and still reported.
extern "C" const char* __lsan_default_suppressions() { return "leak:libcrypto.so\n"; }
#endif

// gRPC's, when the test links it (a weak reference: null in a test without gRPC). Nonzero while
// gRPC is initialised, which includes the shutdown it may still be running on a thread of its own.
extern "C" int grpc_is_initialized(void) __attribute__((weak));

namespace {

// When the last gRPC object goes on one of gRPC's threads (a channel's callback queue, deleted
// there after the channel; a channel whose last holder was a callback), gRPC shuts itself down on
// a detached thread. A process that returns from main meanwhile destroys the statics that thread
// still uses: "assertion failed: prior > 0", or a crash, after every test passed (1 in about 300
// runs of coordinator_service_test here under load; 2 in 120 with its status calls' callbacks
// slowed on purpose, none in 90 with this wait). So main waits for that shutdown to end, once
// every gRPC object is gone: at most 10 s, then it returns anyway (a test that keeps a gRPC object
// to the end never lets the count reach zero).
void AwaitGrpcShutdown() {
  if (grpc_is_initialized == nullptr) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (grpc_is_initialized() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

int main(int argc, char* argv[]) {
  const int result = Catch::Session().run(argc, argv);
  AwaitGrpcShutdown();
  return result;
}

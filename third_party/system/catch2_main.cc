#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

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

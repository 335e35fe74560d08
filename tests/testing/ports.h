// Loopback ports for tests: one that refuses connections, one free for a program that cannot
// bind port 0 and report it, and the metrics port a daemon printed.
#ifndef PS_TESTS_TESTING_PORTS_H_
#define PS_TESTS_TESTING_PORTS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ps {
namespace testing {

// A loopback port held by a bound socket that does not listen, so connections to it are refused
// at once (not timed out) for as long as this lives. Aborts, saying why, when no socket can be
// bound. Thread-compatible.
class RefusingPort {
 public:
  RefusingPort();
  ~RefusingPort();
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;

  int port() const { return port_; }
  // "127.0.0.1:<port>".
  std::string address() const;

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A loopback port nobody listens on at the time of the call (the kernel's pick for port 0, then
// released), for a program that cannot bind port 0 and report what it bound (Prometheus). Another
// process may take it in between, which the kernel makes unlikely (it hands out ports in turn).
// Aborts when no socket can be bound.
int FreeLoopbackPort();

// The port in a daemon's `metrics on http://HOST:PORT/metrics` line (common/metrics/
// http_endpoint.h) in `log`, or 0 when there is none.
int MetricsPortInLog(absl::string_view log);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_PORTS_H_

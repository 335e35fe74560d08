// The /metrics endpoint of a daemon: an HTTP server (cpp-httplib) that answers GET /metrics with
// its Registry rendered in Prometheus's text format.
#ifndef PS_COMMON_METRICS_HTTP_ENDPOINT_H_
#define PS_COMMON_METRICS_HTTP_ENDPOINT_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/registry.h"

namespace httplib {
class Server;
}

namespace ps {
namespace metrics {

// A MetricsEndpoint serves one Registry over HTTP on its own threads until it is destroyed.
// Thread-safe.
//
//   GET /metrics   200, `text/plain; version=0.0.4`, the registry's Render()
//   anything else  404 (GET) or 405 (other methods)
class MetricsEndpoint {
 public:
  // Binds `listen` ("host:port"; port 0 picks a free one) and starts serving `registry` (not
  // owned; it must outlive the endpoint). INVALID_ARGUMENT for a malformed address,
  // UNAVAILABLE when the address cannot be bound (in use, or not this host's).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& listen,
                                                                const Registry* registry);

  // Stops serving and waits for the server's threads.
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The bound port.
  int port() const { return port_; }

  // GET /metrics answered so far.
  uint64_t scrapes() const;
  // Waits until more than `seen` scrapes were answered (true), or `timeout` passed (false): a
  // daemon about to exit gives its scraper the chance to see its final values.
  bool AwaitScrapeAfter(uint64_t seen, absl::Duration timeout) const;

 private:
  MetricsEndpoint(std::unique_ptr<httplib::Server> server, int port, const Registry* registry);

  const std::unique_ptr<httplib::Server> server_;
  const int port_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // the server thread has left its loop
  uint64_t scrapes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Starts a daemon's endpoint from its flags: nothing when `listen` is empty (metrics off, the
// default); else binds it, prints `<who>: metrics on http://<host>:<port>/metrics` on stderr and,
// when `port_file` is not empty, writes the bound port to it (as the RPC port is written).
// Errors as Start's, or FAILED_PRECONDITION when the port file cannot be written; each names
// `who` and the flag.
// For a daemon's --dry_run: OK when `listen` is empty (metrics off) or can be bound now;
// INVALID_ARGUMENT for a malformed address, else CheckCanListen's error (common/net_address.h).
absl::Status CheckDaemonEndpoint(const std::string& listen);

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartDaemonEndpoint(const std::string& who,
                                                                      const std::string& listen,
                                                                      const std::string& port_file,
                                                                      const Registry* registry);

}  // namespace metrics
}  // namespace ps

#endif  // PS_COMMON_METRICS_HTTP_ENDPOINT_H_

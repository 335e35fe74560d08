#include "common/metrics/http_endpoint.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "common/port_file.h"

namespace ps {
namespace metrics {

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<httplib::Server> server, int port,
                                 const Registry* registry)
    : server_(std::move(server)), port_(port) {
  server_->Get("/metrics", [this, registry](const httplib::Request&, httplib::Response& response) {
    response.set_content(registry->Render(), "text/plain; version=0.0.4; charset=utf-8");
    absl::MutexLock lock(&mu_);
    ++scrapes_;
  });
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  });
}

MetricsEndpoint::~MetricsEndpoint() {
  // httplib's stop() does nothing before the server thread has entered its loop, so it is
  // repeated until that thread has left it.
  absl::MutexLock lock(&mu_);
  while (!stopped_) {
    server_->stop();
    mu_.AwaitWithTimeout(absl::Condition(&stopped_), absl::Milliseconds(10));
  }
  mu_.Unlock();
  thread_.join();
  mu_.Lock();
}

uint64_t MetricsEndpoint::scrapes() const {
  absl::MutexLock lock(&mu_);
  return scrapes_;
}

bool MetricsEndpoint::AwaitScrapeAfter(uint64_t seen, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto scraped = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return scrapes_ > seen; };
  return mu_.AwaitWithTimeout(absl::Condition(&scraped), timeout);
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& listen,
                                                                        const Registry* registry) {
  const absl::StatusOr<HostPort> address = ParseHostPort(listen);
  if (!address.ok()) return address.status();
  auto server = std::make_unique<httplib::Server>();
  // httplib's default also sets SO_REUSEPORT, with which a second daemon could bind the same
  // port and silently take half of the scrapes.
  server->set_socket_options([](int socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Scrapes come every few seconds, from one or two Prometheus servers: one thread serves them.
  server->new_task_queue = [] { return new httplib::ThreadPool(1); };
  const std::string host = address->host.empty() ? "0.0.0.0" : address->host;
  int port = address->port;
  if (port == 0) {
    port = server->bind_to_any_port(host);
    if (port < 0) port = 0;
  } else if (!server->bind_to_port(host, port)) {
    port = 0;
  }
  if (port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen,
                     " for metrics (the port is in use, or the host is not an address of this "
                     "machine)"));
  }
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(server), port, registry));
}

absl::Status CheckDaemonEndpoint(const std::string& listen) {
  if (listen.empty()) return absl::OkStatus();
  const absl::StatusOr<HostPort> address = ParseHostPort(listen);
  if (!address.ok()) return address.status();
  return CheckCanListen(*address);
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartDaemonEndpoint(const std::string& who,
                                                                      const std::string& listen,
                                                                      const std::string& port_file,
                                                                      const Registry* registry) {
  if (listen.empty()) return std::unique_ptr<MetricsEndpoint>();
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start(listen, registry);
  if (!endpoint.ok()) {
    return absl::Status(endpoint.status().code(),
                        absl::StrCat(who, ": --metrics_listen: ", endpoint.status().message()));
  }
  const absl::StatusOr<HostPort> address = ParseHostPort(listen);
  std::fprintf(stderr, "%s: metrics on http://%s/metrics\n", who.c_str(),
               JoinHostPort(address->host.empty() ? "0.0.0.0" : address->host,
                            (*endpoint)->port())
                   .c_str());
  if (!port_file.empty()) {
    const absl::Status written = WritePortFile(port_file, (*endpoint)->port());
    if (!written.ok()) {
      return absl::Status(written.code(),
                          absl::StrCat(who, ": --metrics_port_file: ", written.message()));
    }
  }
  return endpoint;
}

}  // namespace metrics
}  // namespace ps

#include "common/daemon_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

// Help texts true for every daemon; where one differs, it says which.
ABSL_FLAG(std::string, listen, "0.0.0.0:0",
          "HOST:PORT to listen on: 0.0.0.0 (or [::]) for every address, port 0 for a free one "
          "(printed, and written to --port_file where the daemon has one). ps_worker: the "
          "address its AllReduce binds, HOST:0 only (it picks its own ports; 0.0.0.0 binds the "
          "advertised host)");
ABSL_FLAG(std::string, advertise, "",
          "the host other processes dial to reach this one; default: the --listen host when it "
          "is a specific address, else this host's name or first address other than loopback");
ABSL_FLAG(bool, dry_run, false,
          "check the flags (ps_coordinator: and the job), bind --listen's address and release it, "
          "print ok, and exit (0, or 1 or 2 with the reason); contacts nothing");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on (GET /metrics; port 0 for a free one, printed "
          "and written to --metrics_port_file); empty: no metrics endpoint");
ABSL_FLAG(std::string, metrics_port_file, "",
          "if set, the metrics endpoint's bound port is written to this file");

namespace ps {

absl::StatusOr<DaemonAddress> DaemonAddressFromFlags() {
  return ParseDaemonAddress(absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_advertise));
}

absl::Status CheckCanListenFromFlags(const HostPort& listen) {
  if (absl::Status can_listen = CheckCanListen(listen); !can_listen.ok()) return can_listen;
  const absl::Status can_serve_metrics =
      metrics::CheckDaemonEndpoint(absl::GetFlag(FLAGS_metrics_listen));
  if (can_serve_metrics.ok()) return can_serve_metrics;
  return absl::Status(can_serve_metrics.code(),
                      absl::StrCat("--metrics_listen: ", can_serve_metrics.message()));
}

bool MetricsEndpointWanted() { return !absl::GetFlag(FLAGS_metrics_listen).empty(); }

absl::StatusOr<std::unique_ptr<metrics::MetricsEndpoint>> StartMetricsEndpointFromFlags(
    const std::string& who, const metrics::Registry* registry) {
  return metrics::StartDaemonEndpoint(who, absl::GetFlag(FLAGS_metrics_listen),
                                      absl::GetFlag(FLAGS_metrics_port_file), registry);
}

}  // namespace ps

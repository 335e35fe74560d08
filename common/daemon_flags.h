// The flags every daemon (ps_server, ps_coordinator, ps_worker) takes for where it listens, the
// host it gives others to dial, a dry run and its metrics endpoint: defined once here, with what
// the daemons do with them alike. A daemon gets them by depending on //common:daemon_flags.
//
//   --listen=HOST:PORT        what it binds (default 0.0.0.0:0: every address, a free port)
//   --advertise=HOST          what others dial (default: see ResolveAdvertiseHost)
//   --dry_run                 check, bind and release, print ok, exit
//   --metrics_listen=HOST:PORT, --metrics_port_file=PATH   the Prometheus endpoint
#ifndef PS_COMMON_DAEMON_FLAGS_H_
#define PS_COMMON_DAEMON_FLAGS_H_

#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics/http_endpoint.h"
#include "common/metrics/registry.h"
#include "common/net_address.h"

ABSL_DECLARE_FLAG(std::string, listen);
ABSL_DECLARE_FLAG(std::string, advertise);
ABSL_DECLARE_FLAG(bool, dry_run);
ABSL_DECLARE_FLAG(std::string, metrics_listen);
ABSL_DECLARE_FLAG(std::string, metrics_port_file);

namespace ps {

// --listen and --advertise, checked: ParseDaemonAddress's answer and errors.
absl::StatusOr<DaemonAddress> DaemonAddressFromFlags();

// What --dry_run checks of these flags: OK when `listen` (what the daemon would bind) can be bound
// now and --metrics_listen is empty or can be bound too. Else CheckCanListen's error for
// `listen`, or CheckDaemonEndpoint's for --metrics_listen with its message after
// "--metrics_listen: ".
absl::Status CheckCanListenFromFlags(const HostPort& listen);

// Whether --metrics_listen asks for a metrics endpoint.
bool MetricsEndpointWanted();

// Starts the metrics endpoint of daemon `who` that --metrics_listen and --metrics_port_file ask
// for: StartDaemonEndpoint's answer (nullptr when --metrics_listen is empty) and errors.
// `registry` must outlive the endpoint.
absl::StatusOr<std::unique_ptr<metrics::MetricsEndpoint>> StartMetricsEndpointFromFlags(
    const std::string& who, const metrics::Registry* registry);

}  // namespace ps

#endif  // PS_COMMON_DAEMON_FLAGS_H_

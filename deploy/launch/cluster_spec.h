// Loading and validating a cluster description (proto/launch.proto) for a job.
//
// A description with a mistake is refused as a whole with INVALID_ARGUMENT, whose message starts
// with `path:line:col: ` and says what is wrong, e.g.
//   cluster.pbtxt:9:3: hosts[1] "node-b": servers over all hosts add up to 3, the job has 2
#ifndef PS_DEPLOY_LAUNCH_CLUSTER_SPEC_H_
#define PS_DEPLOY_LAUNCH_CLUSTER_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job.pb.h"
#include "proto/launch.pb.h"

namespace ps {
namespace launch {

// Parses `text` (named `path` in messages) and checks it, and that it can run `job`:
// - bin_dir is set; connect_timeout_s > 0; coordinator_port <= 65535;
// - local: no hosts, ssh or slurm section (they would be ignored);
// - coordinators in [1, 3]; with 1, no etcd_* field; with 2 or 3: not SLURM, no --etcd,
//   --etcd_prefix or --data_dir in coordinator_flags, etcd_endpoints (when given) a non-empty list
//   of host:port (or http://host:port), and the etcd_client_port, etcd_peer_port, etcd_flags and
//   etcd_binary of a launched etcd only when etcd_endpoints is not given; LOCAL: coordinator_port
//   + coordinators - 1 <= 65535;
// - ssh: at least one host, each named once; as many run a coordinator as `coordinators` says
//   (each on a host of its own: more coordinators than hosts is refused, saying so); the servers
//   and workers over all hosts add up to the job's cluster.num_servers and num_workers;
// - slurm: no hosts or ssh section; slurm.nodes >= 1.
// Returns the description; INVALID_ARGUMENT as the header comment says.
absl::StatusOr<ClusterSpec> ParseCluster(absl::string_view text, absl::string_view path,
                                         const config::Job& job);

// Reads the file at `path`: NOT_FOUND when it does not exist, FAILED_PRECONDITION when it cannot
// be read, otherwise as ParseCluster.
absl::StatusOr<ClusterSpec> LoadClusterFile(const std::string& path, const config::Job& job);

}  // namespace launch
}  // namespace ps

#endif  // PS_DEPLOY_LAUNCH_CLUSTER_SPEC_H_

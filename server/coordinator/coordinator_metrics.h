// The Prometheus metrics of a coordinator, read from its status at scrape time.
#ifndef PS_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
#define PS_SERVER_COORDINATOR_COORDINATOR_METRICS_H_

#include <functional>
#include <optional>

#include "common/metrics/registry.h"
#include "proto/coordinator.pb.h"

namespace ps {
namespace coordinator {

// Adds to `registry` a collector that calls `status` at every scrape and emits:
//
//   ps_coordinator_members{role, state}     members by role (server, worker, client) and state:
//                                           alive, dead (heartbeats stopped; for a worker,
//                                           without leaving), left (a worker done), failed (a
//                                           worker that reported a failure); every combination,
//                                           0 included, so that dashboards see the series
//   ps_coordinator_shard_map_version        0 until every server of the job has registered
//   ps_coordinator_lost_shards              shards with no copy left
//   ps_coordinator_failovers_total          primaries promoted since the coordinator started
//   ps_coordinator_clock_min, ps_coordinator_clock_max   the slowest and fastest worker's
//                                           finished step (-1 before any)
//   ps_coordinator_job_failed               1 once the job failed, else 0
//
// `status` runs on the metrics endpoint's thread; it must be thread-safe and outlive `registry`.
// When it returns nullopt (a standby coordinator, which holds no state) nothing is emitted.
void AddCoordinatorCollector(metrics::Registry* registry,
                             std::function<std::optional<rpc::ClusterStatus>()> status);

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_COORDINATOR_METRICS_H_

// The Prometheus metrics of a parameter server that are read from its store at scrape time.
#ifndef PS_SERVER_SERVER_METRICS_H_
#define PS_SERVER_SERVER_METRICS_H_

#include <functional>

#include "common/metrics/registry.h"
#include "proto/ps.pb.h"

namespace ps {
namespace server {

// Adds to `registry` a collector that calls `fill_status` at every scrape and emits, from the
// ServerStatus it fills (nothing while it returns false: the server has no store yet):
//
//   ps_server_rows{table}, ps_server_memory_bytes{table}    rows and bytes this server holds
//                                                           (every copy, primary or replica)
//   ps_server_keys_pulled_total{table}, ps_server_keys_pushed_total{table}
//   ps_server_rows_evicted_total{table,reason}, ps_server_admission_refused_total{table},
//   ps_server_rows_refused_at_cap_total{table}, ps_server_max_rows_per_copy{table}
//   ps_server_memory_budget_bytes, ps_server_memory_allowance_bytes,
//   ps_server_resident_bytes, ps_server_peak_resident_bytes     the memory budget
//   ps_server_tier_rows{table}, ps_server_tier_bytes{table}     the disk tier (0 without one)
//   ps_server_rows_demoted_total{table}, ps_server_rows_promoted_total{table}
//   ps_server_tier_disk_bytes, ps_server_tier_max_disk_bytes, ps_server_tier_refused_rows_total
//   ps_server_late_pushes_dropped_total, ps_server_late_keys_dropped_total
//   ps_server_pull_staleness_mean_steps, ps_server_pull_staleness_max_steps
//   ps_server_applied_step                                  sync mode; -1 before any step
//   ps_server_primary_shards, ps_server_replica_shards
//   ps_server_replica_lag_{records,bytes,seconds}{shard,replica}   ASYNC replication, from
//                                                           the primary
//   ps_server_shard_map_version
//
// `fill_status` runs on the endpoint's thread; it must be thread-safe and outlive the registry.
void AddServerCollector(metrics::Registry* registry,
                        std::function<bool(rpc::ServerStatus*)> fill_status);

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_SERVER_METRICS_H_

#include "server/server_metrics.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace server {

void AddServerCollector(metrics::Registry* registry,
                        std::function<bool(rpc::ServerStatus*)> fill_status) {
  registry->AddCollector([fill_status = std::move(fill_status)](metrics::Sink& sink) {
    rpc::ServerStatus status;
    if (!fill_status(&status)) return;
    for (const rpc::TableStatus& table : status.tables()) {
      const metrics::Labels labels = {{"table", table.name()}};
      sink.Gauge("ps_server_rows", "Rows this server holds (every copy, primary or replica).",
                 labels, table.rows());
      sink.Gauge("ps_server_memory_bytes",
                 "Bytes of rows and optimizer state this server holds (every copy).", labels,
                 table.bytes());
      sink.Counter("ps_server_keys_pulled_total", "Keys in the pulls this server served.", labels,
                   table.keys_pulled());
      sink.Counter("ps_server_keys_pushed_total", "Keys in the pushes this server applied.", labels,
                   table.keys_pushed());
      sink.Counter("ps_server_rows_evicted_total",
                   "Rows evicted from this server's primaries, by reason: ttl (eviction's TTL) or "
                   "budget (the memory budget's policy).",
                   {{"table", table.name()}, {"reason", "ttl"}}, table.evicted_ttl());
      sink.Counter("ps_server_rows_evicted_total",
                   "Rows evicted from this server's primaries, by reason: ttl (eviction's TTL) or "
                   "budget (the memory budget's policy).",
                   {{"table", table.name()}, {"reason", "budget"}}, table.evicted_budget());
      sink.Counter("ps_server_admission_refused_total",
                   "Pushed ids whose gradients were dropped because the table's admission had "
                   "not admitted them yet.",
                   labels, table.admission_refused());
      sink.Counter("ps_server_rows_refused_at_cap_total",
                   "Rows not created because their copy was at its row cap (memory budget).",
                   labels, table.full_refused());
      sink.Gauge("ps_server_max_rows_per_copy",
                 "The most rows one copy of the table may hold on this server (0: no cap).", labels,
                 static_cast<double>(table.max_rows_per_copy()));
      sink.Gauge("ps_server_tier_rows",
                 "Rows of this server's copies in the disk tier (--tier_dir; 0 without one).",
                 labels, static_cast<double>(table.tier_rows()));
      sink.Gauge("ps_server_tier_bytes",
                 "The bytes of those rows as written (keys and values, before RocksDB's "
                 "overheads).",
                 labels, static_cast<double>(table.tier_bytes()));
      sink.Counter("ps_server_rows_demoted_total",
                   "Rows moved from memory to the disk tier by the memory budget.", labels,
                   table.demoted());
      sink.Counter("ps_server_rows_promoted_total",
                   "Rows of pulls and pushes found in the disk tier and moved back to memory "
                   "(with ps_server_keys_pulled_total: the lookups memory missed).",
                   labels, table.promoted());
    }
    sink.Gauge("ps_server_memory_budget_bytes",
               "The server's memory budget (--memory_budget_mb; 0: none).", {},
               static_cast<double>(status.memory_budget_bytes()));
    sink.Gauge("ps_server_memory_allowance_bytes",
               "What the memory budget leaves the tables' rows, after the reserve and what the "
               "process held before any row.",
               {}, static_cast<double>(status.memory_allowance_bytes()));
    sink.Gauge("ps_server_resident_bytes", "The server's resident set.", {},
               static_cast<double>(status.resident_bytes()));
    sink.Gauge("ps_server_peak_resident_bytes",
               "The largest resident set the memory keeper has seen.", {},
               static_cast<double>(status.peak_resident_bytes()));
    sink.Gauge("ps_server_tier_disk_bytes", "Bytes in the disk tier's directory.", {},
               static_cast<double>(status.tier_disk_bytes()));
    sink.Gauge("ps_server_tier_max_disk_bytes",
               "The disk tier's cap (--tier_max_disk_gb; 0: no tier).", {},
               static_cast<double>(status.tier_max_disk_bytes()));
    sink.Counter("ps_server_tier_refused_rows_total",
                 "Rows the memory budget pushed out that the disk tier refused at its cap "
                 "(dropped; counted as evicted by the budget too).",
                 {}, static_cast<double>(status.tier_refused_rows()));
    sink.Counter("ps_server_late_pushes_dropped_total",
                 "Sync mode: pushes for a step already applied without them (stragglers outside "
                 "the quorum), dropped.",
                 {}, status.late_pushes_dropped());
    sink.Counter("ps_server_late_keys_dropped_total", "The keys of the late pushes dropped.", {},
                 status.late_keys_dropped());
    sink.Gauge("ps_server_pull_staleness_mean_steps",
               "Pulls that carried their step: the mean number of steps of pushes each might have "
               "been missing.",
               {}, status.mean_pull_staleness());
    sink.Gauge("ps_server_pull_staleness_max_steps",
               "Pulls that carried their step: the most steps of pushes one might have missed.", {},
               static_cast<double>(status.max_pull_staleness()));
    sink.Gauge("ps_server_applied_step", "Sync mode: the newest step applied (-1 before any).", {},
               static_cast<double>(status.applied_step()));
    sink.Gauge("ps_server_primary_shards", "Shards this server is the primary of.", {},
               status.primary_shards_size());
    sink.Gauge("ps_server_replica_shards",
               "Shards this server holds a copy of without being their primary.", {},
               status.replica_shards_size());
    sink.Gauge("ps_server_shard_map_version", "The version of the shard map this server serves.",
               {}, static_cast<double>(status.map_version()));
    sink.Gauge("ps_server_shared_regions",
               "Regions of shared memory lent to clients on this host (--shared_memory_mb).", {},
               status.shared_regions());
    sink.Gauge("ps_server_shared_region_bytes", "The bytes of those regions.", {},
               static_cast<double>(status.shared_region_bytes()));
    sink.Counter("ps_server_shared_regions_opened_total",
                 "Regions of shared memory lent since the server started.", {},
                 static_cast<double>(status.shared_regions_opened()));
    for (const rpc::ShardProgress& shard : status.shards()) {
      for (const rpc::ReplicaLag& lag : shard.replica_lags()) {
        const metrics::Labels labels = {{"shard", absl::StrCat(shard.shard())},
                                        {"replica", absl::StrCat(lag.server_id())}};
        sink.Gauge("ps_server_replica_lag_records",
                   "Records this primary sent a replica that it has not acknowledged yet.", labels,
                   lag.records());
        sink.Gauge("ps_server_replica_lag_bytes", "The bytes of those records.", labels,
                   lag.bytes());
        sink.Gauge("ps_server_replica_lag_seconds", "The age of the oldest of those records.",
                   labels, lag.millis() / 1000.0);
      }
    }
  });
}

}  // namespace server
}  // namespace ps

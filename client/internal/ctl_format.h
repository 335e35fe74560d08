// What ps_ctl prints for the commands that ask a running cluster (status, shards, tables, hotkeys,
// metrics, checkpoint): the coordinator's answers turned into aligned text for people and into one
// JSON object for scripts. Pure functions of the messages: no RPCs here (see ctl_rpc.h).
//
// JSON: a message the coordinator returned as it is is printed with protobuf's JSON printer
// (field names as in the .proto, zero values included; protobuf writes 64-bit integers as
// strings). Computed objects (shards, tables, hotkeys, metrics) are written here: integers as
// JSON numbers, rates as numbers with up to 6 significant digits.
#ifndef PS_CLIENT_INTERNAL_CTL_FORMAT_H_
#define PS_CLIENT_INTERNAL_CTL_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "proto/coordinator.pb.h"

namespace ps {
namespace client_internal {

// One look at the cluster: the coordinator's status and every server's (its fan-out).
struct ClusterSample {
  rpc::ClusterStatus cluster;
  rpc::ServerStatuses servers;
  // When the servers' statuses arrived.
  absl::Time taken;
};

// The servers that are alive in the map but did not answer, one line each:
// "server 1 (127.0.0.1:7001): UNAVAILABLE: ...". Empty when every live server answered; servers
// the map marks dead are not listed (their absence is in the map).
std::vector<std::string> ServerFailures(const rpc::ServerStatuses& servers);

// `message` as one line of JSON (field names as in the .proto, default values included).
std::string ToJson(const google::protobuf::Message& message);

// The coordinators' lines of `ps_ctl status` with etcd: the leader, its term and when it took
// over (as of `now`), the lease, the standbys; then every etcd endpoint, healthy with its round
// trip (and which is raft's leader) or DOWN with why.
std::string LeadershipText(const rpc::Leadership& leadership, absl::Time now);

// `ps_ctl status`: members, the shard map with every shard's copies, clocks, the applied step, and
// each server's figures (primary shards, applied step, late pushes, pull staleness; its memory
// and disk tier when it has a memory budget or a tier; and per table its dim, optimizer, rows,
// bytes and keys pulled and pushed), or why a server has none.
std::string StatusText(const std::string& coordinator, const rpc::ClusterStatus& cluster,
                       const rpc::ServerStatuses& servers);
// {"coordinator": "HOST:PORT", "cluster": ClusterStatus, "servers": ServerStatuses}.
std::string StatusJson(const std::string& coordinator, const rpc::ClusterStatus& cluster,
                       const rpc::ServerStatuses& servers);

// `ps_ctl shards`: per shard its primary, replicas, copies catching up, the primary's applied
// sequence, and the rows and bytes of the primary's copy (all tables); then per server its
// shards, rows and bytes.
std::string ShardsText(const rpc::ClusterStatus& cluster, const rpc::ServerStatuses& servers);
// {"map_version", "num_shards", "shards": [{"shard", "lost", "primary", "replicas",
// "catching_up", "applied_sequence", "rows", "bytes"}], "servers": [{"server_id", "address",
// "alive", "answered", "primary_shards", "replica_shards", "rows", "bytes"}],
// "servers_failed": [...]}. A figure a server did not give is null.
std::string ShardsJson(const rpc::ClusterStatus& cluster, const rpc::ServerStatuses& servers);

// One table summed over the servers that answered.
struct TableTotals {
  std::string name;
  uint32_t dim = 0;
  std::string optimizer;
  // Each row once: the primaries' copies.
  uint64_t rows = 0;
  uint64_t bytes = 0;
  // Every copy: primaries, replicas and copies catching up.
  uint64_t rows_all_copies = 0;
  uint64_t bytes_all_copies = 0;
  uint64_t keys_pulled = 0;
  uint64_t keys_pushed = 0;
  uint64_t pull_requests = 0;
  uint64_t push_requests = 0;
  // Bounds (server/README.md#memory-budget), over every server.
  uint64_t evicted_ttl = 0;
  uint64_t evicted_budget = 0;
  uint64_t admission_refused = 0;
  uint64_t full_refused = 0;
  // The disk tier (server/README.md#tier), over every server: rows and their bytes in the tiers
  // now, rows moved from memory to a tier and back (a promotion is a pull's or push's row found
  // in the tier).
  uint64_t tier_rows = 0;
  uint64_t tier_bytes = 0;
  uint64_t demoted = 0;
  uint64_t promoted = 0;
};

// The share of a table's pulled keys that memory held: 1 - promoted / keys_pulled, at least 0
// (promotions count pushes' rows too, so they may outnumber the keys pulled). nullopt when no
// key was pulled.
std::optional<double> RamHitRate(const TableTotals& table);

// The servers' disk tiers, summed over the servers that answered.
struct TierTotals {
  // Servers with a tier (ServerStatus.tier_max_disk_bytes > 0).
  int servers = 0;
  uint64_t disk_bytes = 0;
  uint64_t max_disk_bytes = 0;
  // Rows the memory budget pushed out that a tier refused at its cap (dropped).
  uint64_t refused_rows = 0;
};

TierTotals SumTiers(const rpc::ServerStatuses& servers);

// The tables in the order the first answering server lists them (the job's).
std::vector<TableTotals> SumTables(const rpc::ServerStatuses& servers);
// `ps_ctl tables`: a line per table; then, when any table has bounds at work or any server a
// disk tier, the bounds (and the tier's columns and totals when there is a tier).
std::string TablesText(const rpc::ServerStatuses& servers);
// {"tables": [TableTotals' fields and "ram_hit_rate" (null when no key was pulled)],
// "tier_disk_bytes", "tier_max_disk_bytes", "tier_refused_rows" (TierTotals),
// "servers_failed": [...]}.
std::string TablesJson(const rpc::ServerStatuses& servers);

// The hot keys of one table merged over the servers.
struct MergedHotKeys {
  std::string table;
  // Hottest first, at most k of each. count - error <= the key's sampled occurrences on the
  // servers that answered <= count (see MergeHotKeys).
  std::vector<rpc::HotKey> pulled;
  std::vector<rpc::HotKey> pushed;
  // The table's keys pulled and pushed on the servers that answered (TableStatus), for shares.
  uint64_t keys_pulled = 0;
  uint64_t keys_pushed = 0;
  // The servers' sampling: one key in this many counted (ServerStatus.hot_keys_sample_every;
  // the largest when they differ; 0 when no server answered or none samples).
  uint32_t sample_every = 0;
};

// How many hot keys to ask each server for when showing `k`: more than k (64, at most 256), so
// that a key hot in the sum but lower on one server is still listed by it, and the bound for a
// key a server does not list (its smallest listed count) is small.
uint32_t HotKeysToAsk(uint32_t k);

// Merges the servers' hot keys of `table` (each server listed at most `asked` of each direction).
// A key's count is the sum of the counts of the servers that list it, plus, for each answering
// server that does not, that server's smallest listed count when its list is full (a key it does
// not list may have been counted up to that), which is added to the error too; a server whose
// list is not full listed every key it sampled. So count - error <= true <= count holds for the
// sum as it does per server. Sorted by count, then id; the first k kept.
MergedHotKeys MergeHotKeys(const rpc::ServerStatuses& servers, const std::string& table,
                           uint32_t asked, uint32_t k);
// `ps_ctl hotkeys`.
std::string HotKeysText(const MergedHotKeys& hot);
// {"table", "sample_every", "keys_pulled", "keys_pushed", "pulled": [{"id", "count", "error"}],
// "pushed": [...],
// "servers_failed": [...]}.
std::string HotKeysJson(const MergedHotKeys& hot, const rpc::ServerStatuses& servers);

// Rates between two samples.
struct ServerRates {
  uint32_t server_id = 0;
  std::string address;
  // Both samples have the server's status, and its counters did not go back (a restart).
  bool measured = false;
  double keys_pulled_per_s = 0;
  double keys_pushed_per_s = 0;
  double pull_requests_per_s = 0;
  double push_requests_per_s = 0;
  // What it holds at the second sample (every copy); 0 when it did not answer.
  uint64_t rows = 0;
  uint64_t bytes = 0;
};

struct WorkerRates {
  int32_t rank = 0;
  std::string state;  // training, left, FAILED or SILENT
  int64_t steps = 0;  // steps done at the second sample: clock + 1
  double steps_per_s = 0;
};

struct ClusterRates {
  double seconds = 0;  // between the two samples' server statuses
  std::vector<ServerRates> servers;
  ServerRates total;  // the measured servers summed; rows and bytes of every answering server
  std::vector<WorkerRates> workers;  // by rank
  int64_t min_clock = -1;            // the clocks at the second sample
  int64_t max_clock = -1;
};

ClusterRates ComputeRates(const ClusterSample& before, const ClusterSample& after);
// `ps_ctl metrics`.
std::string MetricsText(const ClusterRates& rates);
// {"interval_s", "servers": [ServerRates' fields], "total": {...}, "workers": [...],
// "min_clock", "max_clock", "servers_failed": [...]} (failures of the second sample).
std::string MetricsJson(const ClusterRates& rates, const rpc::ServerStatuses& after);

// `ps_ctl checkpoint`.
std::string CheckpointText(const rpc::CheckpointResponse& response);

// "clocks: steps done: slowest worker N, fastest M; workers: 2 of 2 registered: 1 training,
// 1 left (done)". Steps done are the clocks + 1; the slowest is unknown until every rank
// registered.
std::string ClocksLine(const rpc::ClusterStatus& status);

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_CTL_FORMAT_H_

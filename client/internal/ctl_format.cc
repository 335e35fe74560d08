#include "client/internal/ctl_format.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/coordinator_client.h"
#include "common/role_name.h"
#include "google/protobuf/util/json_util.h"

namespace ps {
namespace client_internal {
namespace {

// ---- Text ----

// Rows of cells printed as columns, each as wide as its widest cell plus two spaces.
class Columns {
 public:
  explicit Columns(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render(const std::string& indent = "  ") const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      if (width.size() < row.size()) width.resize(row.size(), 0);
      for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t c = 0; c < row.size(); ++c) {
        line += row[c];
        if (c + 1 < row.size()) line.append(width[c] - row[c].size() + 2, ' ');
      }
      absl::StrAppend(&out, line, "\n");
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// 1234567 -> "1.2 MB" (decimal units, as the rest of ps_ctl).
std::string Bytes(uint64_t bytes) {
  if (bytes < 1000) return absl::StrCat(bytes, " B");
  const char* units[] = {"kB", "MB", "GB", "TB", "PB"};
  double v = bytes / 1000.0;
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, units[u]);
}

// A rate for people: 1523400 -> "1.52M", 2345 -> "2.35k", 12.5 -> "12.5".
std::string Rate(double per_s) {
  if (per_s >= 1e6) return absl::StrFormat("%.2fM", per_s / 1e6);
  if (per_s >= 1e3) return absl::StrFormat("%.2fk", per_s / 1e3);
  return absl::StrFormat("%.1f", per_s);
}

const char* WorkerState(const rpc::MemberStatus& m) {
  if (m.failed()) return "FAILED";
  if (m.left()) return "left";
  return m.alive() ? "training" : "SILENT";
}

// ---- JSON ----

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string Number(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

std::string Bool(bool b) { return b ? "true" : "false"; }

using Fields = std::vector<std::pair<std::string, std::string>>;

std::string Object(const Fields& fields) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : fields) parts.push_back(absl::StrCat(Quote(name), ":", value));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string Array(const std::vector<std::string>& items) {
  return absl::StrCat("[", absl::StrJoin(items, ","), "]");
}

std::string Strings(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& s : items) quoted.push_back(Quote(s));
  return Array(quoted);
}

// ---- Figures ----

// The answering server's status by server_id.
std::map<uint32_t, const rpc::ServerStatus*> Answered(const rpc::ServerStatuses& servers) {
  std::map<uint32_t, const rpc::ServerStatus*> answered;
  for (const rpc::ServerStatusReply& reply : servers.servers()) {
    if (reply.has_status()) answered[reply.server_id()] = &reply.status();
  }
  return answered;
}

// Per shard: the rows and bytes of the copy on `server`, if it answered.
struct CopySize {
  bool known = false;
  uint64_t rows = 0;
  uint64_t bytes = 0;
};

CopySize SizeOf(const std::map<uint32_t, const rpc::ServerStatus*>& answered, uint32_t server,
                uint32_t shard) {
  CopySize size;
  auto it = answered.find(server);
  if (it == answered.end()) return size;
  for (const rpc::ShardSize& s : it->second->shard_sizes()) {
    if (s.shard() != shard) continue;
    size.known = true;
    size.rows = s.rows();
    size.bytes = s.bytes();
  }
  return size;
}

uint64_t PrimarySequence(const rpc::ClusterStatus& cluster, uint32_t shard, bool* known) {
  *known = false;
  if (shard >= static_cast<uint32_t>(cluster.shards_size())) return 0;
  for (const rpc::ShardCopyStatus& copy : cluster.shards(shard).copies()) {
    if (!copy.primary()) continue;
    *known = true;
    return copy.applied_sequence();
  }
  return 0;
}

std::string Ids(const google::protobuf::RepeatedField<uint32_t>& ids) {
  return ids.empty() ? std::string("-") : absl::StrJoin(ids, ",");
}

std::string IdsJson(const google::protobuf::RepeatedField<uint32_t>& ids) {
  return absl::StrCat("[", absl::StrJoin(ids, ","), "]");
}

// Per server: its primary, replica and catching-up shards in the map, and what it holds.
struct ServerShards {
  int primary = 0;
  int replica = 0;
  int catching_up = 0;
};

std::map<uint32_t, ServerShards> CountShards(const rpc::ShardMap& map) {
  std::map<uint32_t, ServerShards> count;
  for (const rpc::ShardAssignment& shard : map.shards()) {
    if (shard.lost()) continue;
    ++count[shard.primary()].primary;
    for (uint32_t r : shard.replicas()) ++count[r].replica;
    for (uint32_t r : shard.catching_up()) ++count[r].catching_up;
  }
  return count;
}

// A server's rows and bytes over every copy it holds.
std::pair<uint64_t, uint64_t> Held(const rpc::ServerStatus& status) {
  uint64_t rows = 0, bytes = 0;
  for (const rpc::TableStatus& t : status.tables()) {
    rows += t.rows();
    bytes += t.bytes();
  }
  return {rows, bytes};
}

struct Traffic {
  uint64_t keys_pulled = 0, keys_pushed = 0, pull_requests = 0, push_requests = 0;
};

Traffic SumTraffic(const rpc::ServerStatus& status) {
  Traffic t;
  for (const rpc::TableStatus& table : status.tables()) {
    t.keys_pulled += table.keys_pulled();
    t.keys_pushed += table.keys_pushed();
    t.pull_requests += table.pull_requests();
    t.push_requests += table.push_requests();
  }
  return t;
}

std::vector<rpc::HotKey> Merge(const rpc::ServerStatuses& servers, const std::string& table,
                               uint32_t asked, uint32_t k, bool pulled) {
  struct Sum {
    uint64_t count = 0;
    uint64_t error = 0;
    uint64_t listed_bound = 0;  // the bounds of the servers that list it, to take back
  };
  absl::flat_hash_map<uint64_t, Sum> sums;
  uint64_t bounds = 0;  // every answering server's bound for a key it does not list
  for (const rpc::ServerStatusReply& reply : servers.servers()) {
    if (!reply.has_status() || reply.status().hot_keys_table() != table) continue;
    const auto& list = pulled ? reply.status().hot_pulled() : reply.status().hot_pushed();
    const uint64_t bound =
        list.size() >= static_cast<int>(asked) && !list.empty() ? list.rbegin()->count() : 0;
    bounds += bound;
    for (const rpc::HotKey& h : list) {
      Sum& sum = sums[h.id()];
      sum.count += h.count();
      sum.error += h.error();
      sum.listed_bound += bound;
    }
  }
  std::vector<rpc::HotKey> merged;
  for (const auto& [id, sum] : sums) {
    rpc::HotKey h;
    h.set_id(id);
    const uint64_t unlisted = bounds - sum.listed_bound;
    h.set_count(sum.count + unlisted);
    h.set_error(sum.error + unlisted);
    merged.push_back(h);
  }
  std::sort(merged.begin(), merged.end(), [](const rpc::HotKey& a, const rpc::HotKey& b) {
    return a.count() != b.count() ? a.count() > b.count() : a.id() < b.id();
  });
  if (merged.size() > k) merged.resize(k);
  return merged;
}

std::string HotKeysListText(const std::vector<rpc::HotKey>& keys, uint64_t total) {
  if (keys.empty()) return "  (none sampled yet)\n";
  Columns columns({"rank", "key", "count", "error", "share"});
  int rank = 0;
  for (const rpc::HotKey& h : keys) {
    columns.Add({absl::StrCat(++rank), absl::StrCat(h.id()), absl::StrCat(h.count()),
                 absl::StrCat(h.error()),
                 total > 0 ? absl::StrFormat("%.2f%%", 100.0 * h.count() / total) : "-"});
  }
  return columns.Render();
}

std::string HotKeysListJson(const std::vector<rpc::HotKey>& keys) {
  std::vector<std::string> items;
  for (const rpc::HotKey& h : keys) {
    items.push_back(Object({{"id", absl::StrCat(h.id())},
                            {"count", absl::StrCat(h.count())},
                            {"error", absl::StrCat(h.error())}}));
  }
  return Array(items);
}

std::string ServerRatesJson(const ServerRates& r, bool with_id) {
  Fields fields;
  if (with_id) {
    fields.push_back({"server_id", absl::StrCat(r.server_id)});
    fields.push_back({"address", Quote(r.address)});
    fields.push_back({"measured", Bool(r.measured)});
  }
  auto rate = [&](double v) { return r.measured || !with_id ? Number(v) : std::string("null"); };
  fields.push_back({"keys_pulled_per_s", rate(r.keys_pulled_per_s)});
  fields.push_back({"keys_pushed_per_s", rate(r.keys_pushed_per_s)});
  fields.push_back({"pull_requests_per_s", rate(r.pull_requests_per_s)});
  fields.push_back({"push_requests_per_s", rate(r.push_requests_per_s)});
  fields.push_back({"rows", absl::StrCat(r.rows)});
  fields.push_back({"bytes", absl::StrCat(r.bytes)});
  return Object(fields);
}

}  // namespace

std::vector<std::string> ServerFailures(const rpc::ServerStatuses& servers) {
  std::vector<std::string> failures;
  for (const rpc::ServerStatusReply& reply : servers.servers()) {
    if (reply.has_status() || !reply.alive()) continue;
    failures.push_back(
        absl::StrFormat("server %u (%s): %s", reply.server_id(), reply.address(), reply.error()));
  }
  return failures;
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(message, &json, options);
  // Printing a message of our own types cannot fail; say so loudly if it ever does.
  if (!printed.ok()) return Object({{"error", Quote(printed.ToString())}});
  return json;
}

std::string ClocksLine(const rpc::ClusterStatus& status) {
  int registered = 0;
  int training = 0, left = 0, failed = 0, silent = 0;
  for (const auto& m : status.members()) {
    if (m.role() != rpc::WORKER) continue;
    ++registered;
    const std::string state = WorkerState(m);
    training += state == "training";
    left += state == "left";
    failed += state == "FAILED";
    silent += state == "SILENT";
  }
  const rpc::ClockState& clocks = status.clocks();
  if (registered == 0) {
    return absl::StrFormat("clocks: no worker has registered yet (the job expects %u)",
                           status.num_workers());
  }
  std::string line = static_cast<uint32_t>(registered) >= status.num_workers()
                         ? absl::StrFormat("clocks: steps done: slowest worker %d, fastest %d",
                                           clocks.min_clock() + 1, clocks.max_clock() + 1)
                         : absl::StrFormat("clocks: steps done: fastest worker %d, slowest unknown",
                                           clocks.max_clock() + 1);
  absl::StrAppendFormat(&line, "; workers: %d of %u registered", registered, status.num_workers());
  std::vector<std::string> states;
  if (training > 0) states.push_back(absl::StrCat(training, " training"));
  if (left > 0) states.push_back(absl::StrCat(left, " left (done)"));
  if (failed > 0) states.push_back(absl::StrCat(failed, " FAILED"));
  if (silent > 0) states.push_back(absl::StrCat(silent, " SILENT"));
  absl::StrAppend(&line, ": ", absl::StrJoin(states, ", "));
  return line;
}

std::string LeadershipText(const rpc::Leadership& leadership, absl::Time now) {
  std::string out;
  const absl::Duration in_office = now - absl::FromUnixMillis(leadership.took_office_unix_ms());
  absl::StrAppendFormat(&out, "coordinators: leader %s (term %d, took over %s ago, lease %d s)",
                        leadership.leader(), leadership.terms(),
                        absl::FormatDuration(absl::Trunc(in_office, absl::Seconds(1))),
                        leadership.lease_ttl_s());
  if (leadership.standbys_size() == 0) {
    out += ", no standby\n";
  } else {
    absl::StrAppendFormat(&out, ", standbys %s\n", absl::StrJoin(leadership.standbys(), ", "));
  }
  std::vector<std::string> members;
  for (const rpc::EtcdEndpoint& e : leadership.etcd()) {
    if (e.healthy()) {
      members.push_back(absl::StrFormat("%s healthy %.1f ms%s", e.endpoint(), e.latency_ms(),
                                        e.is_raft_leader() ? " (raft leader)" : ""));
    } else {
      members.push_back(absl::StrFormat("%s DOWN (%s)", e.endpoint(), e.error()));
    }
  }
  absl::StrAppendFormat(&out, "etcd, prefix %s: %s\n", leadership.prefix(),
                        absl::StrJoin(members, "; "));
  return out;
}

std::string StatusText(const std::string& coordinator, const rpc::ClusterStatus& status,
                       const rpc::ServerStatuses& servers) {
  std::string out;
  absl::StrAppendFormat(&out, "job \"%s\", coordinator %s\n", status.job_name(), coordinator);
  if (status.has_leadership()) out += LeadershipText(status.leadership(), absl::Now());
  if (status.has_failure()) {
    absl::StrAppendFormat(&out, "JOB FAILED: %s\n", DescribeJobFailure(status.failure()));
  }
  absl::StrAppendFormat(&out, "members: %d\n", status.members_size());
  // A worker's state: training, left (done), FAILED (it reported an error) or SILENT (its
  // heartbeats stopped without its leaving); its steps done (clock + 1).
  absl::StrAppendFormat(&out, "  %-6s %-7s %-5s %-24s %-6s %-9s %-7s %s\n", "id", "role", "rank",
                        "address", "alive", "state", "steps", "last seen");
  for (const auto& m : status.members()) {
    const bool worker = m.role() == rpc::WORKER;
    absl::StrAppendFormat(&out, "  %-6u %-7s %-5d %-24s %-6s %-9s %-7s %d ms ago\n", m.member_id(),
                          RoleName(m.role()), m.rank(), m.address().empty() ? "-" : m.address(),
                          m.alive() ? "yes" : "NO", worker ? WorkerState(m) : "-",
                          worker ? absl::StrCat(m.clock() + 1) : std::string("-"),
                          m.last_seen_ms());
  }

  const rpc::ShardMap& map = status.shard_map();
  if (map.version() == 0) {
    absl::StrAppend(&out, "shard map: not ready (fewer servers registered than the job expects)\n");
  } else {
    absl::StrAppendFormat(&out, "shard map: version %d, %u shards\n", map.version(),
                          map.num_shards());
    const std::map<uint32_t, ServerShards> counts = CountShards(map);
    int lost = 0;
    for (const auto& shard : map.shards()) lost += shard.lost() ? 1 : 0;
    for (const auto& server : map.servers()) {
      const uint32_t id = server.server_id();
      const auto it = counts.find(id);
      const ServerShards c = it == counts.end() ? ServerShards() : it->second;
      absl::StrAppendFormat(&out, "  server %-3u %-24s %-5s primary %d, replica %d shards", id,
                            server.address(), server.alive() ? "alive" : "DEAD", c.primary,
                            c.replica);
      if (c.catching_up > 0) absl::StrAppendFormat(&out, ", catching up %d", c.catching_up);
      out += "\n";
    }
    absl::StrAppendFormat(&out, "failovers: %d, lost shards: %d\n", status.failovers(), lost);
    // Every shard's copies: server:sequence, a replica's lag as its primary sees it.
    absl::StrAppendFormat(&out, "  %-6s %-22s %s\n", "shard", "primary (sequence)",
                          "replicas (sequence, lag)");
    for (const auto& shard : status.shards()) {
      if (shard.lost()) {
        absl::StrAppendFormat(
            &out, "  %-6u LOST: no copy left (DATA_LOSS until a checkpoint restores it)\n",
            shard.shard());
        continue;
      }
      std::string primary;
      std::string others;
      for (const auto& copy : shard.copies()) {
        if (copy.primary()) {
          primary = absl::StrFormat("%u (%d)", copy.server_id(), copy.applied_sequence());
          continue;
        }
        absl::StrAppendFormat(&others, "%s%u (%d, %d records / %d bytes / %d ms behind)%s",
                              others.empty() ? "" : ", ", copy.server_id(), copy.applied_sequence(),
                              copy.lag().records(), copy.lag().bytes(), copy.lag().millis(),
                              copy.catching_up() ? " catching up" : "");
      }
      absl::StrAppendFormat(&out, "  %-6u %-22s %s\n", shard.shard(), primary,
                            others.empty() ? "-" : others);
    }
  }
  absl::StrAppend(&out, ClocksLine(status), "\n");
  if (status.has_applied_step()) {
    absl::StrAppendFormat(
        &out, "applied step: %s (servers: the last step every shard applied)\n",
        status.applied_step() < 0 ? "none yet" : absl::StrCat(status.applied_step()));
  }
  // The servers' own figures, from the coordinator's fan-out.
  for (const rpc::ServerStatusReply& reply : servers.servers()) {
    if (!reply.has_status()) {
      absl::StrAppendFormat(&out, "server %u (%s): %s\n", reply.server_id(), reply.address(),
                            reply.error());
      continue;
    }
    const rpc::ServerStatus& s = reply.status();
    absl::StrAppendFormat(&out,
                          "server %u: %d primary shards, applied step %d, late pushes dropped %d "
                          "(%d keys), pull staleness mean %.2f max %d steps\n",
                          s.server_id(), s.primary_shards_size(), s.applied_step(),
                          s.late_pushes_dropped(), s.late_keys_dropped(), s.mean_pull_staleness(),
                          s.max_pull_staleness());
    if (s.memory_budget_bytes() > 0 || s.tier_max_disk_bytes() > 0) {
      std::string memory = absl::StrCat("  memory: resident ", Bytes(s.resident_bytes()), " (peak ",
                                        Bytes(s.peak_resident_bytes()), ")");
      if (s.memory_budget_bytes() > 0) {
        absl::StrAppend(&memory, ", budget ", Bytes(s.memory_budget_bytes()),
                        " (tables' allowance ", Bytes(s.memory_allowance_bytes()), ")");
      }
      if (s.tier_max_disk_bytes() > 0) {
        absl::StrAppend(&memory, "; disk tier ", Bytes(s.tier_disk_bytes()), " of ",
                        Bytes(s.tier_max_disk_bytes()), ", ", s.tier_refused_rows(),
                        " rows refused at the cap");
      }
      absl::StrAppend(&out, memory, "\n");
    }
    for (const auto& t : s.tables()) {
      absl::StrAppendFormat(&out,
                            "  table %-16s dim %-5u optimizer %-8s rows %-12d bytes %-12d keys "
                            "pulled %d, pushed %d\n",
                            t.name(), t.dim(), t.optimizer(), t.rows(), t.bytes(), t.keys_pulled(),
                            t.keys_pushed());
    }
  }
  return out;
}

std::string StatusJson(const std::string& coordinator, const rpc::ClusterStatus& cluster,
                       const rpc::ServerStatuses& servers) {
  return Object({{"coordinator", Quote(coordinator)},
                 {"cluster", ToJson(cluster)},
                 {"servers", ToJson(servers)}});
}

std::string ShardsText(const rpc::ClusterStatus& cluster, const rpc::ServerStatuses& servers) {
  const rpc::ShardMap& map = cluster.shard_map();
  if (map.version() == 0) {
    return "shard map: not ready (fewer servers registered than the job expects)\n";
  }
  const auto answered = Answered(servers);
  std::string out = absl::StrFormat(
      "shard map: version %d, %u shards, %d servers (rows and bytes: the primary's copy, all "
      "tables)\n",
      map.version(), map.num_shards(), map.servers_size());
  Columns shards({"shard", "primary", "replicas", "catching up", "applied seq", "rows", "bytes"});
  for (const rpc::ShardAssignment& shard : map.shards()) {
    if (shard.lost()) {
      shards.Add({absl::StrCat(shard.shard()), "LOST", "-", "-", "-", "-", "-"});
      continue;
    }
    bool seq_known = false;
    const uint64_t seq = PrimarySequence(cluster, shard.shard(), &seq_known);
    const CopySize size = SizeOf(answered, shard.primary(), shard.shard());
    shards.Add({absl::StrCat(shard.shard()), absl::StrCat(shard.primary()), Ids(shard.replicas()),
                Ids(shard.catching_up()), seq_known ? absl::StrCat(seq) : "?",
                size.known ? absl::StrCat(size.rows) : "?", size.known ? Bytes(size.bytes) : "?"});
  }
  out += shards.Render();
  out += "servers (rows and bytes: every copy the server holds):\n";
  const std::map<uint32_t, ServerShards> counts = CountShards(map);
  Columns table(
      {"server", "address", "state", "primary", "replica", "catching up", "rows", "bytes"});
  for (const rpc::ServerInfo& server : map.servers()) {
    const auto c = counts.find(server.server_id());
    const ServerShards n = c == counts.end() ? ServerShards() : c->second;
    const auto a = answered.find(server.server_id());
    std::string rows = "?", bytes = "?";
    if (a != answered.end()) {
      const auto [r, b] = Held(*a->second);
      rows = absl::StrCat(r);
      bytes = Bytes(b);
    }
    table.Add({absl::StrCat(server.server_id()), server.address(),
               server.alive() ? "alive" : "DEAD", absl::StrCat(n.primary), absl::StrCat(n.replica),
               absl::StrCat(n.catching_up), rows, bytes});
  }
  out += table.Render();
  return out;
}

std::string ShardsJson(const rpc::ClusterStatus& cluster, const rpc::ServerStatuses& servers) {
  const rpc::ShardMap& map = cluster.shard_map();
  const auto answered = Answered(servers);
  std::vector<std::string> shards;
  for (const rpc::ShardAssignment& shard : map.shards()) {
    bool seq_known = false;
    const uint64_t seq = PrimarySequence(cluster, shard.shard(), &seq_known);
    const CopySize size =
        shard.lost() ? CopySize() : SizeOf(answered, shard.primary(), shard.shard());
    shards.push_back(Object({
        {"shard", absl::StrCat(shard.shard())},
        {"lost", Bool(shard.lost())},
        {"primary", shard.lost() ? "null" : absl::StrCat(shard.primary())},
        {"replicas", IdsJson(shard.replicas())},
        {"catching_up", IdsJson(shard.catching_up())},
        {"applied_sequence", seq_known ? absl::StrCat(seq) : "null"},
        {"rows", size.known ? absl::StrCat(size.rows) : "null"},
        {"bytes", size.known ? absl::StrCat(size.bytes) : "null"},
    }));
  }
  const std::map<uint32_t, ServerShards> counts = CountShards(map);
  std::vector<std::string> server_items;
  for (const rpc::ServerInfo& server : map.servers()) {
    const auto c = counts.find(server.server_id());
    const ServerShards n = c == counts.end() ? ServerShards() : c->second;
    const auto a = answered.find(server.server_id());
    std::string rows = "null", bytes = "null";
    if (a != answered.end()) {
      const auto [r, b] = Held(*a->second);
      rows = absl::StrCat(r);
      bytes = absl::StrCat(b);
    }
    server_items.push_back(Object({{"server_id", absl::StrCat(server.server_id())},
                                   {"address", Quote(server.address())},
                                   {"alive", Bool(server.alive())},
                                   {"answered", Bool(a != answered.end())},
                                   {"primary_shards", absl::StrCat(n.primary)},
                                   {"replica_shards", absl::StrCat(n.replica)},
                                   {"catching_up_shards", absl::StrCat(n.catching_up)},
                                   {"rows", rows},
                                   {"bytes", bytes}}));
  }
  return Object({{"map_version", absl::StrCat(map.version())},
                 {"num_shards", absl::StrCat(map.num_shards())},
                 {"shards", Array(shards)},
                 {"servers", Array(server_items)},
                 {"servers_failed", Strings(ServerFailures(servers))}});
}

std::vector<TableTotals> SumTables(const rpc::ServerStatuses& servers) {
  std::vector<TableTotals> tables;
  absl::flat_hash_map<std::string, size_t> index;
  for (const rpc::ServerStatusReply& reply : servers.servers()) {
    if (!reply.has_status()) continue;
    for (const rpc::TableStatus& t : reply.status().tables()) {
      auto [it, added] = index.emplace(t.name(), tables.size());
      if (added) {
        tables.emplace_back();
        tables.back().name = t.name();
        tables.back().dim = t.dim();
        tables.back().optimizer = t.optimizer();
      }
      TableTotals& sum = tables[it->second];
      sum.rows += t.primary_rows();
      sum.bytes += t.primary_bytes();
      sum.rows_all_copies += t.rows();
      sum.bytes_all_copies += t.bytes();
      sum.keys_pulled += t.keys_pulled();
      sum.keys_pushed += t.keys_pushed();
      sum.pull_requests += t.pull_requests();
      sum.push_requests += t.push_requests();
      sum.evicted_ttl += t.evicted_ttl();
      sum.evicted_budget += t.evicted_budget();
      sum.admission_refused += t.admission_refused();
      sum.full_refused += t.full_refused();
      sum.tier_rows += t.tier_rows();
      sum.tier_bytes += t.tier_bytes();
      sum.demoted += t.demoted();
      sum.promoted += t.promoted();
    }
  }
  return tables;
}

std::optional<double> RamHitRate(const TableTotals& table) {
  if (table.keys_pulled == 0) return std::nullopt;
  return std::max(0.0, 1.0 - static_cast<double>(table.promoted) / table.keys_pulled);
}

TierTotals SumTiers(const rpc::ServerStatuses& servers) {
  TierTotals tiers;
  for (const rpc::ServerStatusReply& reply : servers.servers()) {
    if (!reply.has_status()) continue;
    const rpc::ServerStatus& s = reply.status();
    tiers.servers += s.tier_max_disk_bytes() > 0;
    tiers.disk_bytes += s.tier_disk_bytes();
    tiers.max_disk_bytes += s.tier_max_disk_bytes();
    tiers.refused_rows += s.tier_refused_rows();
  }
  return tiers;
}

std::string TablesText(const rpc::ServerStatuses& servers) {
  const std::vector<TableTotals> tables = SumTables(servers);
  int answered = 0;
  for (const rpc::ServerStatusReply& reply : servers.servers()) answered += reply.has_status();
  std::string out = absl::StrFormat(
      "tables over %d of %d servers (rows, bytes: each row once, on its primary; all copies: "
      "replicas too; keys pulled and pushed since the servers started)\n",
      answered, servers.servers_size());
  Columns columns({"table", "dim", "optimizer", "rows", "bytes", "rows (all copies)",
                   "bytes (all copies)", "keys pulled", "keys pushed"});
  const TierTotals tiers = SumTiers(servers);
  bool bounded = false;
  bool tiered = tiers.servers > 0;
  for (const TableTotals& t : tables) {
    columns.Add({t.name, absl::StrCat(t.dim), t.optimizer, absl::StrCat(t.rows), Bytes(t.bytes),
                 absl::StrCat(t.rows_all_copies), Bytes(t.bytes_all_copies),
                 absl::StrCat(t.keys_pulled), absl::StrCat(t.keys_pushed)});
    bounded = bounded || t.evicted_ttl + t.evicted_budget + t.admission_refused + t.full_refused > 0;
    tiered = tiered || t.tier_rows + t.demoted + t.promoted > 0;
  }
  out += columns.Render();
  if (bounded || tiered) {
    // Only where a table has bounds at work or a server a disk tier: most jobs have neither.
    out += "\nbounds (server/README.md#memory-budget): rows evicted by TTL and by the memory "
           "budget, pushed ids refused admission, rows not created at a copy's cap\n";
    std::vector<std::string> header = {"table", "evicted (ttl)", "evicted (budget)",
                                       "admission refused", "refused at cap"};
    if (tiered) {
      out +=
          "disk tier (server/README.md#tier): rows and bytes in the tiers now, rows demoted to "
          "and promoted from them, RAM hit rate: 1 - promoted / keys pulled\n";
      header.insert(header.end(),
                    {"tier rows", "tier bytes", "demoted", "promoted", "RAM hit rate"});
    }
    Columns bounds(std::move(header));
    for (const TableTotals& t : tables) {
      std::vector<std::string> row = {
          t.name, absl::StrCat(t.evicted_ttl), absl::StrCat(t.evicted_budget),
          absl::StrCat(t.admission_refused), absl::StrCat(t.full_refused)};
      if (tiered) {
        const std::optional<double> hit = RamHitRate(t);
        row.insert(row.end(), {absl::StrCat(t.tier_rows), Bytes(t.tier_bytes),
                               absl::StrCat(t.demoted), absl::StrCat(t.promoted),
                               hit ? absl::StrFormat("%.1f%%", *hit * 100) : std::string("-")});
      }
      bounds.Add(std::move(row));
    }
    out += bounds.Render();
    if (tiered) {
      absl::StrAppendFormat(&out,
                            "disk tier: %s on disk of %s (the caps of %d server%s summed), %d rows "
                            "refused at a cap\n",
                            Bytes(tiers.disk_bytes), Bytes(tiers.max_disk_bytes), tiers.servers,
                            tiers.servers == 1 ? "" : "s", tiers.refused_rows);
    }
  }
  return out;
}

std::string TablesJson(const rpc::ServerStatuses& servers) {
  std::vector<std::string> items;
  for (const TableTotals& t : SumTables(servers)) {
    const std::optional<double> hit = RamHitRate(t);
    items.push_back(Object({{"name", Quote(t.name)},
                            {"dim", absl::StrCat(t.dim)},
                            {"optimizer", Quote(t.optimizer)},
                            {"rows", absl::StrCat(t.rows)},
                            {"bytes", absl::StrCat(t.bytes)},
                            {"rows_all_copies", absl::StrCat(t.rows_all_copies)},
                            {"bytes_all_copies", absl::StrCat(t.bytes_all_copies)},
                            {"keys_pulled", absl::StrCat(t.keys_pulled)},
                            {"keys_pushed", absl::StrCat(t.keys_pushed)},
                            {"pull_requests", absl::StrCat(t.pull_requests)},
                            {"push_requests", absl::StrCat(t.push_requests)},
                            {"evicted_ttl", absl::StrCat(t.evicted_ttl)},
                            {"evicted_budget", absl::StrCat(t.evicted_budget)},
                            {"admission_refused", absl::StrCat(t.admission_refused)},
                            {"full_refused", absl::StrCat(t.full_refused)},
                            {"tier_rows", absl::StrCat(t.tier_rows)},
                            {"tier_bytes", absl::StrCat(t.tier_bytes)},
                            {"demoted", absl::StrCat(t.demoted)},
                            {"promoted", absl::StrCat(t.promoted)},
                            {"ram_hit_rate", hit ? Number(*hit) : std::string("null")}}));
  }
  const TierTotals tiers = SumTiers(servers);
  return Object({{"tables", Array(items)},
                 {"tier_disk_bytes", absl::StrCat(tiers.disk_bytes)},
                 {"tier_max_disk_bytes", absl::StrCat(tiers.max_disk_bytes)},
                 {"tier_refused_rows", absl::StrCat(tiers.refused_rows)},
                 {"servers_failed", Strings(ServerFailures(servers))}});
}

uint32_t HotKeysToAsk(uint32_t k) { return std::min<uint32_t>(256, std::max<uint32_t>(k, 64)); }

MergedHotKeys MergeHotKeys(const rpc::ServerStatuses& servers, const std::string& table,
                           uint32_t asked, uint32_t k) {
  MergedHotKeys hot;
  hot.table = table;
  hot.pulled = Merge(servers, table, asked, k, /*pulled=*/true);
  hot.pushed = Merge(servers, table, asked, k, /*pulled=*/false);
  for (const rpc::ServerStatusReply& reply : servers.servers()) {
    if (reply.has_status() && reply.status().hot_keys_table() == table) {
      hot.sample_every = std::max(hot.sample_every, reply.status().hot_keys_sample_every());
    }
  }
  for (const TableTotals& t : SumTables(servers)) {
    if (t.name != table) continue;
    hot.keys_pulled = t.keys_pulled;
    hot.keys_pushed = t.keys_pushed;
  }
  return hot;
}

std::string HotKeysText(const MergedHotKeys& hot) {
  const std::string counted =
      hot.sample_every <= 1
          ? std::string("every key counted")
          : absl::StrFormat("counts estimated from 1 key in %d of each request", hot.sample_every);
  std::string out = absl::StrFormat(
      "hot keys of table \"%s\" since the servers started, merged over the servers (%s; error: "
      "how much a count may overstate; share: of the table's keys)\n",
      hot.table, counted);
  if (hot.sample_every == 0 && hot.pulled.empty() && hot.pushed.empty()) {
    out += "the servers sample no keys (ps_server --hot_keys_sample_every=0)\n";
  }
  absl::StrAppendFormat(&out, "pulled (%d keys in all):\n", hot.keys_pulled);
  out += HotKeysListText(hot.pulled, hot.keys_pulled);
  absl::StrAppendFormat(&out, "pushed (%d keys in all):\n", hot.keys_pushed);
  out += HotKeysListText(hot.pushed, hot.keys_pushed);
  return out;
}

std::string HotKeysJson(const MergedHotKeys& hot, const rpc::ServerStatuses& servers) {
  return Object({{"table", Quote(hot.table)},
                 {"sample_every", absl::StrCat(hot.sample_every)},
                 {"keys_pulled", absl::StrCat(hot.keys_pulled)},
                 {"keys_pushed", absl::StrCat(hot.keys_pushed)},
                 {"pulled", HotKeysListJson(hot.pulled)},
                 {"pushed", HotKeysListJson(hot.pushed)},
                 {"servers_failed", Strings(ServerFailures(servers))}});
}

ClusterRates ComputeRates(const ClusterSample& before, const ClusterSample& after) {
  ClusterRates rates;
  rates.seconds = absl::ToDoubleSeconds(after.taken - before.taken);
  const auto first = Answered(before.servers);
  for (const rpc::ServerStatusReply& reply : after.servers.servers()) {
    ServerRates r;
    r.server_id = reply.server_id();
    r.address = reply.address();
    if (reply.has_status()) {
      std::tie(r.rows, r.bytes) = Held(reply.status());
      rates.total.rows += r.rows;
      rates.total.bytes += r.bytes;
      const auto was = first.find(reply.server_id());
      if (was != first.end() && rates.seconds > 0) {
        const Traffic a = SumTraffic(*was->second);
        const Traffic b = SumTraffic(reply.status());
        if (b.keys_pulled >= a.keys_pulled && b.keys_pushed >= a.keys_pushed &&
            b.pull_requests >= a.pull_requests && b.push_requests >= a.push_requests) {
          r.measured = true;
          r.keys_pulled_per_s = (b.keys_pulled - a.keys_pulled) / rates.seconds;
          r.keys_pushed_per_s = (b.keys_pushed - a.keys_pushed) / rates.seconds;
          r.pull_requests_per_s = (b.pull_requests - a.pull_requests) / rates.seconds;
          r.push_requests_per_s = (b.push_requests - a.push_requests) / rates.seconds;
          rates.total.keys_pulled_per_s += r.keys_pulled_per_s;
          rates.total.keys_pushed_per_s += r.keys_pushed_per_s;
          rates.total.pull_requests_per_s += r.pull_requests_per_s;
          rates.total.push_requests_per_s += r.push_requests_per_s;
        }
      }
    }
    rates.servers.push_back(r);
  }
  rates.total.measured = true;
  // Workers, by rank: steps done and their rate over the coordinator's two answers.
  std::map<int32_t, int64_t> clock_before;
  for (const rpc::MemberStatus& m : before.cluster.members()) {
    if (m.role() == rpc::WORKER) clock_before[m.rank()] = m.clock();
  }
  std::map<int32_t, WorkerRates> workers;
  for (const rpc::MemberStatus& m : after.cluster.members()) {
    if (m.role() != rpc::WORKER) continue;
    WorkerRates w;
    w.rank = m.rank();
    w.state = WorkerState(m);
    w.steps = m.clock() + 1;
    const auto was = clock_before.find(m.rank());
    if (was != clock_before.end() && rates.seconds > 0) {
      w.steps_per_s = std::max<int64_t>(0, m.clock() - was->second) / rates.seconds;
    }
    workers[m.rank()] = w;  // a rank taken again: the newest member
  }
  for (auto& [rank, w] : workers) rates.workers.push_back(w);
  rates.min_clock = after.cluster.clocks().min_clock();
  rates.max_clock = after.cluster.clocks().max_clock();
  return rates;
}

std::string MetricsText(const ClusterRates& rates) {
  std::string out = absl::StrFormat(
      "rates over %.2f s (per second; rows and bytes: what each server holds now, replicas "
      "included)\n",
      rates.seconds);
  Columns columns({"server", "address", "keys pulled/s", "keys pushed/s", "pulls/s", "pushes/s",
                   "rows", "bytes"});
  auto add = [&](const std::string& id, const std::string& address, const ServerRates& r) {
    if (!r.measured) {
      columns.Add({id, address, "-", "-", "-", "-", r.rows > 0 ? absl::StrCat(r.rows) : "-",
                   r.bytes > 0 ? Bytes(r.bytes) : "-"});
      return;
    }
    columns.Add({id, address, Rate(r.keys_pulled_per_s), Rate(r.keys_pushed_per_s),
                 Rate(r.pull_requests_per_s), Rate(r.push_requests_per_s), absl::StrCat(r.rows),
                 Bytes(r.bytes)});
  };
  for (const ServerRates& r : rates.servers) add(absl::StrCat(r.server_id), r.address, r);
  add("total", "", rates.total);
  out += columns.Render();
  if (rates.workers.empty()) {
    out += "workers: none registered\n";
    return out;
  }
  absl::StrAppendFormat(&out, "workers: steps done: slowest %d, fastest %d (clocks + 1)\n",
                        rates.min_clock + 1, rates.max_clock + 1);
  Columns workers({"rank", "state", "steps", "steps/s"});
  for (const WorkerRates& w : rates.workers) {
    workers.Add({absl::StrCat(w.rank), w.state, absl::StrCat(w.steps),
                 absl::StrFormat("%.1f", w.steps_per_s)});
  }
  out += workers.Render();
  return out;
}

std::string MetricsJson(const ClusterRates& rates, const rpc::ServerStatuses& after) {
  std::vector<std::string> servers;
  for (const ServerRates& r : rates.servers) servers.push_back(ServerRatesJson(r, true));
  std::vector<std::string> workers;
  for (const WorkerRates& w : rates.workers) {
    workers.push_back(Object({{"rank", absl::StrCat(w.rank)},
                              {"state", Quote(w.state)},
                              {"steps", absl::StrCat(w.steps)},
                              {"steps_per_s", Number(w.steps_per_s)}}));
  }
  return Object({{"interval_s", Number(rates.seconds)},
                 {"servers", Array(servers)},
                 {"total", ServerRatesJson(rates.total, false)},
                 {"workers", Array(workers)},
                 {"min_clock", absl::StrCat(rates.min_clock)},
                 {"max_clock", absl::StrCat(rates.max_clock)},
                 {"servers_failed", Strings(ServerFailures(after))}});
}

std::string CheckpointText(const rpc::CheckpointResponse& response) {
  return absl::StrFormat(
      "checkpoint %d at %s: step %d, %.1f MB in %.2f s, longest stall of a shard's pushes %.1f "
      "ms\n",
      response.id(), response.path(), response.step(), response.bytes() / 1e6, response.seconds(),
      response.max_stall_ms());
}

}  // namespace client_internal
}  // namespace ps

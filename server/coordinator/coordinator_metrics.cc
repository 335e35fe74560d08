#include "server/coordinator/coordinator_metrics.h"

#include <array>
#include <optional>
#include <utility>

namespace ps {
namespace coordinator {
namespace {

constexpr std::array<const char*, 4> kStates = {"alive", "dead", "left", "failed"};

int RoleIndex(rpc::Role role) {
  switch (role) {
    case rpc::SERVER:
      return 0;
    case rpc::WORKER:
      return 1;
    case rpc::CLIENT:
      return 2;
    default:
      return -1;
  }
}

int StateIndex(const rpc::MemberStatus& member) {
  if (member.failed()) return 3;
  if (member.left()) return 2;
  return member.alive() ? 0 : 1;
}

}  // namespace

void AddCoordinatorCollector(metrics::Registry* registry,
                             std::function<std::optional<rpc::ClusterStatus>()> status) {
  registry->AddCollector([status = std::move(status)](metrics::Sink& sink) {
    const std::optional<rpc::ClusterStatus> current = status();
    if (!current.has_value()) return;
    const rpc::ClusterStatus& cluster = *current;
    constexpr std::array<const char*, 3> kRoles = {"server", "worker", "client"};
    std::array<std::array<int, kStates.size()>, kRoles.size()> members{};
    for (const rpc::MemberStatus& member : cluster.members()) {
      const int role = RoleIndex(member.role());
      if (role >= 0) ++members[role][StateIndex(member)];
    }
    for (size_t r = 0; r < kRoles.size(); ++r) {
      for (size_t s = 0; s < kStates.size(); ++s) {
        sink.Gauge("ps_coordinator_members", "Members of the job by role and state.",
                   {{"role", kRoles[r]}, {"state", kStates[s]}}, members[r][s]);
      }
    }
    int lost = 0;
    for (const rpc::ShardStatus& shard : cluster.shards()) lost += shard.lost() ? 1 : 0;
    sink.Gauge("ps_coordinator_shard_map_version",
               "The shard map's version (0 until every server of the job has registered).", {},
               static_cast<double>(cluster.shard_map().version()));
    sink.Gauge("ps_coordinator_lost_shards", "Shards with no copy left.", {}, lost);
    sink.Counter("ps_coordinator_failovers_total",
                 "Primaries promoted since the coordinator started.", {},
                 static_cast<double>(cluster.failovers()));
    sink.Gauge("ps_coordinator_clock_min", "The slowest worker's finished step (-1 before any).",
               {}, static_cast<double>(cluster.clocks().min_clock()));
    sink.Gauge("ps_coordinator_clock_max", "The fastest worker's finished step (-1 before any).",
               {}, static_cast<double>(cluster.clocks().max_clock()));
    sink.Gauge("ps_coordinator_job_failed", "1 once the job failed (a worker failed), else 0.", {},
               cluster.has_failure() ? 1 : 0);
  });
}

}  // namespace coordinator
}  // namespace ps

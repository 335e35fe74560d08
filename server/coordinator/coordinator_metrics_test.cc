#include "server/coordinator/coordinator_metrics.h"

#include <catch2/catch.hpp>
#include <string>

namespace ps {
namespace coordinator {
namespace {

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

rpc::MemberStatus* AddMember(rpc::ClusterStatus* status, rpc::Role role, bool alive) {
  rpc::MemberStatus* member = status->add_members();
  member->set_role(role);
  member->set_alive(alive);
  return member;
}

TEST_CASE("The coordinator's collector counts members by role and state, every combination",
          "[coordinator_metrics]") {
  metrics::Registry registry;
  rpc::ClusterStatus status;
  AddMember(&status, rpc::SERVER, true);
  AddMember(&status, rpc::SERVER, false);
  AddMember(&status, rpc::WORKER, true);
  AddMember(&status, rpc::WORKER, false)->set_left(true);
  AddMember(&status, rpc::WORKER, true)->set_failed(true);
  status.mutable_shard_map()->set_version(4);
  status.add_shards()->set_lost(true);
  status.add_shards();
  status.set_failovers(2);
  status.mutable_clocks()->set_min_clock(9);
  status.mutable_clocks()->set_max_clock(11);
  AddCoordinatorCollector(&registry, [&status] { return status; });
  const std::string text = registry.Render();
  INFO(text);
  CHECK(Contains(text, "ps_coordinator_members{role=\"server\",state=\"alive\"} 1\n"));
  CHECK(Contains(text, "ps_coordinator_members{role=\"server\",state=\"dead\"} 1\n"));
  CHECK(Contains(text, "ps_coordinator_members{role=\"worker\",state=\"alive\"} 1\n"));
  CHECK(Contains(text, "ps_coordinator_members{role=\"worker\",state=\"left\"} 1\n"));
  CHECK(Contains(text, "ps_coordinator_members{role=\"worker\",state=\"failed\"} 1\n"));
  CHECK(Contains(text, "ps_coordinator_members{role=\"client\",state=\"alive\"} 0\n"));
  CHECK(Contains(text, "ps_coordinator_shard_map_version 4\n"));
  CHECK(Contains(text, "ps_coordinator_lost_shards 1\n"));
  CHECK(Contains(
      text, "# TYPE ps_coordinator_failovers_total counter\nps_coordinator_failovers_total 2\n"));
  CHECK(Contains(text, "ps_coordinator_clock_min 9\n"));
  CHECK(Contains(text, "ps_coordinator_clock_max 11\n"));
  CHECK(Contains(text, "ps_coordinator_job_failed 0\n"));
  status.mutable_failure();
  CHECK(Contains(registry.Render(), "ps_coordinator_job_failed 1\n"));
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

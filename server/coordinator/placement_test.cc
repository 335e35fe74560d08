#include "server/coordinator/placement.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"

namespace ps {
namespace coordinator {
namespace {

std::vector<uint32_t> Ids(const google::protobuf::RepeatedField<uint32_t>& ids) {
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

std::vector<ServerState> Servers(const std::vector<std::string>& addresses) {
  std::vector<ServerState> servers;
  for (const std::string& a : addresses) servers.push_back(ServerState{a, true});
  return servers;
}

rpc::ShardProgress Progress(uint32_t shard, uint64_t applied_sequence, int64_t applied_step = 0) {
  rpc::ShardProgress p;
  p.set_shard(shard);
  p.set_applied_sequence(applied_sequence);
  p.set_applied_step(applied_step);
  return p;
}

TEST_CASE("placement: the map is built once every server slot is taken", "[placement]") {
  const uint32_t replication = GENERATE(1u, 2u, 3u);
  Placement placement(3, 6, replication, "", false);
  CHECK_FALSE(placement.MaybeBuild(Servers({"a:1", "b:1"})));
  CHECK_FALSE(placement.has_map());
  CHECK(placement.version() == 0);
  const std::vector<ServerState> servers = Servers({"a:1", "b:1", "c:1"});
  REQUIRE(placement.MaybeBuild(servers));
  CHECK_FALSE(placement.MaybeBuild(servers));  // once
  CHECK(placement.version() == 1);
  const rpc::ShardMap& map = placement.map();
  CHECK(map.num_shards() == 6);
  REQUIRE(map.shards_size() == 6);
  REQUIRE(map.servers_size() == 3);
  CHECK(map.servers(2).host() == "c");
  for (uint32_t s = 0; s < 6; ++s) {
    INFO("shard " << s);
    CHECK(map.shards(s).primary() == s % 3);
    CHECK(map.shards(s).replicas_size() == static_cast<int>(replication) - 1);
    for (const uint32_t r : map.shards(s).replicas()) CHECK(r != s % 3);
  }
}

TEST_CASE("placement: replicas go to other hosts first", "[placement]") {
  Placement placement(3, 3, 2, "", false);
  // Servers 0 and 1 share a host: shard 0's replica skips server 1 for server 2.
  REQUIRE(placement.MaybeBuild(Servers({"h1:1", "h1:2", "h2:1"})));
  CHECK(Ids(placement.map().shards(0).replicas()) == std::vector<uint32_t>{2});
  CHECK(Ids(placement.map().shards(1).replicas()) == std::vector<uint32_t>{2});
  CHECK(Ids(placement.map().shards(2).replicas()) == std::vector<uint32_t>{0});
}

TEST_CASE("placement: failover promotes the live replica that applied the most", "[placement]") {
  Placement placement(3, 3, 3, "", false);
  std::vector<ServerState> servers = Servers({"a:1", "b:1", "c:1"});
  REQUIRE(placement.MaybeBuild(servers));
  // Shard 0: primary 0, replicas 1 and 2.
  CHECK_FALSE(placement.ApplyProgress(1, {Progress(0, 5)}));
  CHECK_FALSE(placement.ApplyProgress(2, {Progress(0, 9)}));
  servers[0].alive = false;
  REQUIRE(placement.FailOver(0, servers));
  const rpc::ShardAssignment& a = placement.map().shards(0);
  CHECK(a.primary() == 2);
  CHECK(a.primary_term() == 1);
  CHECK(Ids(a.replicas()) == std::vector<uint32_t>{1});
  CHECK(placement.failovers() == 1);
  // Server 0 is dropped from the shards it held a replica of.
  for (const rpc::ShardAssignment& other : placement.map().shards()) {
    for (const uint32_t r : other.replicas()) CHECK(r != 0);
  }
  CHECK(placement.version() == 1);  // Changed bumps it, not FailOver
  placement.Changed(servers);
  CHECK(placement.version() == 2);
  CHECK_FALSE(placement.map().servers(0).alive());
}

TEST_CASE("placement: a shard without a live replica is lost", "[placement]") {
  Placement placement(2, 2, 1, "", false);
  std::vector<ServerState> servers = Servers({"a:1", "b:1"});
  REQUIRE(placement.MaybeBuild(servers));
  servers[0].alive = false;
  REQUIRE(placement.FailOver(0, servers));
  CHECK(placement.map().shards(0).lost());
  CHECK_FALSE(placement.map().shards(1).lost());
  CHECK(placement.failovers() == 0);
}

TEST_CASE("placement: healing gives copies to live servers, other hosts first", "[placement]") {
  Placement placement(3, 1, 2, "", false);
  std::vector<ServerState> servers = Servers({"h1:1", "h1:2", "h2:1"});
  REQUIRE(placement.MaybeBuild(servers));
  REQUIRE(Ids(placement.map().shards(0).replicas()) == std::vector<uint32_t>{2});
  servers[2].alive = false;
  REQUIRE(placement.FailOver(2, servers));
  CHECK(placement.map().shards(0).replicas_size() == 0);
  REQUIRE(placement.Heal(servers));
  CHECK(Ids(placement.map().shards(0).catching_up()) == std::vector<uint32_t>{1});
  CHECK_FALSE(placement.Heal(servers));  // nothing more to give
  // The primary says the copy caught up: it becomes a replica.
  rpc::ShardProgress p = Progress(0, 3);
  rpc::ReplicaLag* lag = p.add_replica_lags();
  lag->set_server_id(1);
  lag->set_caught_up(true);
  REQUIRE(placement.ApplyProgress(0, {p}));
  CHECK(Ids(placement.map().shards(0).replicas()) == std::vector<uint32_t>{1});
  CHECK(placement.map().shards(0).catching_up_size() == 0);
}

TEST_CASE("placement: a shard map wait's answer", "[placement]") {
  Placement placement(2, 2, 1, "", false);
  CHECK_FALSE(placement.Answer(1, 1, /*expired=*/false).has_value());
  auto answer = placement.Answer(1, 1, /*expired=*/true);
  REQUIRE(answer.has_value());
  CHECK(answer->status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(answer->status().message()),
             Catch::Contains("shard map not ready: 1 of 2 servers registered"));
  REQUIRE(placement.MaybeBuild(Servers({"a:1", "b:1"})));
  answer = placement.Answer(1, 2, /*expired=*/false);
  REQUIRE(answer.has_value());
  REQUIRE(answer->ok());
  CHECK((*answer)->version() == 1);
  answer = placement.Answer(5, 2, /*expired=*/true);
  REQUIRE(answer.has_value());
  CHECK_THAT(std::string(answer->status().message()),
             Catch::Contains("version 1 is older than the requested 5"));
}

TEST_CASE("placement: the restore fields are carried before and after the map is built",
          "[placement]") {
  Placement placement(1, 1, 1, "/ckpt/7", true);
  CHECK(placement.map().restore_from() == "/ckpt/7");
  CHECK(placement.restore_unchecked());
  REQUIRE(placement.MaybeBuild(Servers({"a:1"})));
  CHECK(placement.map().restore_from() == "/ckpt/7");
  CHECK(placement.map().restore_unchecked());
  placement.ClearRestoreUnchecked();
  CHECK_FALSE(placement.restore_unchecked());
}

TEST_CASE("placement: state saved and taken up, and the status", "[placement]") {
  Placement placement(2, 2, 2, "", false);
  std::vector<ServerState> servers = Servers({"a:1", "b:1"});
  REQUIRE(placement.MaybeBuild(servers));
  placement.ApplyProgress(0, {Progress(0, 4, /*applied_step=*/6)});
  placement.ApplyProgress(1, {Progress(1, 2, /*applied_step=*/5), Progress(0, 4)});

  rpc::ClusterStatus status;
  placement.FillStatus(/*sync=*/true, &status);
  CHECK(status.shard_map().version() == 1);
  REQUIRE(status.shards_size() == 2);
  REQUIRE(status.shards(0).copies_size() == 2);
  CHECK(status.shards(0).copies(0).primary());
  CHECK(status.shards(0).copies(0).applied_sequence() == 4);
  CHECK(status.applied_step() == 5);

  servers[1].alive = false;
  REQUIRE(placement.FailOver(1, servers));
  placement.Changed(servers);
  rpc::CoordinatorState state;
  placement.SaveTo(&state);
  Placement restarted(2, 2, 2, "", false);
  restarted.TakeUp(state);
  CHECK(restarted.has_map());
  CHECK(restarted.version() == 2);
  CHECK(restarted.failovers() == 1);
  CHECK(restarted.map().shards(1).primary() == 0);
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

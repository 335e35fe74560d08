#include "client/internal/ctl_format.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace ps {
namespace client_internal {
namespace {

// `json` parsed (REQUIREd to be valid JSON, one object).
google::protobuf::Struct Parse(const std::string& json) {
  INFO(json);
  google::protobuf::Struct parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok());
  return parsed;
}

const google::protobuf::Value& Field(const google::protobuf::Struct& s, const std::string& name) {
  INFO("field " << name);
  REQUIRE(s.fields().count(name) == 1);
  return s.fields().at(name);
}

void AddHot(google::protobuf::RepeatedPtrField<rpc::HotKey>* list,
            std::vector<std::vector<uint64_t>> keys) {
  for (const auto& k : keys) {
    rpc::HotKey* h = list->Add();
    h->set_id(k[0]);
    h->set_count(k[1]);
    h->set_error(k[2]);
  }
}

rpc::TableStatus* AddTable(rpc::ServerStatus* s, const std::string& name, uint64_t primary_rows,
                           uint64_t rows) {
  rpc::TableStatus* t = s->add_tables();
  t->set_name(name);
  t->set_dim(16);
  t->set_optimizer("adagrad");
  t->set_primary_rows(primary_rows);
  t->set_rows(rows);
  t->set_primary_bytes(primary_rows * 100);
  t->set_bytes(rows * 100);
  return t;
}

// Three servers: 0 and 1 answered, 2 failed.
rpc::ServerStatuses ThreeServers() {
  rpc::ServerStatuses servers;
  servers.set_map_version(4);
  for (uint32_t id = 0; id < 3; ++id) {
    rpc::ServerStatusReply* reply = servers.add_servers();
    reply->set_server_id(id);
    reply->set_address("127.0.0.1:700" + std::to_string(id));
    reply->set_alive(true);
    if (id == 2) {
      reply->set_error("UNAVAILABLE: failed to connect");
      continue;
    }
    rpc::ServerStatus* s = reply->mutable_status();
    s->set_server_id(id);
    s->set_hot_keys_table("emb");
    s->set_hot_keys_sample_every(32);
    rpc::TableStatus* emb = AddTable(s, "emb", 1000 + id, 2000);
    emb->set_keys_pulled(10000);
    emb->set_keys_pushed(5000);
    AddTable(s, "wide", 10, 20);
    rpc::ShardSize* size = s->add_shard_sizes();
    size->set_shard(id);
    size->set_copy(rpc::ShardSize::PRIMARY);
    size->set_rows(777 + id);
    size->set_bytes(77700);
  }
  return servers;
}

TEST_CASE("hot keys merge: sums, with a full list's smallest count bounding the keys it omits",
          "[ctl]") {
  rpc::ServerStatuses servers = ThreeServers();
  rpc::ServerStatus* a = servers.mutable_servers(0)->mutable_status();
  rpc::ServerStatus* b = servers.mutable_servers(1)->mutable_status();
  AddHot(a->mutable_hot_pulled(), {{1, 100, 0}, {2, 50, 5}, {3, 20, 0}});  // full (3 asked)
  AddHot(b->mutable_hot_pulled(), {{2, 60, 0}, {4, 30, 2}, {5, 10, 0}});   // full
  AddHot(a->mutable_hot_pushed(), {{9, 40, 1}});                           // not full: all it saw
  AddHot(b->mutable_hot_pushed(), {{8, 7, 0}, {9, 3, 0}});

  const MergedHotKeys hot = MergeHotKeys(servers, "emb", /*asked=*/3, /*k=*/4);
  CHECK(hot.table == "emb");
  CHECK(hot.keys_pulled == 20000);
  CHECK(hot.keys_pushed == 10000);
  CHECK(hot.sample_every == 32);
  // 1: 100 + server 1's bound 10; 2: on both lists; 4: 30 + server 0's bound 20; 3 and 5 tie at
  // 30 (smaller id first), 5 cut by k.
  REQUIRE(hot.pulled.size() == 4);
  CHECK(hot.pulled[0].id() == 1);
  CHECK(hot.pulled[0].count() == 110);
  CHECK(hot.pulled[0].error() == 10);
  CHECK(hot.pulled[1].id() == 2);
  CHECK(hot.pulled[1].count() == 110);
  CHECK(hot.pulled[1].error() == 5);
  CHECK(hot.pulled[2].id() == 4);
  CHECK(hot.pulled[2].count() == 50);
  CHECK(hot.pulled[2].error() == 22);
  CHECK(hot.pulled[3].id() == 3);
  CHECK(hot.pulled[3].count() == 30);
  CHECK(hot.pulled[3].error() == 10);
  // Lists shorter than asked hold every key sampled: no bound added.
  REQUIRE(hot.pushed.size() == 2);
  CHECK(hot.pushed[0].id() == 9);
  CHECK(hot.pushed[0].count() == 43);
  CHECK(hot.pushed[0].error() == 1);
  CHECK(hot.pushed[1].id() == 8);
  CHECK(hot.pushed[1].count() == 7);

  const std::string text = HotKeysText(hot);
  CHECK_THAT(text, Catch::Contains("hot keys of table \"emb\""));
  CHECK_THAT(text, Catch::Contains("from 1 key in 32 of each request"));
  CHECK_THAT(text, Catch::Contains("pulled (20000 keys in all):"));
  CHECK_THAT(text, Catch::Contains("1     1    110    10     0.55%"));
  const auto json = Parse(HotKeysJson(hot, servers));
  CHECK(Field(json, "table").string_value() == "emb");
  CHECK(Field(json, "sample_every").number_value() == 32);
  const auto& pulled = Field(json, "pulled").list_value();
  REQUIRE(pulled.values_size() == 4);
  CHECK(Field(pulled.values(0).struct_value(), "id").number_value() == 1);
  CHECK(Field(pulled.values(0).struct_value(), "count").number_value() == 110);
  CHECK(Field(pulled.values(0).struct_value(), "error").number_value() == 10);
  const auto& failed = Field(json, "servers_failed").list_value();
  REQUIRE(failed.values_size() == 1);
  CHECK(failed.values(0).string_value() ==
        "server 2 (127.0.0.1:7002): UNAVAILABLE: failed to connect");

  CHECK(HotKeysToAsk(1) == 64);
  CHECK(HotKeysToAsk(100) == 100);
  CHECK(HotKeysToAsk(256) == 256);
}

TEST_CASE("tables count each row once on its primary, and every copy apart", "[ctl]") {
  const rpc::ServerStatuses servers = ThreeServers();
  const std::vector<TableTotals> tables = SumTables(servers);
  REQUIRE(tables.size() == 2);
  CHECK(tables[0].name == "emb");
  CHECK(tables[0].dim == 16);
  CHECK(tables[0].optimizer == "adagrad");
  CHECK(tables[0].rows == 2001);
  CHECK(tables[0].rows_all_copies == 4000);
  CHECK(tables[0].bytes == 200100);
  CHECK(tables[0].keys_pulled == 20000);
  CHECK(tables[1].name == "wide");
  CHECK(tables[1].rows == 20);

  const std::string text = TablesText(servers);
  CHECK_THAT(text, Catch::Contains("tables over 2 of 3 servers"));
  CHECK_THAT(text, Catch::Contains("emb    16   adagrad    2001  200.1 kB"));
  const auto json = Parse(TablesJson(servers));
  const auto& items = Field(json, "tables").list_value();
  REQUIRE(items.values_size() == 2);
  CHECK(Field(items.values(0).struct_value(), "rows").number_value() == 2001);
  CHECK(Field(items.values(0).struct_value(), "rows_all_copies").number_value() == 4000);
  CHECK(Field(items.values(0).struct_value(), "optimizer").string_value() == "adagrad");
  CHECK(ServerFailures(servers) ==
        std::vector<std::string>{"server 2 (127.0.0.1:7002): UNAVAILABLE: failed to connect"});
  // No table has bounds at work: no bounds table.
  CHECK_THAT(text, !Catch::Contains("evicted"));
}

TEST_CASE("tables sum the bounds' counters over the servers and show them when any is set",
          "[ctl]") {
  rpc::ServerStatuses servers = ThreeServers();
  for (rpc::ServerStatusReply& reply : *servers.mutable_servers()) {
    if (!reply.has_status()) continue;
    rpc::TableStatus* emb = reply.mutable_status()->mutable_tables(0);
    emb->set_evicted_ttl(5);
    emb->set_evicted_budget(7);
    emb->set_admission_refused(11);
    emb->set_full_refused(2);
  }
  const std::vector<TableTotals> tables = SumTables(servers);
  CHECK(tables[0].evicted_ttl == 10);
  CHECK(tables[0].evicted_budget == 14);
  CHECK(tables[0].admission_refused == 22);
  CHECK(tables[0].full_refused == 4);
  CHECK(tables[1].evicted_ttl == 0);
  const std::string text = TablesText(servers);
  CHECK_THAT(text, Catch::Contains("evicted (ttl)"));
  CHECK_THAT(text, Catch::Matches("(.|\n)*emb +10 +14 +22 +4(.|\n)*"));
  const auto json = Parse(TablesJson(servers));
  const auto& item = Field(json, "tables").list_value().values(0).struct_value();
  CHECK(Field(item, "evicted_ttl").number_value() == 10);
  CHECK(Field(item, "evicted_budget").number_value() == 14);
  CHECK(Field(item, "admission_refused").number_value() == 22);
  CHECK(Field(item, "full_refused").number_value() == 4);
  // No server has a disk tier: no tier columns.
  CHECK_THAT(text, !Catch::Contains("tier"));
}

TEST_CASE("tables show the disk tier's counters, RAM hit rate and disk when a server has a tier",
          "[ctl]") {
  rpc::ServerStatuses servers = ThreeServers();
  for (rpc::ServerStatusReply& reply : *servers.mutable_servers()) {
    if (!reply.has_status()) continue;
    rpc::ServerStatus* s = reply.mutable_status();
    s->set_tier_disk_bytes(1500000);
    s->set_tier_max_disk_bytes(1000000000);
    s->set_tier_refused_rows(3);
    rpc::TableStatus* emb = s->mutable_tables(0);
    emb->set_evicted_budget(7);
    emb->set_tier_rows(400);
    emb->set_tier_bytes(40000);
    emb->set_demoted(600);
    emb->set_promoted(500);  // of 10000 keys pulled on each server
  }
  const std::vector<TableTotals> tables = SumTables(servers);
  CHECK(tables[0].tier_rows == 800);
  CHECK(tables[0].tier_bytes == 80000);
  CHECK(tables[0].demoted == 1200);
  CHECK(tables[0].promoted == 1000);
  REQUIRE(RamHitRate(tables[0]).has_value());
  CHECK(*RamHitRate(tables[0]) == Approx(0.95));
  // "wide" has no pulls: no hit rate.
  CHECK_FALSE(RamHitRate(tables[1]).has_value());
  const TierTotals tiers = SumTiers(servers);
  CHECK(tiers.servers == 2);
  CHECK(tiers.disk_bytes == 3000000);
  CHECK(tiers.max_disk_bytes == 2000000000);
  CHECK(tiers.refused_rows == 6);

  const std::string text = TablesText(servers);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("tier rows  tier bytes  demoted  promoted  RAM hit rate\n"));
  CHECK_THAT(text,
             Catch::Matches("(.|\n)*emb +0 +14 +0 +0 +800 +80.0 kB +1200 +1000 +95.0%\n(.|\n)*"));
  CHECK_THAT(text, Catch::Matches("(.|\n)*wide +0 +0 +0 +0 +0 +0 B +0 +0 +-\n(.|\n)*"));
  CHECK_THAT(text, Catch::Contains("disk tier: 3.0 MB on disk of 2.0 GB (the caps of 2 servers "
                                   "summed), 6 rows refused at a cap\n"));
  const auto json = Parse(TablesJson(servers));
  const auto& items = Field(json, "tables").list_value();
  const auto& emb = items.values(0).struct_value();
  CHECK(Field(emb, "tier_rows").number_value() == 800);
  CHECK(Field(emb, "tier_bytes").number_value() == 80000);
  CHECK(Field(emb, "demoted").number_value() == 1200);
  CHECK(Field(emb, "promoted").number_value() == 1000);
  CHECK(Field(emb, "ram_hit_rate").number_value() == 0.95);
  CHECK(Field(items.values(1).struct_value(), "ram_hit_rate").kind_case() ==
        google::protobuf::Value::kNullValue);
  CHECK(Field(json, "tier_disk_bytes").number_value() == 3000000);
  CHECK(Field(json, "tier_max_disk_bytes").number_value() == 2000000000);
  CHECK(Field(json, "tier_refused_rows").number_value() == 6);
}

TEST_CASE("RAM hit rate: 1 - promoted / keys pulled, never below 0", "[ctl]") {
  TableTotals t;
  CHECK_FALSE(RamHitRate(t).has_value());
  t.keys_pulled = 1000;
  CHECK(RamHitRate(t) == 1.0);
  t.promoted = 250;
  CHECK(RamHitRate(t) == 0.75);
  // Pushes' rows are promoted too: more promotions than keys pulled.
  t.promoted = 3000;
  CHECK(RamHitRate(t) == 0.0);
}

rpc::ClusterStatus Cluster() {
  rpc::ClusterStatus cluster;
  cluster.set_job_name("fmt");
  cluster.set_num_workers(2);
  rpc::ShardMap* map = cluster.mutable_shard_map();
  map->set_version(4);
  map->set_num_shards(3);
  for (uint32_t id = 0; id < 3; ++id) {
    rpc::ServerInfo* s = map->add_servers();
    s->set_server_id(id);
    s->set_address("127.0.0.1:700" + std::to_string(id));
    s->set_alive(true);
    rpc::ShardAssignment* shard = map->add_shards();
    shard->set_shard(id);
    shard->set_primary(id);
    shard->add_replicas((id + 1) % 3);
    rpc::ShardStatus* status = cluster.add_shards();
    status->set_shard(id);
    rpc::ShardCopyStatus* copy = status->add_copies();
    copy->set_server_id(id);
    copy->set_primary(true);
    copy->set_applied_sequence(40 + id);
  }
  for (int rank = 0; rank < 2; ++rank) {
    rpc::MemberStatus* m = cluster.add_members();
    m->set_member_id(10 + rank);
    m->set_role(rpc::WORKER);
    m->set_rank(rank);
    m->set_alive(true);
    m->set_clock(9 + rank);
  }
  cluster.mutable_clocks()->set_min_clock(9);
  cluster.mutable_clocks()->set_max_clock(10);
  return cluster;
}

TEST_CASE("shards: every shard with its copies, sequence, and the primary's rows", "[ctl]") {
  const rpc::ClusterStatus cluster = Cluster();
  const rpc::ServerStatuses servers = ThreeServers();
  const std::string text = ShardsText(cluster, servers);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("shard map: version 4, 3 shards, 3 servers"));
  CHECK_THAT(text, Catch::Contains("  shard  primary  replicas  catching up  applied seq  rows  "
                                   "bytes\n"));
  CHECK_THAT(text, Catch::Contains("  0      0        1         -            40           777   "
                                   "77.7 kB\n"));
  // Server 2 did not answer: its shard's size is unknown.
  CHECK_THAT(text, Catch::Contains("  2      2        0         -            42           ?     "
                                   "?\n"));
  CHECK_THAT(text, Catch::Contains("127.0.0.1:7002  alive  1        1        0            ?"));
  const auto json = Parse(ShardsJson(cluster, servers));
  const auto& shards = Field(json, "shards").list_value();
  REQUIRE(shards.values_size() == 3);
  CHECK(Field(shards.values(1).struct_value(), "rows").number_value() == 778);
  CHECK(Field(shards.values(1).struct_value(), "applied_sequence").number_value() == 41);
  CHECK(Field(shards.values(2).struct_value(), "rows").kind_case() ==
        google::protobuf::Value::kNullValue);
  CHECK(Field(shards.values(0).struct_value(), "replicas").list_value().values(0).number_value() ==
        1);
}

TEST_CASE("status keeps the coordinator's view and adds each server's figures", "[ctl]") {
  const rpc::ClusterStatus cluster = Cluster();
  const rpc::ServerStatuses servers = ThreeServers();
  const std::string text = StatusText("127.0.0.1:7000", cluster, servers);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("job \"fmt\", coordinator 127.0.0.1:7000\n"));
  CHECK_THAT(text, Catch::Contains("alive primary 1, replica 1 shards\n"));
  CHECK_THAT(text, Catch::Contains("clocks: steps done: slowest worker 10, fastest 11; workers: 2 "
                                   "of 2 registered: 2 training\n"));
  CHECK_THAT(text, Catch::Contains("server 0: 0 primary shards, applied step 0"));
  CHECK_THAT(text, Catch::Contains("  table emb              dim 16    optimizer adagrad  rows "
                                   "2000         bytes 200000       keys pulled 10000, pushed "
                                   "5000\n"));
  CHECK_THAT(text, Catch::Contains("server 2 (127.0.0.1:7002): UNAVAILABLE: failed to connect\n"));
  // Neither a memory budget nor a disk tier: no memory line.
  CHECK_THAT(text, !Catch::Contains("memory:"));
  const auto json = Parse(StatusJson("127.0.0.1:7000", cluster, servers));
  CHECK(Field(json, "coordinator").string_value() == "127.0.0.1:7000");
  CHECK(Field(Field(json, "cluster").struct_value(), "job_name").string_value() == "fmt");
  const auto& replies = Field(Field(json, "servers").struct_value(), "servers").list_value();
  REQUIRE(replies.values_size() == 3);
  // protobuf's printer writes uint64 as strings.
  const auto& emb =
      Field(Field(replies.values(0).struct_value(), "status").struct_value(), "tables")
          .list_value()
          .values(0)
          .struct_value();
  CHECK(Field(emb, "keys_pulled").string_value() == "10000");
  CHECK(Field(emb, "optimizer").string_value() == "adagrad");
}

TEST_CASE("status shows a server's memory budget and disk tier when it has them", "[ctl]") {
  rpc::ServerStatuses servers = ThreeServers();
  rpc::ServerStatus* budget_only = servers.mutable_servers(0)->mutable_status();
  budget_only->set_memory_budget_bytes(64000000);
  budget_only->set_memory_allowance_bytes(48000000);
  budget_only->set_resident_bytes(40000000);
  budget_only->set_peak_resident_bytes(50000000);
  rpc::ServerStatus* tiered = servers.mutable_servers(1)->mutable_status();
  tiered->set_memory_budget_bytes(64000000);
  tiered->set_memory_allowance_bytes(48000000);
  tiered->set_resident_bytes(41000000);
  tiered->set_peak_resident_bytes(52000000);
  tiered->set_tier_disk_bytes(1500000);
  tiered->set_tier_max_disk_bytes(1000000000);
  tiered->set_tier_refused_rows(3);
  const std::string text = StatusText("127.0.0.1:7000", Cluster(), servers);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("  memory: resident 40.0 MB (peak 50.0 MB), budget 64.0 MB "
                                   "(tables' allowance 48.0 MB)\n"));
  CHECK_THAT(text, Catch::Contains("  memory: resident 41.0 MB (peak 52.0 MB), budget 64.0 MB "
                                   "(tables' allowance 48.0 MB); disk tier 1.5 MB of 1.0 GB, 3 "
                                   "rows refused at the cap\n"));
  const auto json = Parse(StatusJson("127.0.0.1:7000", Cluster(), servers));
  const auto& replies = Field(Field(json, "servers").struct_value(), "servers").list_value();
  const auto& status = Field(replies.values(1).struct_value(), "status").struct_value();
  CHECK(Field(status, "tier_max_disk_bytes").string_value() == "1000000000");
  CHECK(Field(status, "tier_refused_rows").string_value() == "3");
}

TEST_CASE("metrics: rates between two samples per server, in total and per worker", "[ctl]") {
  ClusterSample before{Cluster(), ThreeServers(), absl::FromUnixSeconds(100)};
  ClusterSample after{Cluster(), ThreeServers(), absl::FromUnixSeconds(102)};
  // Server 0 pulled 4000 more keys in 40 requests, pushed 2000 more in 20; server 1 restarted
  // (its counters went back); server 2 never answered.
  rpc::TableStatus* t0 = after.servers.mutable_servers(0)->mutable_status()->mutable_tables(0);
  t0->set_keys_pulled(14000);
  t0->set_pull_requests(40);
  t0->set_keys_pushed(7000);
  t0->set_push_requests(20);
  after.servers.mutable_servers(1)->mutable_status()->mutable_tables(0)->set_keys_pulled(5);
  after.cluster.mutable_members(0)->set_clock(19);  // 10 steps in 2 s
  after.cluster.mutable_clocks()->set_min_clock(10);
  after.cluster.mutable_clocks()->set_max_clock(19);

  const ClusterRates rates = ComputeRates(before, after);
  CHECK(rates.seconds == 2.0);
  REQUIRE(rates.servers.size() == 3);
  CHECK(rates.servers[0].measured);
  CHECK(rates.servers[0].keys_pulled_per_s == 2000.0);
  CHECK(rates.servers[0].keys_pushed_per_s == 1000.0);
  CHECK(rates.servers[0].pull_requests_per_s == 20.0);
  CHECK(rates.servers[0].push_requests_per_s == 10.0);
  CHECK(rates.servers[0].rows == 2020);  // every copy it holds, both tables
  CHECK_FALSE(rates.servers[1].measured);
  CHECK(rates.servers[1].rows == 2020);
  CHECK_FALSE(rates.servers[2].measured);
  CHECK(rates.total.keys_pulled_per_s == 2000.0);
  CHECK(rates.total.rows == 4040);
  REQUIRE(rates.workers.size() == 2);
  CHECK(rates.workers[0].steps == 20);
  CHECK(rates.workers[0].steps_per_s == 5.0);
  CHECK(rates.workers[1].steps_per_s == 0.0);
  CHECK(rates.workers[1].state == "training");

  const std::string text = MetricsText(rates);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("rates over 2.00 s"));
  CHECK_THAT(text, Catch::Contains("  0       127.0.0.1:7000  2.00k          1.00k          20.0"));
  CHECK_THAT(text, Catch::Contains("  1       127.0.0.1:7001  -"));
  CHECK_THAT(text, Catch::Contains("  total"));
  CHECK_THAT(text, Catch::Contains("workers: steps done: slowest 11, fastest 20"));
  const auto json = Parse(MetricsJson(rates, after.servers));
  CHECK(Field(json, "interval_s").number_value() == 2.0);
  const auto& servers = Field(json, "servers").list_value();
  REQUIRE(servers.values_size() == 3);
  CHECK(Field(servers.values(0).struct_value(), "keys_pulled_per_s").number_value() == 2000);
  CHECK(Field(servers.values(1).struct_value(), "keys_pulled_per_s").kind_case() ==
        google::protobuf::Value::kNullValue);
  CHECK(Field(Field(json, "total").struct_value(), "rows").number_value() == 4040);
  CHECK(Field(json, "workers").list_value().values_size() == 2);
  CHECK(Field(json, "servers_failed").list_value().values_size() == 1);
}

TEST_CASE("JSON strings are escaped", "[ctl]") {
  rpc::ServerStatuses servers;
  rpc::ServerStatusReply* reply = servers.add_servers();
  reply->set_alive(true);
  reply->set_address("a\"b\\c");
  reply->set_error("line1\nline2\t\x01");
  const auto json = Parse(TablesJson(servers));
  CHECK(Field(json, "servers_failed").list_value().values(0).string_value() ==
        "server 0 (a\"b\\c): line1\nline2\t\x01");
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

namespace ps {
namespace client_internal {
namespace {

TEST_CASE("ctl format: the coordinators' leadership and etcd's health", "[ctl_format]") {
  rpc::Leadership leadership;
  leadership.set_leader("10.0.0.1:7000");
  leadership.add_standbys("10.0.0.2:7000");
  leadership.add_standbys("10.0.0.3:7000");
  leadership.set_lease_ttl_s(2);
  leadership.set_terms(3);
  const absl::Time now = absl::FromUnixSeconds(1000000);
  leadership.set_took_office_unix_ms(absl::ToUnixMillis(now - absl::Seconds(95)));
  leadership.set_prefix("/ps/job/");
  rpc::EtcdEndpoint* up = leadership.add_etcd();
  up->set_endpoint("10.0.0.1:2379");
  up->set_healthy(true);
  up->set_latency_ms(0.84);
  up->set_is_raft_leader(true);
  rpc::EtcdEndpoint* down = leadership.add_etcd();
  down->set_endpoint("10.0.0.2:2379");
  down->set_error("Connection");
  CHECK(LeadershipText(leadership, now) ==
        "coordinators: leader 10.0.0.1:7000 (term 3, took over 1m35s ago, lease 2 s), standbys "
        "10.0.0.2:7000, 10.0.0.3:7000\n"
        "etcd, prefix /ps/job/: 10.0.0.1:2379 healthy 0.8 ms (raft leader); 10.0.0.2:2379 DOWN "
        "(Connection)\n");
  leadership.clear_standbys();
  CHECK_THAT(LeadershipText(leadership, now), Catch::Contains("lease 2 s), no standby\n"));
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

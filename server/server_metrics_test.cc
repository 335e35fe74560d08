#include "server/server_metrics.h"

#include <catch2/catch.hpp>
#include <string>

namespace ps {
namespace server {
namespace {

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST_CASE("The server's collector emits its status at scrape time, nothing before it has one",
          "[server_metrics]") {
  metrics::Registry registry;
  bool ready = false;
  uint64_t user_rows = 10;
  AddServerCollector(&registry, [&](rpc::ServerStatus* status) {
    if (!ready) return false;
    rpc::TableStatus* table = status->add_tables();
    table->set_name("user");
    table->set_rows(user_rows);
    table->set_bytes(user_rows * 136);
    table->set_keys_pulled(5000);
    table->set_keys_pushed(4000);
    status->set_late_pushes_dropped(3);
    status->set_late_keys_dropped(300);
    status->set_applied_step(41);
    status->set_max_pull_staleness(2);
    status->set_mean_pull_staleness(0.5);
    status->add_primary_shards(0);
    status->add_primary_shards(2);
    status->add_replica_shards(1);
    status->set_map_version(7);
    rpc::ShardProgress* shard = status->add_shards();
    shard->set_shard(2);
    rpc::ReplicaLag* lag = shard->add_replica_lags();
    lag->set_server_id(1);
    lag->set_records(5);
    lag->set_bytes(680);
    lag->set_millis(1500);
    return true;
  });
  CHECK(registry.Render().empty());
  ready = true;
  user_rows = 12;
  const std::string text = registry.Render();
  INFO(text);
  CHECK(Contains(text, "ps_server_rows{table=\"user\"} 12\n"));
  CHECK(Contains(text, "ps_server_memory_bytes{table=\"user\"} 1632\n"));
  CHECK(Contains(text, "# TYPE ps_server_keys_pulled_total counter\n"));
  CHECK(Contains(text, "ps_server_keys_pulled_total{table=\"user\"} 5000\n"));
  CHECK(Contains(text, "ps_server_keys_pushed_total{table=\"user\"} 4000\n"));
  CHECK(Contains(text, "# TYPE ps_server_late_pushes_dropped_total counter\n"));
  CHECK(Contains(text, "ps_server_late_pushes_dropped_total 3\n"));
  CHECK(Contains(text, "ps_server_late_keys_dropped_total 300\n"));
  CHECK(Contains(text, "ps_server_applied_step 41\n"));
  CHECK(Contains(text, "ps_server_pull_staleness_max_steps 2\n"));
  CHECK(Contains(text, "ps_server_pull_staleness_mean_steps 0.5\n"));
  CHECK(Contains(text, "ps_server_primary_shards 2\n"));
  CHECK(Contains(text, "ps_server_replica_shards 1\n"));
  CHECK(Contains(text, "ps_server_shard_map_version 7\n"));
  CHECK(Contains(text, "ps_server_replica_lag_records{shard=\"2\",replica=\"1\"} 5\n"));
  CHECK(Contains(text, "ps_server_replica_lag_bytes{shard=\"2\",replica=\"1\"} 680\n"));
  CHECK(Contains(text, "ps_server_replica_lag_seconds{shard=\"2\",replica=\"1\"} 1.5\n"));
}

TEST_CASE("The server's collector emits the memory budget's bounds and the disk tier",
          "[server_metrics]") {
  metrics::Registry registry;
  AddServerCollector(&registry, [](rpc::ServerStatus* status) {
    rpc::TableStatus* table = status->add_tables();
    table->set_name("user");
    table->set_evicted_ttl(4);
    table->set_evicted_budget(9);
    table->set_admission_refused(6);
    table->set_full_refused(2);
    table->set_max_rows_per_copy(1000);
    table->set_tier_rows(700);
    table->set_tier_bytes(700 * 78);
    table->set_demoted(900);
    table->set_promoted(200);
    status->set_memory_budget_bytes(64 << 20);
    status->set_memory_allowance_bytes(48 << 20);
    status->set_resident_bytes(40 << 20);
    status->set_peak_resident_bytes(50 << 20);
    status->set_tier_disk_bytes(123456);
    status->set_tier_max_disk_bytes(uint64_t{1} << 30);
    status->set_tier_refused_rows(17);
    return true;
  });
  const std::string text = registry.Render();
  INFO(text);
  CHECK(Contains(text, "# TYPE ps_server_rows_evicted_total counter\n"));
  CHECK(Contains(text, "ps_server_rows_evicted_total{table=\"user\",reason=\"ttl\"} 4\n"));
  CHECK(Contains(text, "ps_server_rows_evicted_total{table=\"user\",reason=\"budget\"} 9\n"));
  CHECK(Contains(text, "ps_server_admission_refused_total{table=\"user\"} 6\n"));
  CHECK(Contains(text, "ps_server_rows_refused_at_cap_total{table=\"user\"} 2\n"));
  CHECK(Contains(text, "ps_server_max_rows_per_copy{table=\"user\"} 1000\n"));
  CHECK(Contains(text, "ps_server_memory_budget_bytes 67108864\n"));
  CHECK(Contains(text, "ps_server_memory_allowance_bytes 50331648\n"));
  CHECK(Contains(text, "ps_server_resident_bytes 41943040\n"));
  CHECK(Contains(text, "ps_server_peak_resident_bytes 52428800\n"));
  CHECK(Contains(text, "# TYPE ps_server_tier_rows gauge\n"));
  CHECK(Contains(text, "ps_server_tier_rows{table=\"user\"} 700\n"));
  CHECK(Contains(text, "# TYPE ps_server_tier_bytes gauge\n"));
  CHECK(Contains(text, "ps_server_tier_bytes{table=\"user\"} 54600\n"));
  CHECK(Contains(text, "# TYPE ps_server_rows_demoted_total counter\n"));
  CHECK(Contains(text, "ps_server_rows_demoted_total{table=\"user\"} 900\n"));
  CHECK(Contains(text, "# TYPE ps_server_rows_promoted_total counter\n"));
  CHECK(Contains(text, "ps_server_rows_promoted_total{table=\"user\"} 200\n"));
  CHECK(Contains(text, "# TYPE ps_server_tier_disk_bytes gauge\n"));
  CHECK(Contains(text, "ps_server_tier_disk_bytes 123456\n"));
  CHECK(Contains(text, "# TYPE ps_server_tier_max_disk_bytes gauge\n"));
  CHECK(Contains(text, "ps_server_tier_max_disk_bytes 1073741824\n"));
  CHECK(Contains(text, "# TYPE ps_server_tier_refused_rows_total counter\n"));
  CHECK(Contains(text, "ps_server_tier_refused_rows_total 17\n"));
}

}  // namespace
}  // namespace server
}  // namespace ps

#include "server/table_traffic.h"

#include <catch2/catch.hpp>
#include <vector>

namespace ps {
namespace server {
namespace {

TEST_CASE("a table's traffic counts keys and requests each way, and its hot keys apart",
          "[hot_keys]") {
  HotKeys::Options options;
  options.sample_every = 1;
  TableTraffic traffic(options);
  const std::vector<uint64_t> pulled = {7, 7, 7, 1, 2};
  const std::vector<uint64_t> pushed = {9, 9, 3};
  traffic.RecordPull(pulled);
  traffic.RecordPull(pulled);
  traffic.RecordPush(pushed);
  traffic.RecordPull({});  // a request of no keys is still a request

  rpc::TableStatus table;
  traffic.FillCounters(&table);
  CHECK(table.keys_pulled() == 10);
  CHECK(table.pull_requests() == 3);
  CHECK(table.keys_pushed() == 3);
  CHECK(table.push_requests() == 1);
  CHECK(table.hot_keys_skipped() == 0);

  rpc::ServerStatus status;
  traffic.FillHotKeys(2, &status);
  REQUIRE(status.hot_pulled_size() == 2);
  CHECK(status.hot_keys_sample_every() == 1);
  CHECK(status.hot_pulled(0).id() == 7);
  CHECK(status.hot_pulled(0).count() == 6);
  CHECK(status.hot_pulled(0).error() == 0);
  CHECK(status.hot_pulled(1).id() == 1);  // 1 and 2 tie at 2: the smaller id first
  CHECK(status.hot_pulled(1).count() == 2);
  REQUIRE(status.hot_pushed_size() == 2);
  CHECK(status.hot_pushed(0).id() == 9);
  CHECK(status.hot_pushed(0).count() == 2);
  CHECK(status.hot_pushed(1).id() == 3);
}

TEST_CASE("the default traffic samples keys and scales the counts back", "[hot_keys]") {
  TableTraffic traffic;  // every 128th key
  std::vector<uint64_t> keys(16000, 42);
  for (int i = 0; i < 10; ++i) traffic.RecordPush(keys);
  rpc::ServerStatus status;
  traffic.FillHotKeys(10, &status);
  CHECK(status.hot_keys_sample_every() == 128);
  REQUIRE(status.hot_pushed_size() == 1);
  CHECK(status.hot_pushed(0).id() == 42);
  CHECK(status.hot_pushed(0).count() == 160000);  // 16000 keys: exactly 125 samples of 128
  CHECK(status.hot_pulled_size() == 0);
}

TEST_CASE("with sampling off the counters still count and no hot keys are kept", "[hot_keys]") {
  HotKeys::Options options;
  options.sample_every = 0;
  TableTraffic traffic(options);
  const std::vector<uint64_t> keys(1000, 3);
  traffic.RecordPull(keys);
  traffic.RecordPush(keys);
  rpc::TableStatus table;
  traffic.FillCounters(&table);
  CHECK(table.keys_pulled() == 1000);
  CHECK(table.keys_pushed() == 1000);
  rpc::ServerStatus status;
  traffic.FillHotKeys(10, &status);
  CHECK(status.hot_keys_sample_every() == 0);
  CHECK(status.hot_pulled_size() == 0);
  CHECK(status.hot_pushed_size() == 0);
}

}  // namespace
}  // namespace server
}  // namespace ps

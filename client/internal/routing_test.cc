#include "client/internal/routing.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>

namespace ps {
namespace client_internal {
namespace {

// A map of 4 shards over servers 10 (a:1) and 20 (b:2); shard s has primary 10 for even s.
rpc::ShardMap TwoServers() {
  rpc::ShardMap map;
  map.set_version(3);
  map.set_num_shards(4);
  for (uint32_t s = 0; s < 4; ++s) {
    rpc::ShardAssignment* a = map.add_shards();
    a->set_shard(s);
    a->set_primary(s % 2 == 0 ? 10 : 20);
    a->add_replicas(s % 2 == 0 ? 20 : 10);
  }
  rpc::ServerInfo* a = map.add_servers();
  a->set_server_id(10);
  a->set_address("127.0.0.1:1");
  rpc::ServerInfo* b = map.add_servers();
  b->set_server_id(20);
  b->set_address("127.0.0.1:2");
  return map;
}

struct Links {
  std::shared_ptr<ServerLink> operator()(const std::string& address) {
    std::shared_ptr<ServerLink>& link = by_address[address];
    if (link == nullptr) {
      ServerLinkOptions options;
      options.address = address;
      options.shared_memory = false;
      link = std::make_shared<ServerLink>(options);
    }
    return link;
  }
  std::map<std::string, std::shared_ptr<ServerLink>> by_address;
};

TEST_CASE("a shard map is made ready for routing", "[client][routing]") {
  Links links;
  const bool read_from_replicas = GENERATE(false, true);
  auto routing = MakeRouting(TwoServers(), read_from_replicas, std::ref(links));
  REQUIRE(routing.ok());
  const Routing& r = **routing;
  CHECK(r.version == 3);
  CHECK(r.shard_to_server == std::vector<uint32_t>{10, 20, 10, 20});
  REQUIRE(r.servers.size() == 2);
  CHECK(r.servers.at(10)->address() == "127.0.0.1:1");
  CHECK(r.servers.at(20)->address() == "127.0.0.1:2");
  CHECK(r.map.version() == 3);
  if (read_from_replicas) {
    REQUIRE(r.readers.size() == 4);
    CHECK(r.readers[0] == std::vector<uint32_t>{10, 20});
    CHECK(r.readers[1] == std::vector<uint32_t>{20, 10});
  } else {
    CHECK(r.readers.empty());
  }
  // The links are the caller's: a newer version reuses them.
  rpc::ShardMap newer = TwoServers();
  newer.set_version(4);
  auto again = MakeRouting(newer, read_from_replicas, std::ref(links));
  REQUIRE(again.ok());
  CHECK((*again)->servers.at(10) == r.servers.at(10));
}

TEST_CASE("a broken shard map is refused", "[client][routing]") {
  Links links;
  rpc::ShardMap map = TwoServers();
  SECTION("a shard missing") { map.mutable_shards()->RemoveLast(); }
  SECTION("a shard out of range") { map.mutable_shards(3)->set_shard(9); }
  SECTION("an unknown server") { map.mutable_shards(1)->set_primary(30); }
  CHECK(MakeRouting(map, false, std::ref(links)).status().code() == absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

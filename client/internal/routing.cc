#include "client/internal/routing.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace client_internal {

absl::StatusOr<std::shared_ptr<const Routing>> MakeRouting(
    const rpc::ShardMap& map, bool read_from_replicas,
    const std::function<std::shared_ptr<ServerLink>(const std::string& address)>& link_to) {
  auto routing = std::make_shared<Routing>();
  routing->version = map.version();
  routing->map = map;
  routing->shard_to_server.resize(map.num_shards());
  if (map.shards_size() != static_cast<int>(map.num_shards())) {
    return absl::InternalError("coordinator sent an incomplete shard map");
  }
  for (const rpc::ShardAssignment& a : map.shards()) {
    if (a.shard() >= map.num_shards()) return absl::InternalError("shard out of range in map");
    routing->shard_to_server[a.shard()] = a.primary();
  }
  if (read_from_replicas) {
    routing->readers.resize(map.num_shards());
    for (const rpc::ShardAssignment& a : map.shards()) {
      std::vector<uint32_t>& readers = routing->readers[a.shard()];
      readers.push_back(a.primary());
      readers.insert(readers.end(), a.replicas().begin(), a.replicas().end());
    }
  }
  for (const rpc::ServerInfo& server : map.servers()) {
    routing->servers[server.server_id()] = link_to(server.address());
  }
  for (const uint32_t s : routing->shard_to_server) {
    if (!routing->servers.contains(s)) {
      return absl::InternalError(absl::StrFormat("shard map names unknown server %d", s));
    }
  }
  return std::shared_ptr<const Routing>(std::move(routing));
}

}  // namespace client_internal
}  // namespace ps

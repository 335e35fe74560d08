// A shard map made ready for routing: which server owns each shard, which copies a pull may read,
// and the link to every server. Private to the client library.
#ifndef PS_CLIENT_INTERNAL_ROUTING_H_
#define PS_CLIENT_INTERNAL_ROUTING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "client/internal/server_link.h"
#include "proto/coordinator.pb.h"

namespace ps {
namespace client_internal {

// A Routing is one version of the shard map. Immutable once made (replaced whole on refresh), so
// thread-compatible and shared between threads as a shared_ptr<const Routing>.
struct Routing {
  uint64_t version = 0;
  // By shard: its primary's server id.
  std::vector<uint32_t> shard_to_server;
  // cluster.read_from_replicas: by shard, the servers a pull may go to (the primary, then the
  // live replicas); empty otherwise.
  std::vector<std::vector<uint32_t>> readers;
  // By server id: its link.
  absl::flat_hash_map<uint32_t, std::shared_ptr<ServerLink>> servers;
  rpc::ShardMap map;
};

// Makes the routing of `map`, with readers if `read_from_replicas`; `link_to(address)` gives the
// link to each server of the map (the caller keeps one per address across versions).
// INTERNAL for a map that is incomplete (not every shard once), names a shard out of range, or
// names a server it does not list.
absl::StatusOr<std::shared_ptr<const Routing>> MakeRouting(
    const rpc::ShardMap& map, bool read_from_replicas,
    const std::function<std::shared_ptr<ServerLink>(const std::string& address)>& link_to);

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_ROUTING_H_

// Placement and failover: the versioned shard map of a job, how it is first laid out over the
// servers, and how it changes when a server dies, returns or catches up a copy.
#ifndef PS_SERVER_COORDINATOR_PLACEMENT_H_
#define PS_SERVER_COORDINATOR_PLACEMENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

namespace ps {
namespace coordinator {

// A server slot as placement sees it: index = server_id.
struct ServerState {
  std::string address;  // host:port
  bool alive = false;
};

// A Placement holds the shard map (rpc::ShardMap: for each shard its primary, replicas and copies
// catching up, the primary's term, the map's version) and the progress servers report for their
// copies, which decides whom a failover promotes. It knows nothing of membership: each call that
// looks at servers is given their slots and liveness as of now. Thread-compatible (the coordinator
// calls it under its lock).
class Placement {
 public:
  // A map of `num_shards` shards over `num_servers` servers with `replication_factor` copies each
  // (primary included), once built. `restore_from` and `restore_unchecked` are carried in the map
  // (ShardMap.restore_from, .restore_unchecked) from the start, before it is built too.
  Placement(uint32_t num_servers, uint32_t num_shards, uint32_t replication_factor,
            std::string restore_from, bool restore_unchecked);

  // Whether the map exists (every server slot was taken once).
  bool has_map() const { return has_map_; }
  // The map; before it exists, only its restore fields are set.
  const rpc::ShardMap& map() const { return map_; }
  // The map's version; 0 before it exists.
  uint64_t version() const { return has_map_ ? map_.version() : 0; }
  // Replicas promoted to primary so far.
  uint64_t failovers() const { return failovers_; }

  // Takes up the map, whether it was built, and the failover count a state store kept.
  void TakeUp(const rpc::CoordinatorState& state);
  // Writes them into `state`.
  void SaveTo(rpc::CoordinatorState* state) const;

  // Builds the map (version 1) when it does not exist and `servers` has num_servers slots: shard s
  // has primary s % num_servers and replicas on the next servers round the ring, servers on hosts
  // without a copy of it first. Returns whether it built it.
  bool MaybeBuild(const std::vector<ServerState>& servers);

  // Fails server `server_id` over: it is dropped from every shard's replicas and copies catching
  // up; each shard it was primary of gets the live replica with the highest applied sequence as
  // primary (primary_term + 1, failovers + 1), or is marked lost (no copies left) when no live
  // replica is left. Returns whether the map changed. The version is not bumped: see Changed.
  // Does nothing before the map exists.
  bool FailOver(uint32_t server_id, const std::vector<ServerState>& servers);

  // Gives every shard with fewer than replication_factor copies a copy catching up on a live
  // server that holds none of it: servers on other hosts first, then the least loaded. Returns
  // whether the map changed (not bumping the version). Does nothing before the map exists.
  bool Heal(const std::vector<ServerState>& servers);

  // The map changed: bumps its version and refreshes its server list from `servers`. Does nothing
  // before the map exists.
  void Changed(const std::vector<ServerState>& servers);

  // Records the progress server `server_id` reported for its copies (shards outside the map, or
  // any before the map exists, are ignored). A copy catching up that its primary reports caught up
  // (ReplicaLag.caught_up) becomes a replica. Returns whether the map changed (not bumping the
  // version).
  bool ApplyProgress(uint32_t server_id, const std::vector<rpc::ShardProgress>& shards);

  // Forgets what server `server_id` reported (it restarted, empty).
  void ForgetProgress(uint32_t server_id);

  // A GetShardMap(min_version) wait's answer: the map when it exists with a version >= min_version;
  // otherwise nullopt, or when `expired` UNAVAILABLE "shard map not ready: K of N servers
  // registered" (K = `servers_registered`) before the map exists, else naming its version.
  std::optional<absl::StatusOr<rpc::ShardMap>> Answer(uint64_t min_version,
                                                      size_t servers_registered,
                                                      bool expired) const;

  // Whether the restored checkpoint's files are still being checked.
  bool restore_unchecked() const { return map_.restore_unchecked(); }
  // They were checked: the map no longer says restore_unchecked (not bumping the version).
  void ClearRestoreUnchecked() { map_.set_restore_unchecked(false); }

  // Fills status's shard_map, shards (copies with their applied sequences and lags) and failovers,
  // and, when `sync` and every live shard's primary reported a step, applied_step (their least).
  // Sets nothing but failovers before the map exists.
  void FillStatus(bool sync, rpc::ClusterStatus* status) const;

 private:
  // The host part of a server's address.
  static std::string Host(const std::vector<ServerState>& servers, uint32_t server_id);
  static bool Alive(const std::vector<ServerState>& servers, uint32_t server_id);
  uint64_t AppliedSequence(uint32_t server_id, uint32_t shard) const;

  const uint32_t num_servers_;
  const uint32_t num_shards_;
  const uint32_t replication_factor_;

  bool has_map_ = false;
  rpc::ShardMap map_;
  uint64_t failovers_ = 0;
  // By server_id, then shard: the latest progress its heartbeats reported.
  std::vector<absl::flat_hash_map<uint32_t, rpc::ShardProgress>> progress_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_PLACEMENT_H_

#include "server/coordinator/placement.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace coordinator {

Placement::Placement(uint32_t num_servers, uint32_t num_shards, uint32_t replication_factor,
                     std::string restore_from, bool restore_unchecked)
    : num_servers_(num_servers),
      num_shards_(num_shards),
      replication_factor_(replication_factor),
      progress_(num_servers) {
  // Kept in the map before it is built too, so that a coordinator restarted from its store
  // before every server registered still restores the checkpoint (and checks it).
  map_.set_restore_from(std::move(restore_from));
  map_.set_restore_unchecked(restore_unchecked);
}

void Placement::TakeUp(const rpc::CoordinatorState& state) {
  has_map_ = state.map_built();
  map_ = state.map();
  failovers_ = state.failovers();
}

void Placement::SaveTo(rpc::CoordinatorState* state) const {
  state->set_map_built(has_map_);
  *state->mutable_map() = map_;
  state->set_failovers(failovers_);
}

std::string Placement::Host(const std::vector<ServerState>& servers, uint32_t server_id) {
  const std::string& address = servers[server_id].address;
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

bool Placement::Alive(const std::vector<ServerState>& servers, uint32_t server_id) {
  return server_id < servers.size() && servers[server_id].alive;
}

uint64_t Placement::AppliedSequence(uint32_t server_id, uint32_t shard) const {
  const auto p = progress_[server_id].find(shard);
  return p == progress_[server_id].end() ? 0 : p->second.applied_sequence();
}

bool Placement::MaybeBuild(const std::vector<ServerState>& servers) {
  if (has_map_ || servers.size() < num_servers_) return false;
  has_map_ = true;
  const std::string restore_from = map_.restore_from();  // from the start, or the store
  const bool restore_unchecked = map_.restore_unchecked();
  map_.Clear();
  map_.set_version(0);  // Changed makes it 1
  map_.set_num_shards(num_shards_);
  map_.set_restore_from(restore_from);
  map_.set_restore_unchecked(restore_unchecked);
  for (uint32_t shard = 0; shard < num_shards_; ++shard) {
    rpc::ShardAssignment* a = map_.add_shards();
    a->set_shard(shard);
    const uint32_t primary = shard % num_servers_;
    a->set_primary(primary);
    // Replicas on the next servers round the ring, first those on hosts without a copy yet.
    std::vector<uint32_t> hosts_used = {primary};
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t r = 1; r < num_servers_ && a->replicas_size() + 1u < replication_factor_; ++r) {
        const uint32_t s = (shard + r) % num_servers_;
        if (std::find(a->replicas().begin(), a->replicas().end(), s) != a->replicas().end()) {
          continue;
        }
        const bool new_host = std::none_of(hosts_used.begin(), hosts_used.end(), [&](uint32_t h) {
          return Host(servers, h) == Host(servers, s);
        });
        if (pass == 0 && !new_host) continue;
        a->add_replicas(s);
        hosts_used.push_back(s);
      }
    }
  }
  Changed(servers);
  return true;
}

bool Placement::FailOver(uint32_t server_id, const std::vector<ServerState>& servers) {
  if (!has_map_) return false;
  bool changed = false;
  auto drop = [&](google::protobuf::RepeatedField<uint32_t>* copies) {
    const auto pos = std::find(copies->begin(), copies->end(), server_id);
    if (pos == copies->end()) return;
    copies->erase(pos);
    changed = true;
  };
  for (rpc::ShardAssignment& a : *map_.mutable_shards()) {
    if (a.lost()) continue;
    drop(a.mutable_replicas());
    drop(a.mutable_catching_up());
    if (a.primary() != server_id) continue;
    changed = true;
    // The live replica that applied the most: under SYNC replication every live replica holds
    // every acknowledged push; under ASYNC this one loses the least.
    int best = -1;
    uint64_t best_sequence = 0;
    for (const uint32_t r : a.replicas()) {
      if (!Alive(servers, r)) continue;
      const uint64_t sequence = AppliedSequence(r, a.shard());
      if (best < 0 || sequence > best_sequence) {
        best = static_cast<int>(r);
        best_sequence = sequence;
      }
    }
    if (best < 0) {
      a.set_lost(true);
      a.clear_replicas();
      a.clear_catching_up();  // copies that never completed hold nothing to serve
      std::fprintf(stderr, "coordinator: shard %d lost its last copy (server %d)\n", a.shard(),
                   server_id);
      continue;
    }
    a.set_primary(static_cast<uint32_t>(best));
    auto* replicas = a.mutable_replicas();
    replicas->erase(std::find(replicas->begin(), replicas->end(), static_cast<uint32_t>(best)));
    a.set_primary_term(a.primary_term() + 1);
    ++failovers_;
  }
  return changed;
}

bool Placement::Heal(const std::vector<ServerState>& servers) {
  if (!has_map_) return false;
  std::vector<int> load(servers.size(), 0);
  for (const rpc::ShardAssignment& a : map_.shards()) {
    if (a.lost()) continue;
    ++load[a.primary()];
    for (const uint32_t r : a.replicas()) ++load[r];
    for (const uint32_t r : a.catching_up()) ++load[r];
  }
  bool changed = false;
  for (rpc::ShardAssignment& a : *map_.mutable_shards()) {
    if (a.lost()) continue;
    std::vector<uint32_t> holders = {a.primary()};
    holders.insert(holders.end(), a.replicas().begin(), a.replicas().end());
    holders.insert(holders.end(), a.catching_up().begin(), a.catching_up().end());
    while (holders.size() < replication_factor_) {
      int best = -1;
      bool best_new_host = false;
      for (uint32_t s = 0; s < servers.size(); ++s) {
        if (!Alive(servers, s) || std::find(holders.begin(), holders.end(), s) != holders.end()) {
          continue;
        }
        const std::string host = Host(servers, s);
        const bool new_host = std::none_of(holders.begin(), holders.end(),
                                           [&](uint32_t h) { return Host(servers, h) == host; });
        if (best < 0 || (new_host && !best_new_host) ||
            (new_host == best_new_host && load[s] < load[best])) {
          best = static_cast<int>(s);
          best_new_host = new_host;
        }
      }
      if (best < 0) break;  // no live server without a copy: wait for one
      a.add_catching_up(static_cast<uint32_t>(best));
      holders.push_back(static_cast<uint32_t>(best));
      ++load[best];
      changed = true;
    }
  }
  return changed;
}

void Placement::Changed(const std::vector<ServerState>& servers) {
  if (!has_map_) return;
  map_.set_version(map_.version() + 1);
  map_.clear_servers();
  for (size_t id = 0; id < servers.size(); ++id) {
    rpc::ServerInfo* info = map_.add_servers();
    info->set_server_id(static_cast<uint32_t>(id));
    info->set_address(servers[id].address);
    info->set_alive(servers[id].alive);
    info->set_host(Host(servers, static_cast<uint32_t>(id)));
  }
}

bool Placement::ApplyProgress(uint32_t server_id, const std::vector<rpc::ShardProgress>& shards) {
  bool changed = false;
  for (const rpc::ShardProgress& p : shards) {
    if (!has_map_ || p.shard() >= static_cast<uint32_t>(map_.shards_size())) continue;
    progress_[server_id][p.shard()] = p;
    rpc::ShardAssignment* a = map_.mutable_shards(p.shard());
    if (a->lost() || a->primary() != server_id) continue;
    // A copy becomes a replica on its primary's word that it holds every push the primary
    // acknowledged (its own word would not say whether acknowledged pushes are missing).
    for (const rpc::ReplicaLag& lag : p.replica_lags()) {
      if (!lag.caught_up()) continue;
      auto* catching = a->mutable_catching_up();
      const auto pos = std::find(catching->begin(), catching->end(), lag.server_id());
      if (pos == catching->end()) continue;
      catching->erase(pos);
      a->add_replicas(lag.server_id());
      changed = true;
    }
  }
  return changed;
}

void Placement::ForgetProgress(uint32_t server_id) { progress_[server_id].clear(); }

std::optional<absl::StatusOr<rpc::ShardMap>> Placement::Answer(uint64_t min_version,
                                                               size_t servers_registered,
                                                               bool expired) const {
  if (has_map_ && map_.version() >= min_version) return map_;
  if (!expired) return std::nullopt;
  if (!has_map_) {
    return absl::UnavailableError(absl::StrCat("shard map not ready: ", servers_registered, " of ",
                                               num_servers_, " servers registered"));
  }
  return absl::UnavailableError(absl::StrCat("shard map not ready: version ", map_.version(),
                                             " is older than the requested ", min_version));
}

void Placement::FillStatus(bool sync, rpc::ClusterStatus* status) const {
  status->set_failovers(failovers_);
  if (!has_map_) return;
  *status->mutable_shard_map() = map_;
  for (const rpc::ShardAssignment& a : map_.shards()) {
    rpc::ShardStatus* shard = status->add_shards();
    shard->set_shard(a.shard());
    shard->set_lost(a.lost());
    if (a.lost()) continue;
    const auto lag_of = [&](uint32_t server) {
      rpc::ReplicaLag lag;
      const auto p = progress_[a.primary()].find(a.shard());
      if (p == progress_[a.primary()].end()) return lag;
      for (const rpc::ReplicaLag& l : p->second.replica_lags()) {
        if (l.server_id() == server) lag = l;
      }
      return lag;
    };
    rpc::ShardCopyStatus* primary = shard->add_copies();
    primary->set_server_id(a.primary());
    primary->set_primary(true);
    primary->set_applied_sequence(AppliedSequence(a.primary(), a.shard()));
    for (int kind = 0; kind < 2; ++kind) {
      for (const uint32_t r : kind == 0 ? a.replicas() : a.catching_up()) {
        rpc::ShardCopyStatus* copy = shard->add_copies();
        copy->set_server_id(r);
        copy->set_catching_up(kind == 1);
        copy->set_applied_sequence(AppliedSequence(r, a.shard()));
        *copy->mutable_lag() = lag_of(r);
      }
    }
  }
  if (!sync) return;
  // The step every shard applied, as its primary last reported it.
  std::optional<int64_t> applied;
  for (const rpc::ShardAssignment& a : map_.shards()) {
    if (a.lost()) continue;
    const auto p = progress_[a.primary()].find(a.shard());
    if (p == progress_[a.primary()].end()) {
      applied.reset();
      break;
    }
    applied = std::min(applied.value_or(p->second.applied_step()), p->second.applied_step());
  }
  if (applied.has_value()) status->set_applied_step(*applied);
}

}  // namespace coordinator
}  // namespace ps

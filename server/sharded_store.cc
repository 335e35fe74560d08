#include "server/sharded_store.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/finite.h"
#include "common/hash.h"
#include "common/job_config.h"
#include "common/status_macros.h"

namespace ps {
namespace server {
namespace {

absl::flat_hash_map<std::string, size_t> IndexTables(
    const std::vector<std::unique_ptr<TableSpec>>& tables) {
  absl::flat_hash_map<std::string, size_t> index;
  for (size_t i = 0; i < tables.size(); ++i) index[tables[i]->name] = i;
  return index;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedStore>> ShardedStore::Create(const config::Job& job,
                                                                   const Options& options) {
  PS_RETURN_IF_ERROR(ValidateJob(job));
  std::vector<std::unique_ptr<TableSpec>> tables;
  for (const config::Table& t : job.tables()) {
    PS_ASSIGN_OR_RETURN(auto spec, TableSpec::Create(t, job.training().seed()));
    tables.push_back(std::move(spec));
  }
  PS_ASSIGN_OR_RETURN(auto dense_optimizer, Optimizer::Create(job.training().dense_optimizer()));
  if (job.cluster().replication_factor() > 1 && options.replication_transport == nullptr) {
    return absl::InvalidArgumentError(
        "replication_factor > 1 needs a replication transport (ShardedStore::Options)");
  }
  // The copies an even placement gives each server.
  const config::Cluster& cluster = job.cluster();
  const size_t servers = std::max<uint32_t>(1, cluster.num_servers());
  const size_t copies =
      (size_t{cluster.num_shards()} * cluster.replication_factor() + servers - 1) / servers;
  const bool tiered = !options.tier_dir.empty();
  if (tiered && options.memory_budget_bytes <= 0) {
    return absl::InvalidArgumentError(
        "--tier_dir holds the rows that the memory budget moves out of memory, and this server "
        "has no budget: set --memory_budget_mb too");
  }
  if (!tiered && options.tier_max_disk_bytes != 0) {
    return absl::InvalidArgumentError("--tier_max_disk_gb is the cap of a tier: set --tier_dir");
  }
  RowTier::Options tiering;
  MemoryKeeper::Options keeping;
  keeping.budget_bytes = options.memory_budget_bytes;
  keeping.now = options.now;
  if (tiered) {
    keeping.other_bytes = RowTier::MemoryBytesFor(tiering);
  }
  std::vector<const TableSpec*> specs;
  for (const auto& spec : tables) specs.push_back(spec.get());
  PS_ASSIGN_OR_RETURN(auto keeper,
                      MemoryKeeper::Create(job, std::move(specs), copies, std::move(keeping)));
  std::unique_ptr<RowTier> tier;
  if (tiered) {
    tiering.dir = options.tier_dir;
    tiering.max_disk_bytes = options.tier_max_disk_bytes;
    for (size_t t = 0; t < tables.size(); ++t) {
      tiering.stored_row_bytes.push_back(static_cast<uint32_t>(tables[t]->stored_row_bytes()));
      tiering.ttl_ticks.push_back(keeper->TtlTicks(t));
    }
    tiering.use_ticks = keeper->use_ticks();
    PS_ASSIGN_OR_RETURN(tier, RowTier::Open(std::move(tiering)));
  }
  return std::unique_ptr<ShardedStore>(new ShardedStore(job, options, std::move(tables),
                                                        std::move(dense_optimizer),
                                                        std::move(keeper), std::move(tier)));
}

ShardedStore::ShardedStore(const config::Job& job, const Options& options,
                           std::vector<std::unique_ptr<TableSpec>> tables,
                           std::unique_ptr<Optimizer> dense_optimizer,
                           std::unique_ptr<MemoryKeeper> keeper, std::unique_ptr<RowTier> tier)
    : job_(job),
      options_(options),
      num_shards_(job.cluster().num_shards()),
      max_message_bytes_(job.cluster().max_message_bytes()),
      tables_(std::move(tables)),
      table_index_(IndexTables(tables_)),
      dense_optimizer_(std::move(dense_optimizer)),
      tier_(std::move(tier)),
      keeper_(std::move(keeper)),
      lookup_pool_(std::max(0, options.lookup_threads)),
      shard_config_{&tables_,
                    dense_optimizer_.get(),
                    job.cluster().dense_chunk_floats(),
                    job.training().mode() == config::Training::SYNC,
                    keeper_->sketch_widths(),
                    keeper_->use_ticks(),
                    tier_.get()},
      sync_(job.training().mode() == config::Training::SYNC),
      read_from_replicas_(job.cluster().read_from_replicas()),
      stats_(job, &tables_, options.hot_keys_sample_every),
      clocks_(job.cluster().num_workers(), sync_),
      shards_(num_shards_),
      roles_(num_shards_, Role::kNone),
      targets_(num_shards_),
      lost_(num_shards_, false),
      cuts_(sync_,
            [this](absl::FunctionRef<void(uint64_t, CheckpointCuts::ShardLookup)> fn) {
              absl::ReaderMutexLock map_lock(&map_mu_);
              fn(map_version_.load(), [this](uint32_t shard) ABSL_SHARED_LOCKS_REQUIRED(map_mu_) {
                return Held(shard);
              });
            }),
      barrier_(StepBarrier::ForJob(job), [this](int64_t step) {
        barrier_.mu()->AssertHeld();  // StepBarrier::ApplyFn runs under it
        ApplyStep(step);
      }) {
  if (job.cluster().replication_factor() > 1) {
    Replicator::Options replication;
    replication.server_id = options.server_id;
    replication.sync = job.cluster().replication_mode() != config::Cluster::ASYNC;
    replication.on_unreachable = options.on_unreachable;
    replication.on_caught_up = options.on_caught_up;
    replicator_ =
        std::make_unique<Replicator>(std::move(replication), options.replication_transport);
  }
  keeper_->Start([this](absl::FunctionRef<void(Shard*)> fn) {
    absl::ReaderMutexLock map_lock(&map_mu_);
    for (uint32_t s = 0; s < num_shards_; ++s) {
      if (roles_[s] == Role::kPrimary && shards_[s] != nullptr) fn(shards_[s].get());
    }
  });
}

ShardedStore::~ShardedStore() { Shutdown(); }

void ShardedStore::Shutdown() {
  keeper_->Shutdown();
  barrier_.Shutdown();
  cuts_.Close();
  if (replicator_ != nullptr) replicator_->Shutdown();
}

void ShardedStore::ApplyStep(int64_t step) {
  cuts_.BeforeStep(step);
  {
    absl::ReaderMutexLock map_lock(&map_mu_);
    for (uint32_t s = 0; s < num_shards_; ++s) {
      // Copies take the step's result from their primary's records.
      if (roles_[s] == Role::kPrimary) shards_[s]->ApplyStep(step);
    }
  }
  cuts_.AfterStep(step);
}

CheckpointCuts::HeldShard ShardedStore::Held(uint32_t shard) const {
  if (shard >= num_shards_) return {};
  return {shards_[shard].get(), roles_[shard] == Role::kPrimary};
}

std::vector<size_t> ShardedStore::ExpectedRows() const {
  std::vector<size_t> expected(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    // The hint spread evenly, plus four standard deviations of a shard's share of random keys,
    // so that a shard a little fuller than average does not rehash its index at the end.
    const double mean = static_cast<double>(job_.tables(t).capacity_hint()) / num_shards_;
    expected[t] = mean == 0 ? 0 : static_cast<size_t>(mean + 4 * std::sqrt(mean) + 16);
  }
  // Never past a cap of the memory budget.
  const std::vector<size_t> caps = keeper_->CurrentMaxRows();
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (caps[t] != 0) expected[t] = std::min(expected[t], caps[t]);
  }
  return expected;
}

void ShardedStore::ApplyMemoryBudget() {
  size_t copies = 0;
  for (const std::unique_ptr<Shard>& shard : shards_) copies += shard != nullptr;
  keeper_->SetCopies(copies);
  const std::vector<size_t> caps = keeper_->CurrentMaxRows();
  for (const std::unique_ptr<Shard>& shard : shards_) {
    if (shard != nullptr) shard->SetMaxRows(caps);
  }
}

void ShardedStore::SetShardMap(const rpc::ShardMap& map, uint32_t server_id) {
  // New copies' snapshots are cut after the map lock is released, so that only the pushes of the
  // shard being cut wait, not every request. Shards are destroyed only here, under set_map_mu_,
  // so the shards stay alive.
  absl::MutexLock serial(&set_map_mu_);
  std::vector<std::function<void()>> snapshots;
  ApplyShardMap(map, server_id, nullptr, &snapshots);
  for (auto& snapshot : snapshots) snapshot();
}

std::vector<uint32_t> ShardedStore::NewPrimaries(const rpc::ShardMap& map,
                                                 uint32_t server_id) const {
  absl::ReaderMutexLock lock(&map_mu_);
  std::vector<uint32_t> out;
  if (map.version() <= map_version_.load()) return out;
  for (const rpc::ShardAssignment& a : map.shards()) {
    if (a.shard() < num_shards_ && !a.lost() && a.primary() == server_id && a.primary_term() == 0 &&
        shards_[a.shard()] == nullptr) {
      out.push_back(a.shard());
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Shard>> ShardedStore::NewRestoringShard(uint32_t shard,
                                                                       uint64_t rows) const {
  if (shard >= num_shards_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d is outside the job's %d shards", shard, num_shards_));
  }
  // Presized so that filling it never rehashes: exactly with one table; with several, each
  // table's index is sized for an even share and grows if its share is larger.
  std::vector<size_t> expected = ExpectedRows();
  expected.resize(tables_.size());
  for (size_t& e : expected) e += rows / std::max<size_t>(1, tables_.size());
  auto restoring = std::make_unique<Shard>(shard, shard_config_, expected, /*complete=*/false);
  restoring->SetMaxRows(keeper_->CurrentMaxRows());
  restoring->BeginRestore();
  return restoring;
}

absl::Status ShardedStore::SetShardMap(const rpc::ShardMap& map, uint32_t server_id,
                                       Restored restored) {
  absl::MutexLock serial(&set_map_mu_);
  std::vector<uint32_t> expected = NewPrimaries(map, server_id);
  if (map.version() <= map_version_.load()) return absl::OkStatus();
  // Until the map is installed, every request is answered UNAVAILABLE (no shard map yet), which
  // clients retry.
  absl::flat_hash_map<uint32_t, std::unique_ptr<Shard>> built;
  for (std::unique_ptr<Shard>& shard : restored.shards) {
    const uint32_t id = shard->id();
    if (std::find(expected.begin(), expected.end(), id) == expected.end() || built.contains(id)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "restoring shard %d: it is not a new primary of this server (%d) in map %d, or it is "
          "given twice",
          id, server_id, map.version()));
    }
    built.emplace(id, std::move(shard));
  }
  if (built.size() != expected.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("restoring map %d: %d of this server's %d new primaries are restored",
                        map.version(), built.size(), expected.size()));
  }
  barrier_.StartAt(restored.step);
  std::vector<std::function<void()>> snapshots;
  ApplyShardMap(map, server_id, &built, &snapshots);
  for (auto& snapshot : snapshots) snapshot();
  return absl::OkStatus();
}

void ShardedStore::ApplyShardMap(const rpc::ShardMap& map, uint32_t server_id,
                                 absl::flat_hash_map<uint32_t, std::unique_ptr<Shard>>* restored,
                                 std::vector<std::function<void()>>* snapshots) {
  // Sync mode: a promoted copy may have to apply the step its primary did not send.
  absl::ReaderMutexLock step_lock(barrier_.mu());
  absl::MutexLock lock(&map_mu_);
  if (map.version() <= map_version_.load()) return;
  absl::flat_hash_map<uint32_t, std::string> addresses;
  for (const rpc::ServerInfo& server : map.servers()) {
    addresses[server.server_id()] = server.address();
  }
  for (const rpc::ShardAssignment& a : map.shards()) {
    const uint32_t s = a.shard();
    if (s >= num_shards_) continue;
    Role role = Role::kNone;
    if (!a.lost()) {
      if (a.primary() == server_id) {
        role = Role::kPrimary;
      } else if (std::find(a.replicas().begin(), a.replicas().end(), server_id) !=
                 a.replicas().end()) {
        role = Role::kReplica;
      } else if (std::find(a.catching_up().begin(), a.catching_up().end(), server_id) !=
                 a.catching_up().end()) {
        role = Role::kCatchingUp;
      }
    }
    lost_[s] = a.lost();
    std::unique_ptr<Shard>& shard = shards_[s];
    const Role was = roles_[s];
    if (was == Role::kPrimary && role != Role::kPrimary && replicator_ != nullptr) {
      replicator_->RemoveShard(shard.get());
    }
    if (role == Role::kNone) {
      shard.reset();
    } else if (shard == nullptr && restored != nullptr && restored->contains(s)) {
      shard = std::move((*restored)[s]);
    } else if (shard == nullptr) {
      // Only the primary placed when the map was built starts the shard empty; a later primary
      // was a copy, and one that holds none must not serve an empty shard as if it were the data.
      const bool fresh = role == Role::kPrimary && a.primary_term() == 0;
      if (role == Role::kPrimary && !fresh) {
        std::fprintf(stderr,
                     "server %u: map %llu makes it primary of shard %u (term %llu) but it holds no "
                     "copy; the shard is unavailable here\n",
                     server_id, static_cast<unsigned long long>(map.version()), s,
                     static_cast<unsigned long long>(a.primary_term()));
      }
      shard = std::make_unique<Shard>(s, shard_config_, ExpectedRows(), fresh);
    } else if (role == Role::kPrimary && was != Role::kPrimary) {
      // Promoted: a copy that had not received its old primary's result of the step the
      // cluster applied applies the pending sums itself (the same sums, in the same order).
      const int64_t applied_step = barrier_.applied_step_locked();
      if (sync_ && shard->applied_step() < applied_step) shard->ApplyStep(applied_step);
    }
    roles_[s] = role;
    targets_[s].clear();
    if (role == Role::kPrimary && replicator_ != nullptr) {
      std::vector<ReplicaTarget> targets;
      for (const uint32_t r : a.replicas()) targets.push_back({r, addresses[r], true});
      for (const uint32_t r : a.catching_up()) targets.push_back({r, addresses[r], false});
      targets_[s] = targets;
      replicator_->SetTargets(shard.get(), std::move(targets), snapshots);
    }
  }
  ApplyMemoryBudget();
  map_version_.store(map.version(), std::memory_order_release);
}

absl::Status ShardedStore::ReplacePrimaries(uint64_t map_version, Restored restored) {
  absl::MutexLock serial(&set_map_mu_);
  // No cut may read a shard that goes (the service writes or restores one checkpoint at a time).
  cuts_.End();
  std::vector<std::function<void()>> snapshots;
  std::vector<std::unique_ptr<Shard>> replaced;  // destroyed after the locks are released
  {
    // No step is applied meanwhile.
    absl::ReaderMutexLock step_lock(barrier_.mu());
    absl::MutexLock lock(&map_mu_);
    if (map_version_.load() == 0) return absl::UnavailableError("no shard map yet");
    if (map_version != map_version_.load()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "restoring for map %d, but this server has map %d", map_version, map_version_.load()));
    }
    const int64_t applied_step = barrier_.applied_step_locked();
    absl::flat_hash_set<uint32_t> seen;
    for (const std::unique_ptr<Shard>& shard : restored.shards) {
      const uint32_t s = shard->id();
      if (s >= num_shards_ || roles_[s] != Role::kPrimary || !seen.insert(s).second) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "restoring shard %d: this server is not its primary in map %d, or it is given twice", s,
            map_version));
      }
      if (sync_ && shards_[s]->has_pending()) {
        return absl::FailedPreconditionError(
            absl::StrFormat("restoring shard %d: step %d is under way (restore a cluster at rest)",
                            s, applied_step + 1));
      }
      if (sync_ && shard->applied_step() > applied_step) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "restoring shard %d: the checkpoint holds step %d, this server applied only step %d", s,
            shard->applied_step(), applied_step));
      }
    }
    for (std::unique_ptr<Shard>& shard : restored.shards) {
      const uint32_t s = shard->id();
      if (replicator_ != nullptr) replicator_->RemoveShard(shards_[s].get());
      // The cluster's steps go on from where they are, whichever step the checkpoint held.
      if (sync_ && shard->applied_step() < applied_step) shard->ApplyStep(applied_step);
      replaced.push_back(std::move(shards_[s]));
      shards_[s] = std::move(shard);
      if (replicator_ != nullptr) {
        replicator_->SetTargets(shards_[s].get(), targets_[s], &snapshots);
      }
    }
    ApplyMemoryBudget();
  }
  for (auto& snapshot : snapshots) snapshot();
  return absl::OkStatus();
}

absl::StatusOr<size_t> ShardedStore::FindTable(const std::string& name) const {
  const auto it = table_index_.find(name);
  if (it == table_index_.end()) {
    return absl::NotFoundError(absl::StrFormat("unknown table \"%s\"", name));
  }
  return it->second;
}

absl::Status ShardedStore::CheckServed(uint32_t shard, bool read) const {
  if (shard >= num_shards_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d out of range (the job has %d shards)", shard, num_shards_));
  }
  if (lost_[shard]) {
    return absl::DataLossError(absl::StrFormat(
        "shard %d lost every copy (shard map version %d); its rows come back only from a "
        "checkpoint",
        shard, map_version_.load()));
  }
  const bool replica_read = read && read_from_replicas_ && roles_[shard] == Role::kReplica;
  if (roles_[shard] != Role::kPrimary && !replica_read) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shard %d is not served here (shard map version %d)", shard, map_version_.load()));
  }
  if (!shards_[shard]->complete()) {
    return absl::UnavailableError(
        absl::StrFormat("shard %d: this server holds no complete copy of it (shard map version %d)",
                        shard, map_version_.load()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Shard*> ShardedStore::ServedCopy(uint32_t shard) const {
  PS_RETURN_IF_ERROR(CheckServed(shard));
  return shards_[shard].get();
}

absl::Status ShardedStore::CheckKeys(const std::string& keys,
                                     const google::protobuf::RepeatedPtrField<rpc::ShardRun>& runs,
                                     const TableSpec& table, bool read,
                                     std::vector<uint64_t>* aligned, const uint64_t** key_data,
                                     size_t* num_keys) const {
  if (map_version_.load() == 0) {
    return absl::UnavailableError("no shard map yet: the server is starting");
  }
  if (keys.size() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("keys are %d bytes, not a multiple of 8", keys.size()));
  }
  const size_t n = keys.size() / sizeof(uint64_t);
  const uint64_t row_bytes = uint64_t{table.dim} * sizeof(float);
  if (n * row_bytes > max_message_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d keys of dim %d need %d bytes, above the message limit of %d bytes", n,
                        table.dim, n * row_bytes, max_message_bytes_));
  }
  uint64_t total = 0;
  for (const rpc::ShardRun& run : runs) total += run.count();
  if (total != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard runs cover %d keys, the request has %d", total, n));
  }
  const uint64_t* data = reinterpret_cast<const uint64_t*>(keys.data());
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned->resize(n);
    std::memcpy(aligned->data(), keys.data(), keys.size());
    data = aligned->data();
  }
  size_t at = 0;
  for (const rpc::ShardRun& run : runs) {
    PS_RETURN_IF_ERROR(CheckServed(run.shard(), read));
    for (size_t i = at; i < at + run.count(); ++i) {
      const uint32_t shard = ShardOf(table.name_hash, data[i], num_shards_);
      if (shard != run.shard()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("key %d of table \"%s\" belongs to shard %d, not %d", data[i],
                            table.name, shard, run.shard()));
      }
    }
    at += run.count();
  }
  *key_data = data;
  *num_keys = n;
  return absl::OkStatus();
}

absl::Status ShardedStore::Pull(const rpc::PullRequest& request, rpc::PullResponse* response) {
  return Pull(request, [response](size_t num_keys, uint32_t dim) {
    std::string* values = response->mutable_values();
    values->resize(num_keys * dim * sizeof(float));
    response->set_dim(dim);
    return reinterpret_cast<float*>(values->data());
  });
}

absl::Status ShardedStore::Pull(const rpc::PullRequest& request,
                                absl::FunctionRef<float*(size_t num_keys, uint32_t dim)> allocate) {
  PS_ASSIGN_OR_RETURN(const size_t t, FindTable(request.table()));
  const TableSpec& table = *tables_[t];
  // Sync mode: no step may be applied between the check of the pull's step and the read.
  absl::ReaderMutexLock step_lock(barrier_.mu());
  PS_RETURN_IF_ERROR(barrier_.CheckPullStepLocked(request.header().clock()));
  absl::ReaderMutexLock map_lock(&map_mu_);
  std::vector<uint64_t> aligned;
  const uint64_t* keys = nullptr;
  size_t n = 0;
  PS_RETURN_IF_ERROR(
      CheckKeys(request.keys(), request.runs(), table, /*read=*/true, &aligned, &keys, &n));
  clocks_.RecordPull(request.header().clock());
  float* out = allocate(n, table.dim);
  if (options_.empty_handler) {
    std::memset(out, 0, n * table.dim * sizeof(float));
    return absl::OkStatus();
  }
  stats_.traffic(t).RecordPull(absl::MakeConstSpan(keys, n));
  // The shards and roles are read here, under map_mu_, for the lookup threads.
  std::vector<Shard*> shard_of_run(request.runs_size());
  bool from_replica = false;
  for (int r = 0; r < request.runs_size(); ++r) {
    const uint32_t shard = request.runs(r).shard();
    shard_of_run[r] = shards_[shard].get();
    from_replica |= roles_[shard] != Role::kPrimary;
  }
  if (!from_replica) {
    ForEachRunGroup(request.runs(), n, [&](int first_run, int end_run, size_t at) {
      for (int r = first_run; r < end_run; ++r) {
        const uint32_t count = request.runs(r).count();
        shard_of_run[r]->Pull(t, absl::MakeConstSpan(keys + at, count), out + at * table.dim);
        at += count;
      }
    });
  } else {
    size_t at = 0;
    for (int r = 0; r < request.runs_size(); ++r) {
      const uint32_t count = request.runs(r).count();
      const absl::Span<const uint64_t> run_keys = absl::MakeConstSpan(keys + at, count);
      if (roles_[request.runs(r).shard()] == Role::kPrimary) {
        shard_of_run[r]->Pull(t, run_keys, out + at * table.dim);
      } else {
        // A replica holds only what its primary sent: it creates no row.
        shard_of_run[r]->Read(t, run_keys, out + at * table.dim);
      }
      at += count;
    }
    stats_.CountReplicaPull();
  }
  return absl::OkStatus();
}

absl::Status ShardedStore::Push(const rpc::PushRequest& request, uint32_t* duplicate_keys,
                                uint32_t* late_keys,
                                std::vector<std::pair<uint32_t, uint64_t>>* replicated_at) {
  *duplicate_keys = 0;
  if (late_keys != nullptr) *late_keys = 0;
  PS_ASSIGN_OR_RETURN(const size_t t, FindTable(request.table()));
  const TableSpec& table = *tables_[t];
  if (request.header().sequence() == 0) {
    return absl::InvalidArgumentError("push without a sequence number (it must be >= 1)");
  }
  const int64_t step = request.header().clock();
  if (sync_ && step < 0) {
    return absl::InvalidArgumentError("a push in sync mode needs its step (header.clock >= 0)");
  }
  if (step > 0) keeper_->NoteStep(step);
  // Sync mode: the step may not be applied while this push adds to it.
  absl::ReaderMutexLock step_lock(barrier_.mu());
  absl::ReaderMutexLock map_lock(&map_mu_);
  std::vector<uint64_t> aligned;
  const uint64_t* keys = nullptr;
  size_t n = 0;
  PS_RETURN_IF_ERROR(
      CheckKeys(request.keys(), request.runs(), table, /*read=*/false, &aligned, &keys, &n));
  const std::string& grad_bytes = request.grads();
  if (grad_bytes.size() != n * table.dim * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gradients are %d bytes, %d keys of dim %d need %d", grad_bytes.size(), n,
                        table.dim, n * table.dim * sizeof(float)));
  }
  std::vector<float> aligned_grads;
  const float* grads = reinterpret_cast<const float*>(grad_bytes.data());
  if (reinterpret_cast<uintptr_t>(grads) % alignof(float) != 0) {
    aligned_grads.resize(n * table.dim);
    std::memcpy(aligned_grads.data(), grad_bytes.data(), grad_bytes.size());
    grads = aligned_grads.data();
  }
  if (!AllFinite(grads, n * table.dim)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "push to table \"%s\" has a NaN or Inf gradient; nothing was applied", table.name));
  }
  if (options_.empty_handler) return absl::OkStatus();
  stats_.traffic(t).RecordPush(absl::MakeConstSpan(keys, n));
  PS_ASSIGN_OR_RETURN(const bool pending, barrier_.AdmitPushLocked(step));
  if (!pending) {
    // A straggler's push for a step applied without it: dropped, and counted.
    stats_.CountLatePush(n);
    if (late_keys != nullptr) *late_keys = static_cast<uint32_t>(n);
    return absl::OkStatus();
  }
  const uint32_t worker = request.header().worker_id();
  const uint64_t sequence = request.header().sequence();
  clocks_.RecordPush(worker, step);
  // Applied per shard, side by side for a large push; then the verdicts are read in order.
  struct RunResult {
    Shard* shard;  // read here, under map_mu_, for the lookup threads
    ApplyWindow::Verdict verdict;
    // The shard's newest sequence, which covers this push's record (or, for a retry, its first
    // try's).
    uint64_t applied_at;
  };
  const int num_runs = request.runs_size();
  std::vector<RunResult> results(num_runs);
  for (int r = 0; r < num_runs; ++r) results[r].shard = shards_[request.runs(r).shard()].get();
  ForEachRunGroup(request.runs(), n, [&](int first_run, int end_run, size_t at) {
    // The group's records leave together once its shards are done.
    Replicator::Cork cork(replicator_.get());
    for (int r = first_run; r < end_run; ++r) {
      const uint32_t count = request.runs(r).count();
      RunResult& result = results[r];
      result.verdict = result.shard->Push(
          t, worker, sequence, absl::MakeConstSpan(keys + at, count), grads + at * table.dim);
      result.applied_at = result.shard->applied_sequence();
      at += count;
    }
  });
  absl::Status status;
  for (int r = 0; r < num_runs; ++r) {
    const rpc::ShardRun& run = request.runs(r);
    switch (results[r].verdict) {
      case ApplyWindow::Verdict::kApply:
        break;
      case ApplyWindow::Verdict::kDuplicate:
        *duplicate_keys += run.count();
        break;
      case ApplyWindow::Verdict::kTooOld:
        status = absl::InvalidArgumentError(absl::StrFormat(
            "push sequence %d of worker %d is more than %d below the newest sequence shard %d "
            "admitted from that worker, so the shard cannot tell whether it applied it: its part "
            "was not applied (each shard decides on its own part); keep fewer than %d pushes "
            "of a worker outstanding",
            sequence, worker, ApplyWindow::kWindow, run.shard(), ApplyWindow::kWindow));
        break;
    }
    if (replicated_at != nullptr) replicated_at->emplace_back(run.shard(), results[r].applied_at);
  }
  return status;
}

absl::Status ShardedStore::PullDense(const rpc::PullDenseRequest& request,
                                     rpc::PullDenseResponse* response) {
  if (map_version_.load() == 0) {
    return absl::UnavailableError("no shard map yet: the server is starting");
  }
  absl::ReaderMutexLock map_lock(&map_mu_);
  return PullDenseChunks(
      request, num_shards_, max_message_bytes_,
      [this](uint32_t s) ABSL_SHARED_LOCKS_REQUIRED(map_mu_) { return ServedCopy(s); }, response);
}

absl::Status ShardedStore::PushDense(const rpc::PushDenseRequest& request,
                                     std::vector<std::pair<uint32_t, uint64_t>>* replicated_at) {
  if (map_version_.load() == 0) {
    return absl::UnavailableError("no shard map yet: the server is starting");
  }
  absl::ReaderMutexLock map_lock(&map_mu_);
  return PushDenseChunks(
      request, num_shards_,
      [this](uint32_t s) ABSL_SHARED_LOCKS_REQUIRED(map_mu_) { return ServedCopy(s); },
      replicated_at);
}

void ShardedStore::WhenReplicated(std::vector<std::pair<uint32_t, uint64_t>> sequences,
                                  std::function<void(absl::Status)> done) {
  if (replicator_ == nullptr || sequences.empty()) {
    done(absl::OkStatus());
    return;
  }
  replicator_->WhenReplicated(std::move(sequences), std::move(done));
}

void ShardedStore::ApplyReplicated(absl::Span<const ReplicatedRecord> records,
                                   rpc::ReplicateResponse* response) {
  absl::ReaderMutexLock map_lock(&map_mu_);
  ApplyReplicatedRecords(
      records,
      [this](uint32_t shard) ABSL_SHARED_LOCKS_REQUIRED(map_mu_) -> Shard* {
        if (shard >= num_shards_) return nullptr;
        const Role role = roles_[shard];
        return role == Role::kReplica || role == Role::kCatchingUp ? shards_[shard].get() : nullptr;
      },
      response);
}

std::vector<rpc::ShardProgress> ShardedStore::Progress() const {
  std::vector<rpc::ShardProgress> progress;
  absl::ReaderMutexLock map_lock(&map_mu_);
  for (uint32_t s = 0; s < num_shards_; ++s) {
    if (roles_[s] == Role::kNone) continue;
    rpc::ShardProgress p;
    p.set_shard(s);
    p.set_applied_sequence(shards_[s]->applied_sequence());
    p.set_applied_step(shards_[s]->applied_step());
    p.set_caught_up(roles_[s] == Role::kCatchingUp && shards_[s]->complete());
    if (roles_[s] == Role::kPrimary && replicator_ != nullptr) {
      for (rpc::ReplicaLag& lag : replicator_->Lags(s)) *p.add_replica_lags() = std::move(lag);
    }
    progress.push_back(std::move(p));
  }
  return progress;
}

absl::Status ShardedStore::FillStatus(const rpc::ServerStatusRequest& request,
                                      rpc::ServerStatus* status) {
  PS_RETURN_IF_ERROR(stats_.CheckRequest(request));
  for (rpc::ShardProgress& p : Progress()) *status->add_shards() = std::move(p);
  clocks_.FillStatus(status);
  status->set_applied_step(barrier_.applied_step());
  absl::ReaderMutexLock map_lock(&map_mu_);
  status->set_map_version(map_version_.load());
  std::vector<StoreStats::Copy> copies;
  for (uint32_t s = 0; s < num_shards_; ++s) {
    if (roles_[s] == Role::kNone) continue;
    copies.push_back({s,
                      roles_[s] == Role::kPrimary   ? rpc::ShardSize::PRIMARY
                      : roles_[s] == Role::kReplica ? rpc::ShardSize::REPLICA
                                                    : rpc::ShardSize::CATCHING_UP,
                      shards_[s].get()});
  }
  stats_.Fill(request, copies, status);
  const std::vector<size_t> caps = keeper_->CurrentMaxRows();
  for (int t = 0; t < status->tables_size() && t < static_cast<int>(caps.size()); ++t) {
    status->mutable_tables(t)->set_max_rows_per_copy(caps[t]);
  }
  status->set_memory_budget_bytes(keeper_->budget_bytes());
  status->set_memory_allowance_bytes(std::max<int64_t>(0, keeper_->allowance_bytes()));
  status->set_resident_bytes(keeper_->SampleResident());
  status->set_peak_resident_bytes(keeper_->peak_resident_bytes());
  if (tier_ != nullptr) {
    const RowTier::Stats tier = tier_->GetStats();
    for (int t = 0; t < status->tables_size() && t < static_cast<int>(tier.rows.size()); ++t) {
      rpc::TableStatus* table = status->mutable_tables(t);
      table->set_tier_rows(tier.rows[t]);
      table->set_tier_bytes(tier.bytes[t]);
      // Tiered rows past their TTL are evictions by age too.
      table->set_evicted_ttl(table->evicted_ttl() + tier.expired[t]);
    }
    status->set_tier_disk_bytes(static_cast<uint64_t>(tier.disk_bytes));
    status->set_tier_max_disk_bytes(static_cast<uint64_t>(tier.max_disk_bytes));
    status->set_tier_refused_rows(tier.refused_rows);
  }
  return absl::OkStatus();
}

absl::Status ShardedStore::BeginCheckpoint(int64_t step, const std::vector<uint32_t>& shards,
                                           uint64_t map_version, const CutRequest& request) {
  // Held exclusively: no step is applied and no push adds to the pending step while the
  // boundary is checked (and, when it is now, the shards' state cut).
  absl::MutexLock step_lock(barrier_.mu());
  return cuts_.Begin(step, barrier_.applied_step_locked(), shards, map_version, request);
}

}  // namespace server
}  // namespace ps

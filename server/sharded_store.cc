#include "server/sharded_store.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/finite.h"
#include "common/hash.h"
#include "common/job_config.h"
#include "common/status_macros.h"

namespace ps {
namespace server {
namespace {

// The floats of a dense chunk's bytes (whole floats: the caller checked). An empty chunk gives an
// empty vector, whose data() may be null: memcpy must not see it, even for 0 bytes.
std::vector<float> ChunkFloats(const std::string& bytes) {
  std::vector<float> floats(bytes.size() / sizeof(float));
  if (!floats.empty()) std::memcpy(floats.data(), bytes.data(), floats.size() * sizeof(float));
  return floats;
}

// Checkpoint cuts hold rows in records of about this size.
constexpr size_t kCutRecordBytes = 1 << 20;

std::vector<std::unique_ptr<TableTraffic>> NewTraffic(size_t tables, uint32_t sample_every) {
  HotKeys::Options hot_keys;
  hot_keys.sample_every = sample_every;
  std::vector<std::unique_ptr<TableTraffic>> traffic;
  for (size_t t = 0; t < tables; ++t) {
    hot_keys.seed = t + 1;
    traffic.push_back(std::make_unique<TableTraffic>(hot_keys));
  }
  return traffic;
}

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
  return std::unique_ptr<ShardedStore>(
      new ShardedStore(job, options, std::move(tables), std::move(dense_optimizer)));
}

ShardedStore::ShardedStore(const config::Job& job, const Options& options,
                           std::vector<std::unique_ptr<TableSpec>> tables,
                           std::unique_ptr<Optimizer> dense_optimizer)
    : job_(job),
      options_(options),
      num_shards_(job.cluster().num_shards()),
      max_message_bytes_(job.cluster().max_message_bytes()),
      tables_(std::move(tables)),
      table_index_(IndexTables(tables_)),
      dense_optimizer_(std::move(dense_optimizer)),
      lookup_pool_(std::max(0, options.lookup_threads)),
      shard_config_{&tables_, dense_optimizer_.get(), job.cluster().dense_chunk_floats(),
                    job.training().mode() == config::Training::SYNC},
      traffic_(NewTraffic(tables_.size(), options.hot_keys_sample_every)),
      sync_(job.training().mode() == config::Training::SYNC),
      read_from_replicas_(job.cluster().read_from_replicas()),
      // The nearest whole number of workers (0.67 of 3 is 2), at least 1.
      quorum_workers_(static_cast<size_t>(std::max<long long>(
          1, std::llround(job.training().sync_quorum() * job.cluster().num_workers())))),
      quorum_timeout_(job.training().sync_quorum() < 1.0f
                          ? absl::Milliseconds(job.training().sync_timeout_ms())
                          : absl::InfiniteDuration()),
      shards_(num_shards_),
      roles_(num_shards_, Role::kNone),
      lost_(num_shards_, false) {
  if (job.cluster().replication_factor() > 1) {
    Replicator::Options replication;
    replication.server_id = options.server_id;
    replication.sync = job.cluster().replication_mode() != config::Cluster::ASYNC;
    replication.on_unreachable = options.on_unreachable;
    replication.on_caught_up = options.on_caught_up;
    replicator_ =
        std::make_unique<Replicator>(std::move(replication), options.replication_transport);
  }
  if (sync_ && quorum_timeout_ != absl::InfiniteDuration()) {
    quorum_timer_ = std::thread([this] { QuorumTimerLoop(); });
  }
}

ShardedStore::~ShardedStore() { Shutdown(); }

void ShardedStore::Shutdown() {
  std::vector<std::pair<int64_t, std::function<void(absl::Status)>>> waits;
  {
    absl::MutexLock lock(&step_mu_);
    shutting_down_ = true;
    waits.swap(waits_);
  }
  for (auto& [step, fn] : waits) fn(absl::UnavailableError("the server is shutting down"));
  {
    absl::MutexLock lock(&cut_mu_);
    cuts_closed_ = true;
  }
  if (quorum_timer_.joinable()) quorum_timer_.join();
  if (replicator_ != nullptr) replicator_->Shutdown();
}

void ShardedStore::QuorumTimerLoop() {
  absl::MutexLock lock(&step_mu_);
  while (!shutting_down_) {
    // Idle (no worker has ended the pending step): wait for the first EndStep, which starts the
    // step's timeout; otherwise wait for that timeout.
    const bool idle = ended_.empty();
    const absl::Time deadline = idle ? absl::InfiniteFuture() : first_end_ + quorum_timeout_;
    auto wake = [this, idle]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_) {
      return shutting_down_ || (idle && !ended_.empty());
    };
    step_mu_.AwaitWithDeadline(absl::Condition(&wake), deadline);
    if (shutting_down_ || ended_.empty() || absl::Now() < first_end_ + quorum_timeout_) continue;
    std::vector<std::function<void(absl::Status)>> released = ApplyPendingStep();
    step_mu_.Unlock();
    for (auto& fn : released) fn(absl::OkStatus());
    step_mu_.Lock();
  }
}

std::vector<std::function<void(absl::Status)>> ShardedStore::ApplyPendingStep() {
  {
    absl::MutexLock cut_lock(&cut_mu_);
    // The step after a checkpoint's boundary changes the rows: cut those not cut yet first.
    if (checkpointing_ && boundary_reached_ && applied_step_ + 1 == cut_step_) {
      CutCheckpointRowsLocked();
    }
  }
  {
    absl::ReaderMutexLock map_lock(&map_mu_);
    for (uint32_t s = 0; s < num_shards_; ++s) {
      // Copies take the step's result from their primary's records.
      if (roles_[s] == Role::kPrimary) shards_[s]->ApplyStep(applied_step_ + 1);
    }
  }
  ++applied_step_;
  ended_.clear();
  {
    absl::MutexLock cut_lock(&cut_mu_);
    if (checkpointing_ && !boundary_reached_ && applied_step_ + 1 == cut_step_) {
      CutCheckpointStateLocked();
    }
  }
  std::vector<std::function<void(absl::Status)>> released;
  auto keep = waits_.begin();
  for (auto it = waits_.begin(); it != waits_.end(); ++it) {
    if (it->first <= applied_step_) {
      released.push_back(std::move(it->second));
    } else {
      *keep++ = std::move(*it);
    }
  }
  waits_.erase(keep, waits_.end());
  return released;
}

absl::StatusOr<int64_t> ShardedStore::EndStep(uint32_t worker_id, int64_t step) {
  if (!sync_) return int64_t{-1};
  if (worker_id == 0) {
    return absl::InvalidArgumentError(
        "EndStep in sync mode needs the worker's id (header.worker_id: the member_id from "
        "Coordinator.Register)");
  }
  std::vector<std::function<void(absl::Status)>> released;
  int64_t applied = 0;
  {
    absl::MutexLock lock(&step_mu_);
    if (step > applied_step_ + 1) {
      // This server has not seen the end of the step before yet (the worker's last pull did not
      // need it): retryable, it will.
      return absl::UnavailableError(absl::StrFormat(
          "step %d ended before step %d was applied here; retry", step, applied_step_ + 1));
    }
    if (step == applied_step_ + 1) {
      if (ended_.empty()) first_end_ = absl::Now();
      ended_.insert(worker_id);
      if (ended_.size() >= quorum_workers_) released = ApplyPendingStep();
    }
    applied = applied_step_;
  }
  for (auto& fn : released) fn(absl::OkStatus());
  return applied;
}

void ShardedStore::RecordPushStep(uint32_t worker_id, int64_t step) {
  if (step < 0) return;
  absl::MutexLock lock(&clocks_mu_);
  int64_t& newest = pushed_step_.try_emplace(worker_id, -1).first->second;
  newest = std::max(newest, step);
}

void ShardedStore::RecordPullStep(int64_t step) {
  if (step < 0) return;
  absl::MutexLock lock(&clocks_mu_);
  // The oldest step some worker has not pushed yet: a worker not heard from has pushed nothing.
  int64_t oldest_missing = pushed_step_.size() < job_.cluster().num_workers() ? 0 : INT64_MAX;
  for (const auto& [worker, newest] : pushed_step_) {
    oldest_missing = std::min(oldest_missing, newest + 1);
  }
  const int64_t staleness = sync_ ? 0 : std::max<int64_t>(0, step - oldest_missing);
  last_oldest_missing_ = sync_ ? step : std::min(oldest_missing, step);
  ++step_pulls_;
  staleness_sum_ += static_cast<double>(staleness);
  staleness_max_ = std::max(staleness_max_, staleness);
}

absl::Status ShardedStore::CheckPullStep(int64_t step) {
  if (!sync_ || step < 0) return absl::OkStatus();
  absl::ReaderMutexLock lock(&step_mu_);
  return CheckPullStepLocked(step);
}

absl::Status ShardedStore::CheckPullStepLocked(int64_t step) const {
  if (sync_ && step >= 0 && step <= applied_step_) {
    return absl::AbortedError(absl::StrFormat(
        "pull for step %d, which the cluster already applied without this worker (now at step "
        "%d); end the step and continue after it",
        step, applied_step_ + 1));
  }
  return absl::OkStatus();
}

void ShardedStore::RunWhenApplied(int64_t step, std::function<void(absl::Status)> fn) {
  absl::Status now = absl::OkStatus();
  {
    absl::MutexLock lock(&step_mu_);
    if (shutting_down_) {
      now = absl::UnavailableError("the server is shutting down");
    } else if (sync_ && step > applied_step_) {
      waits_.emplace_back(step, std::move(fn));
      return;
    }
  }
  fn(now);
}

std::vector<size_t> ShardedStore::ExpectedRows() const {
  std::vector<size_t> expected(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    // The hint spread evenly, plus four standard deviations of a shard's share of random keys,
    // so that a shard a little fuller than average does not rehash its index at the end.
    const double mean = static_cast<double>(job_.tables(t).capacity_hint()) / num_shards_;
    expected[t] = mean == 0 ? 0 : static_cast<size_t>(mean + 4 * std::sqrt(mean) + 16);
  }
  return expected;
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

absl::StatusOr<std::unique_ptr<Shard>> ShardedStore::RestoreShard(const ShardCut& cut) const {
  if (cut.shard >= num_shards_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d is outside the job's %d shards", cut.shard, num_shards_));
  }
  // Presized for the rows it is about to hold, so that filling it never rehashes.
  std::vector<size_t> rows = ExpectedRows();
  for (const rpc::ShardRecord& r : cut.records) {
    if (r.has_rows() && r.rows().table() < rows.size()) {
      rows[r.rows().table()] += r.rows().keys().size() / sizeof(uint64_t);
    }
  }
  auto shard = std::make_unique<Shard>(cut.shard, shard_config_, rows, /*complete=*/false);
  absl::Status status = shard->Restore(cut);
  if (!status.ok()) return status;
  return shard;
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
  if (sync_ && restored.step > 0) {
    absl::MutexLock step_lock(&step_mu_);
    applied_step_ = std::max(applied_step_, restored.step - 1);
  }
  std::vector<std::function<void()>> snapshots;
  ApplyShardMap(map, server_id, &built, &snapshots);
  for (auto& snapshot : snapshots) snapshot();
  return absl::OkStatus();
}

void ShardedStore::ApplyShardMap(const rpc::ShardMap& map, uint32_t server_id,
                                 absl::flat_hash_map<uint32_t, std::unique_ptr<Shard>>* restored,
                                 std::vector<std::function<void()>>* snapshots) {
  // Sync mode: a promoted copy may have to apply the step its primary did not send.
  absl::ReaderMutexLock step_lock(&step_mu_);
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
      if (sync_ && shard->applied_step() < applied_step_) shard->ApplyStep(applied_step_);
    }
    roles_[s] = role;
    if (role == Role::kPrimary && replicator_ != nullptr) {
      std::vector<ReplicaTarget> targets;
      for (const uint32_t r : a.replicas()) targets.push_back({r, addresses[r], true});
      for (const uint32_t r : a.catching_up()) targets.push_back({r, addresses[r], false});
      replicator_->SetTargets(shard.get(), std::move(targets), snapshots);
    }
  }
  map_version_.store(map.version(), std::memory_order_release);
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
  absl::ReaderMutexLock step_lock(&step_mu_);
  PS_RETURN_IF_ERROR(CheckPullStepLocked(request.header().clock()));
  absl::ReaderMutexLock map_lock(&map_mu_);
  std::vector<uint64_t> aligned;
  const uint64_t* keys = nullptr;
  size_t n = 0;
  PS_RETURN_IF_ERROR(
      CheckKeys(request.keys(), request.runs(), table, /*read=*/true, &aligned, &keys, &n));
  RecordPullStep(request.header().clock());
  float* out = allocate(n, table.dim);
  if (options_.empty_handler) {
    std::memset(out, 0, n * table.dim * sizeof(float));
    return absl::OkStatus();
  }
  traffic_[t]->RecordPull(absl::MakeConstSpan(keys, n));
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
    replica_pulls_.fetch_add(1, std::memory_order_relaxed);
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
  // Sync mode: the step may not be applied while this push adds to it.
  absl::ReaderMutexLock step_lock(&step_mu_);
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
  traffic_[t]->RecordPush(absl::MakeConstSpan(keys, n));
  if (sync_) {
    if (step <= applied_step_) {
      // A straggler's push for a step applied without it: dropped, and counted.
      late_pushes_.fetch_add(1, std::memory_order_relaxed);
      late_keys_.fetch_add(n, std::memory_order_relaxed);
      if (late_keys != nullptr) *late_keys = static_cast<uint32_t>(n);
      return absl::OkStatus();
    }
    if (step > applied_step_ + 1) {
      return absl::UnavailableError(absl::StrFormat(
          "push for step %d before step %d was applied here; retry", step, applied_step_ + 1));
    }
  }
  const uint32_t worker = request.header().worker_id();
  const uint64_t sequence = request.header().sequence();
  RecordPushStep(worker, step);
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

void ShardedStore::ForEachRunGroup(
    const google::protobuf::RepeatedPtrField<rpc::ShardRun>& runs, size_t num_keys,
    absl::FunctionRef<void(int first_run, int end_run, size_t first_key)> fn) {
  const size_t min_keys = std::max<uint32_t>(1, options_.parallel_min_keys);
  const size_t groups = std::min<size_t>({static_cast<size_t>(lookup_pool_.threads()) + 1,
                                          num_keys / min_keys, static_cast<size_t>(runs.size())});
  if (groups <= 1) {
    fn(0, runs.size(), 0);
    return;
  }
  // Cut after the run that brings a group to its share of the keys.
  struct Group {
    int first_run;
    int end_run;
    size_t first_key;
  };
  std::vector<Group> cut;
  const size_t share = (num_keys + groups - 1) / groups;
  size_t at = 0;
  Group group{0, 0, 0};
  for (int r = 0; r < runs.size(); ++r) {
    at += runs[r].count();
    if (at - group.first_key >= share || r + 1 == runs.size()) {
      group.end_run = r + 1;
      cut.push_back(group);
      group = Group{r + 1, 0, at};
    }
  }
  lookup_pool_.RunAll(cut.size(),
                      [&](size_t i) { fn(cut[i].first_run, cut[i].end_run, cut[i].first_key); });
}

absl::Status ShardedStore::PullDense(const rpc::PullDenseRequest& request,
                                     rpc::PullDenseResponse* response) {
  if (map_version_.load() == 0) {
    return absl::UnavailableError("no shard map yet: the server is starting");
  }
  absl::ReaderMutexLock map_lock(&map_mu_);
  const uint64_t name_hash = NameHash(request.name());
  for (const uint32_t chunk : request.chunks()) {
    const uint32_t s = ShardOf(name_hash, chunk, num_shards_);
    PS_RETURN_IF_ERROR(CheckServed(s));
  }
  uint64_t bytes = 0;
  for (const uint32_t chunk : request.chunks()) {
    std::vector<float> values;
    uint64_t total = 0;
    PS_RETURN_IF_ERROR(shards_[ShardOf(name_hash, chunk, num_shards_)]->ReadDense(
        request.name(), chunk, &values, &total));
    bytes += values.size() * sizeof(float);
    if (bytes > max_message_bytes_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "dense chunks requested exceed the message limit of %d bytes", max_message_bytes_));
    }
    rpc::DenseChunk* out = response->add_chunks();
    out->set_chunk(chunk);
    out->set_values(values.data(), values.size() * sizeof(float));
    response->set_total_floats(total);
  }
  return absl::OkStatus();
}

absl::Status ShardedStore::PushDense(const rpc::PushDenseRequest& request,
                                     std::vector<std::pair<uint32_t, uint64_t>>* replicated_at) {
  if (map_version_.load() == 0) {
    return absl::UnavailableError("no shard map yet: the server is starting");
  }
  if (request.name().empty()) return absl::InvalidArgumentError("dense tensor without a name");
  const bool gradient = request.kind() == rpc::PushDenseRequest::GRADIENT;
  const uint64_t sequence = request.header().sequence();
  if (gradient && sequence == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "gradient push to dense tensor \"%s\" without a sequence number (header.sequence >= 1; "
        "chunk c is admitted once as sequence + c)",
        request.name()));
  }
  absl::ReaderMutexLock map_lock(&map_mu_);
  const uint64_t name_hash = NameHash(request.name());
  // Every chunk is checked before any is written: a malformed request changes nothing.
  absl::flat_hash_set<uint32_t> chunks;
  for (const rpc::DenseChunk& chunk : request.chunks()) {
    const uint32_t s = ShardOf(name_hash, chunk.chunk(), num_shards_);
    PS_RETURN_IF_ERROR(CheckServed(s));
    if (!chunks.insert(chunk.chunk()).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chunk %d of \"%s\" is in the request twice", chunk.chunk(), request.name()));
    }
    if (gradient && sequence > UINT64_MAX - chunk.chunk()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sequence %d + chunk %d of \"%s\" is above 2^64 - 1", sequence,
                          chunk.chunk(), request.name()));
    }
    if (chunk.values().size() % sizeof(float) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chunk %d of \"%s\" is %d bytes, not whole floats", chunk.chunk(),
                          request.name(), chunk.values().size()));
    }
    const std::vector<float> check = ChunkFloats(chunk.values());
    if (!AllFinite(check.data(), check.size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chunk %d of \"%s\" has a NaN or Inf value; nothing was applied",
                          chunk.chunk(), request.name()));
    }
    PS_RETURN_IF_ERROR(shards_[s]->CheckDenseWrite(request.name(), chunk.chunk(), check.size(),
                                                   request.total_floats()));
  }
  for (const rpc::DenseChunk& chunk : request.chunks()) {
    Shard& shard = *shards_[ShardOf(name_hash, chunk.chunk(), num_shards_)];
    const std::vector<float> values = ChunkFloats(chunk.values());
    if (replicated_at != nullptr) {
      // Taken after the write below: the chunk's record is at or before the shard's newest.
      replicated_at->emplace_back(ShardOf(name_hash, chunk.chunk(), num_shards_), 0);
    }
    if (!gradient) {
      PS_RETURN_IF_ERROR(
          shard.AssignDense(request.name(), chunk.chunk(), values, request.total_floats()));
      if (replicated_at != nullptr) replicated_at->back().second = shard.applied_sequence();
      continue;
    }
    PS_ASSIGN_OR_RETURN(
        const ApplyWindow::Verdict verdict,
        shard.ApplyDenseGradient(request.name(), chunk.chunk(), values, request.total_floats(),
                                 request.header().worker_id(), sequence + chunk.chunk()));
    if (verdict == ApplyWindow::Verdict::kTooOld) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dense push sequence %d of worker %d (chunk %d: sequence %d) is more than %d below the "
          "newest sequence its shard admitted from that worker, so the shard cannot tell whether "
          "it applied it: that chunk and those after it were not applied",
          sequence, request.header().worker_id(), chunk.chunk(), sequence + chunk.chunk(),
          ApplyWindow::kWindow));
    }
    if (replicated_at != nullptr) replicated_at->back().second = shard.applied_sequence();
  }
  return absl::OkStatus();
}

void ShardedStore::WhenReplicated(std::vector<std::pair<uint32_t, uint64_t>> sequences,
                                  std::function<void(absl::Status)> done) {
  if (replicator_ == nullptr || sequences.empty()) {
    done(absl::OkStatus());
    return;
  }
  replicator_->WhenReplicated(std::move(sequences), std::move(done));
}

absl::Status ShardedStore::ApplyReplicated(const grpc::ByteBuffer& request,
                                           rpc::ReplicateResponse* response) {
  absl::ReaderMutexLock map_lock(&map_mu_);
  return ApplyReplicateRequest(
      request,
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
  const uint32_t hot_k = request.hot_keys_k() == 0 ? 10 : request.hot_keys_k();
  const TableTraffic* hot = nullptr;
  if (!request.hot_keys_table().empty()) {
    PS_ASSIGN_OR_RETURN(const size_t t, FindTable(request.hot_keys_table()));
    if (hot_k > HotKeys::kDefaultCapacity) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "hot_keys_k %d is above %d, the keys a server monitors per table and direction", hot_k,
          HotKeys::kDefaultCapacity));
    }
    hot = traffic_[t].get();
  }
  for (rpc::ShardProgress& p : Progress()) *status->add_shards() = std::move(p);
  {
    absl::MutexLock lock(&clocks_mu_);
    status->set_step_pulls(step_pulls_);
    status->set_mean_pull_staleness(step_pulls_ > 0 ? staleness_sum_ / step_pulls_ : 0.0);
    status->set_max_pull_staleness(staleness_max_);
    status->set_last_pull_oldest_missing_step(last_oldest_missing_);
  }
  {
    absl::MutexLock lock(&step_mu_);
    status->set_applied_step(applied_step_);
    status->set_late_pushes_dropped(late_pushes_.load());
    status->set_late_keys_dropped(late_keys_.load());
    status->set_replica_pulls(replica_pulls_.load());
  }
  {
    absl::ReaderMutexLock map_lock(&map_mu_);
    status->set_map_version(map_version_.load());
    const size_t num_tables = tables_.size();
    std::vector<uint64_t> rows(num_tables, 0), bytes(num_tables, 0);
    std::vector<uint64_t> primary_rows(num_tables, 0), primary_bytes(num_tables, 0);
    std::vector<uint64_t> shard_rows(num_tables), shard_bytes(num_tables);
    for (uint32_t s = 0; s < num_shards_; ++s) {
      if (roles_[s] == Role::kNone) continue;
      const bool primary = roles_[s] == Role::kPrimary;
      if (primary) {
        status->add_primary_shards(s);
      } else {
        status->add_replica_shards(s);
      }
      std::fill(shard_rows.begin(), shard_rows.end(), 0);
      std::fill(shard_bytes.begin(), shard_bytes.end(), 0);
      shards_[s]->AddSizes(&shard_rows, &shard_bytes);
      rpc::ShardSize* size = status->add_shard_sizes();
      size->set_shard(s);
      size->set_copy(primary                       ? rpc::ShardSize::PRIMARY
                     : roles_[s] == Role::kReplica ? rpc::ShardSize::REPLICA
                                                   : rpc::ShardSize::CATCHING_UP);
      for (size_t t = 0; t < num_tables; ++t) {
        rows[t] += shard_rows[t];
        bytes[t] += shard_bytes[t];
        if (primary) {
          primary_rows[t] += shard_rows[t];
          primary_bytes[t] += shard_bytes[t];
        }
        size->set_rows(size->rows() + shard_rows[t]);
        size->set_bytes(size->bytes() + shard_bytes[t]);
      }
    }
    for (size_t t = 0; t < num_tables; ++t) {
      rpc::TableStatus* ts = status->add_tables();
      ts->set_name(tables_[t]->name);
      ts->set_dim(tables_[t]->dim);
      ts->set_optimizer(job_.tables(t).optimizer().type());
      ts->set_rows(rows[t]);
      ts->set_bytes(bytes[t]);
      ts->set_primary_rows(primary_rows[t]);
      ts->set_primary_bytes(primary_bytes[t]);
      traffic_[t]->FillCounters(ts);
    }
  }
  if (hot != nullptr) {
    status->set_hot_keys_table(request.hot_keys_table());
    hot->FillHotKeys(hot_k, status);
  }
  return absl::OkStatus();
}

absl::Status ShardedStore::BeginCheckpoint(int64_t step, const std::vector<uint32_t>& shards,
                                           uint64_t map_version, const CutRequest& request) {
  if (sync_ ? step < 0 : step != -1) {
    return absl::InvalidArgumentError(
        sync_ ? absl::StrFormat("a sync checkpoint needs a step boundary >= 0, not %d", step)
              : absl::StrFormat("checkpoints outside sync mode are not cut at a step (got %d)",
                                step));
  }
  absl::MutexLock step_lock(&step_mu_);
  absl::MutexLock cut_lock(&cut_mu_);
  if (cuts_closed_) return absl::UnavailableError("the server is shutting down");
  if (checkpointing_) return absl::FailedPreconditionError("a checkpoint is under way");
  {
    absl::ReaderMutexLock map_lock(&map_mu_);
    if (map_version != map_version_.load()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("checkpoint for map version %d; this server has version %d", map_version,
                          map_version_.load()));
    }
    for (uint32_t s : shards) {
      if (s >= num_shards_ || roles_[s] != Role::kPrimary) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "shard %d is not a primary of this server in map version %d", s, map_version));
      }
    }
    if (sync_ && applied_step_ >= step) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "step boundary %d has passed: step %d is applied here", step, applied_step_));
    }
    if (sync_ && applied_step_ + 1 == step) {
      for (uint32_t s : shards) {
        if (shards_[s]->has_pending()) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "step boundary %d has passed: pushes of step %d have arrived here", step, step));
        }
      }
    }
  }
  checkpointing_ = true;
  cut_step_ = step;
  cut_request_ = request;
  boundary_reached_ = false;
  cuts_.clear();
  for (uint32_t s : shards) cuts_[s];
  checkpoint_shards_ = shards;
  if (sync_ && applied_step_ + 1 == step) CutCheckpointStateLocked();
  return absl::OkStatus();
}

void ShardedStore::CutCheckpointStateLocked() {
  absl::ReaderMutexLock map_lock(&map_mu_);
  for (auto& [s, c] : cuts_) {
    if (shards_[s] == nullptr || roles_[s] != Role::kPrimary) continue;  // TakeCheckpointCut says
    const absl::Time start = absl::Now();
    shards_[s]->CutState(&c.cut);
    c.stall += absl::Now() - start;
    c.state_cut = true;
  }
  boundary_reached_ = true;
}

void ShardedStore::CutCheckpointRowsLocked() {
  absl::ReaderMutexLock map_lock(&map_mu_);
  for (auto& [s, c] : cuts_) {
    if (c.rows_cut || !c.state_cut || shards_[s] == nullptr) continue;
    const absl::Time start = absl::Now();
    shards_[s]->CutRows(kCutRecordBytes, cut_request_, &c.cut);
    c.stall += absl::Now() - start;
    c.rows_cut = true;
  }
}

absl::StatusOr<ShardCut> ShardedStore::TakeCheckpointCut(uint32_t shard, absl::Time deadline,
                                                         absl::Duration* stall) {
  absl::MutexLock cut_lock(&cut_mu_);
  if (!checkpointing_ || cuts_.find(shard) == cuts_.end()) {
    return absl::NotFoundError(absl::StrFormat("shard %d is not in the checkpoint", shard));
  }
  if (sync_) {
    auto reached = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cut_mu_) {
      return boundary_reached_ || cuts_closed_ || !checkpointing_;
    };
    if (!cut_mu_.AwaitWithDeadline(absl::Condition(&reached), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrFormat("step boundary %d was not reached in time", cut_step_));
    }
    if (cuts_closed_) return absl::UnavailableError("the server is shutting down");
    if (!checkpointing_) return absl::AbortedError("the checkpoint was ended");
  }
  auto it = cuts_.find(shard);
  if (it == cuts_.end()) {
    return absl::NotFoundError(absl::StrFormat("shard %d's cut was taken", shard));
  }
  CheckpointCut c = std::move(it->second);
  cuts_.erase(it);
  {
    absl::ReaderMutexLock map_lock(&map_mu_);
    if (shards_[shard] == nullptr || roles_[shard] != Role::kPrimary || (sync_ && !c.state_cut)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("shard %d moved to another server during the checkpoint", shard));
    }
    const absl::Time start = absl::Now();
    if (!sync_) {
      c.cut = shards_[shard]->StartCut(kCutRecordBytes, cut_request_);
    } else if (!c.rows_cut) {
      // Between the boundary and the next step: the rows are still those of the boundary.
      shards_[shard]->CutRows(kCutRecordBytes, cut_request_, &c.cut);
    }
    c.stall += absl::Now() - start;
  }
  *stall = c.stall;
  return std::move(c.cut);
}

absl::Status ShardedStore::ReadCheckpointRows(ShardCut* cut, absl::Duration* max_hold) {
  *max_hold = absl::ZeroDuration();
  while (true) {
    absl::ReaderMutexLock map_lock(&map_mu_);
    const uint32_t s = cut->shard;
    if (s >= num_shards_ || shards_[s] == nullptr || roles_[s] != Role::kPrimary) {
      return absl::FailedPreconditionError(
          absl::StrFormat("shard %d moved to another server during the checkpoint", s));
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<bool> more = shards_[s]->ReadCutRows(kCutRecordBytes, cut);
    *max_hold = std::max(*max_hold, absl::Now() - start);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
  }
}

void ShardedStore::EndCheckpoint() {
  absl::MutexLock cut_lock(&cut_mu_);
  checkpointing_ = false;
  cuts_.clear();
  absl::ReaderMutexLock map_lock(&map_mu_);
  for (uint32_t s : checkpoint_shards_) {
    if (s < num_shards_ && shards_[s] != nullptr) shards_[s]->AbandonCutRows();
  }
  checkpoint_shards_.clear();
}

}  // namespace server
}  // namespace ps

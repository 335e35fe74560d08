#include "server/coordinator/checkpointer.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "proto/ps.grpc.pb.h"
#include "server/coordinator/restore_check.h"
#include "xxhash.h"

namespace ps {
namespace coordinator {
namespace {

// What must agree for a restore to be exact: the tables and the training mode.
uint64_t JobDigest(const config::Job& job) {
  std::string bytes;
  for (const config::Table& t : job.tables()) bytes += t.SerializeAsString();
  bytes += config::Training::Mode_Name(job.training().mode());
  return XXH3_64bits(bytes.data(), bytes.size());
}

// The shards of `map` grouped by their primary's server id. FAILED_PRECONDITION "shard N is lost;
// <advice>" when a shard has no copy left.
absl::StatusOr<std::map<uint32_t, std::vector<uint32_t>>> ShardsByPrimary(
    const rpc::ShardMap& map, absl::string_view advice) {
  std::map<uint32_t, std::vector<uint32_t>> by_server;
  for (const rpc::ShardAssignment& a : map.shards()) {
    if (a.lost()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("shard %d is lost; %s", a.shard(), advice));
    }
    by_server[a.primary()].push_back(a.shard());
  }
  return by_server;
}

// Every server's address by its id.
std::map<uint32_t, std::string> AddressesOf(const rpc::ShardMap& map) {
  std::map<uint32_t, std::string> address;
  for (const rpc::ServerInfo& s : map.servers()) address[s.server_id()] = s.address();
  return address;
}

// A call of `method` on the server at an address, within `timeout`; errors name the server.
template <typename Request, typename Response>
std::function<absl::StatusOr<Response>(const std::string&, const Request&)> GrpcCall(
    absl::Duration timeout, std::shared_ptr<grpc::ChannelCredentials> credentials,
    grpc::Status (rpc::ParameterServer::Stub::*method)(grpc::ClientContext*, const Request&,
                                                       Response*)) {
  return [timeout, credentials, method](const std::string& address,
                                        const Request& request) -> absl::StatusOr<Response> {
    grpc_util::ChannelOptions options = grpc_util::CheckpointChannelOptions();
    options.credentials = credentials;
    auto stub = rpc::ParameterServer::NewStub(grpc_util::NewChannel(address, options));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    Response response;
    absl::Status status = FromGrpcStatus(((*stub).*method)(&context, request, &response));
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("server ", address, ": ", status.message()));
    }
    return response;
  };
}

Checkpointer::WriteFn GrpcWrite(absl::Duration timeout,
                                std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return GrpcCall(timeout, std::move(credentials), &rpc::ParameterServer::Stub::WriteCheckpoint);
}

Checkpointer::RestoreFn GrpcRestore(absl::Duration timeout,
                                    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return GrpcCall(timeout, std::move(credentials), &rpc::ParameterServer::Stub::RestoreShards);
}

// The checkpoint the next one builds on, among the complete ones (oldest first), or 0 for a full
// one: the newest, while it is of this job and layout and its chain has fewer than
// full_every - 1 increments over its full checkpoint.
uint64_t ChooseBase(const std::vector<rpc::CheckpointManifest>& complete, uint32_t full_every,
                    uint64_t job_digest, uint32_t num_shards) {
  if (full_every <= 1 || complete.empty()) return 0;
  const rpc::CheckpointManifest& newest = complete.back();
  if (newest.job_digest() != job_digest || newest.shard_map().num_shards() != num_shards) return 0;
  std::map<uint64_t, const rpc::CheckpointManifest*> by_id;
  for (const rpc::CheckpointManifest& m : complete) by_id[m.id()] = &m;
  uint32_t increments = 0;
  for (const rpc::CheckpointManifest* m = &newest; m->base_id() != 0; ++increments) {
    auto base = by_id.find(m->base_id());
    if (base == by_id.end() || base->first >= m->id()) return 0;  // a broken chain: start anew
    m = base->second;
  }
  return increments + 1 < full_every ? newest.id() : 0;
}

// The complete checkpoints (oldest first) to remove: all but the newest `keep` and the ones those
// build on, directly or through their chains.
std::vector<uint64_t> Retired(const std::vector<rpc::CheckpointManifest>& complete, size_t keep) {
  std::map<uint64_t, uint64_t> base_of;
  for (const rpc::CheckpointManifest& m : complete) base_of[m.id()] = m.base_id();
  std::set<uint64_t> needed;
  for (size_t i = complete.size() > keep ? complete.size() - keep : 0; i < complete.size(); ++i) {
    for (uint64_t id = complete[i].id(); id != 0 && needed.insert(id).second;) {
      auto it = base_of.find(id);
      id = it == base_of.end() ? 0 : it->second;
    }
  }
  std::vector<uint64_t> retired;
  for (const rpc::CheckpointManifest& m : complete) {
    if (needed.count(m.id()) == 0) retired.push_back(m.id());
  }
  return retired;
}

}  // namespace

Checkpointer::Checkpointer(Coordinator* coordinator, WriteFn write, absl::Duration timeout,
                           std::shared_ptr<grpc::ChannelCredentials> credentials, RestoreFn restore)
    : coordinator_(coordinator),
      write_(write ? std::move(write) : GrpcWrite(timeout, credentials)),
      restore_(restore ? std::move(restore) : GrpcRestore(timeout, credentials)) {}

absl::StatusOr<rpc::RestoreCheckpointResponse> Checkpointer::Restore(const std::string& path,
                                                                     absl::Duration wait) {
  const absl::Time start = absl::Now();
  absl::StatusOr<RestorePoint> point = CheckRestorable(path, coordinator_->job());
  if (!point.ok()) return point.status();
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !taking_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&idle), wait)) {
      return absl::FailedPreconditionError("a checkpoint is being taken");
    }
    taking_ = true;
  }
  struct Done {
    Checkpointer* self;
    ~Done() {
      absl::MutexLock lock(&self->mu_);
      self->taking_ = false;
    }
  } done{this};
  const rpc::ShardMap map = coordinator_->Status().shard_map();
  if (map.version() == 0 || map.shards_size() == 0) {
    return absl::FailedPreconditionError("the shard map does not exist yet");
  }
  PS_ASSIGN_OR_RETURN(const auto by_server,
                      ShardsByPrimary(map, "restore the job from a checkpoint"));
  std::map<uint32_t, std::string> address = AddressesOf(map);
  std::vector<absl::StatusOr<rpc::RestoreShardsResponse>> results(by_server.size(),
                                                                  absl::UnknownError("not run"));
  {
    // Every server restores its primaries at once.
    std::vector<std::thread> threads;
    size_t i = 0;
    for (const auto& [server, shards] : by_server) {
      rpc::RestoreShardsRequest request;
      request.mutable_header()->set_map_version(map.version());
      request.set_path(point->folder);
      for (uint32_t s : shards) request.add_shards(s);
      threads.emplace_back([this, &results, i, request, addr = address[server]] {
        results[i] = restore_(addr, request);
      });
      ++i;
    }
    for (std::thread& t : threads) t.join();
  }
  for (const absl::StatusOr<rpc::RestoreShardsResponse>& result : results) {
    if (!result.ok()) return result.status();
  }
  rpc::RestoreCheckpointResponse response;
  response.set_step(point->manifest.step());
  response.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return response;
}

void Checkpointer::SetMetrics(metrics::Registry* registry) {
  constexpr char kHelp[] = "Checkpoints asked of the coordinator, by outcome.";
  taken_ = registry->GetCounter("ps_coordinator_checkpoints_total", kHelp, {{"outcome", "ok"}});
  failed_ =
      registry->GetCounter("ps_coordinator_checkpoints_total", kHelp, {{"outcome", "failed"}});
  durations_ = registry->GetHistogram(
      "ps_coordinator_checkpoint_duration_seconds",
      "Time to take a checkpoint, from its start to its manifest being written.",
      metrics::ExponentialBuckets(0.01, 2, 16));
}

absl::StatusOr<rpc::CheckpointResponse> Checkpointer::Take(
    int64_t step, std::vector<rpc::CheckpointWorkerState> workers) {
  const absl::Time start = absl::Now();
  absl::StatusOr<rpc::CheckpointResponse> taken = TakeUnmeasured(step, std::move(workers));
  if (taken_ != nullptr) {
    if (taken.ok()) {
      taken_->Increment();
      durations_->Observe(absl::ToDoubleSeconds(absl::Now() - start));
    } else {
      failed_->Increment();
    }
  }
  return taken;
}

absl::StatusOr<rpc::CheckpointResponse> Checkpointer::TakeUnmeasured(
    int64_t step, std::vector<rpc::CheckpointWorkerState> workers) {
  const config::Job& job = coordinator_->job();
  const std::string dir = job.cluster().checkpoint_dir();
  if (dir.empty()) {
    return absl::FailedPreconditionError("the job has no cluster.checkpoint_dir");
  }
  const bool sync = job.training().mode() == config::Training::SYNC;
  if (!sync && step != -1) {
    return absl::InvalidArgumentError(
        "only sync jobs are cut at a step; other modes take step -1 (each shard at one instant)");
  }
  {
    absl::MutexLock lock(&mu_);
    if (taking_) return absl::FailedPreconditionError("a checkpoint is being taken or restored");
    taking_ = true;
  }
  struct Done {
    Checkpointer* self;
    ~Done() {
      absl::MutexLock lock(&self->mu_);
      self->taking_ = false;
    }
  } done{this};

  const absl::Time start = absl::Now();
  const rpc::ClusterStatus cluster = coordinator_->Status();
  const rpc::ShardMap& map = cluster.shard_map();
  if (map.version() == 0 || map.shards_size() == 0) {
    return absl::FailedPreconditionError("the shard map does not exist yet");
  }
  if (sync && step < 0) {
    bool workers_alive = false;
    for (const rpc::MemberStatus& m : cluster.members()) {
      workers_alive |= m.role() == rpc::WORKER && m.alive();
    }
    step = std::max<int64_t>(0, cluster.clocks().max_clock() + (workers_alive ? 2 : 1));
  }
  // Sync training: the workers' state at the boundary, given or asked for.
  std::vector<int32_t> worker_ranks;  // ranks whose state is asked for
  if (sync && workers.empty()) {
    std::map<int32_t, bool> alive;  // rank -> alive, of registered workers
    for (const rpc::MemberStatus& m : cluster.members()) {
      if (m.role() == rpc::WORKER) alive[m.rank()] = alive[m.rank()] || m.alive();
    }
    if (!alive.empty()) {
      for (int32_t r = 0; r < static_cast<int32_t>(job.cluster().num_workers()); ++r) {
        if (!alive[r]) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "worker rank %d is not alive: its state at step %d cannot be checkpointed", r, step));
        }
        worker_ranks.push_back(r);
      }
    }
  }
  for (const rpc::CheckpointWorkerState& w : workers) {
    if (!sync || w.step() != step) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the state of worker %d is of step %d, the checkpoint's boundary is %d",
                          w.rank(), w.step(), step));
    }
  }
  PS_ASSIGN_OR_RETURN(const auto by_server,
                      ShardsByPrimary(map, "restore it before checkpointing"));
  std::map<uint32_t, std::string> address = AddressesOf(map);

  std::error_code ec;
  std::vector<std::string> partial;
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> existing = ListCheckpoints(dir, &partial);
  if (existing.status().code() == absl::StatusCode::kNotFound) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("creating ", dir, ": ", ec.message()));
    existing = std::vector<rpc::CheckpointManifest>();
  }
  if (!existing.ok()) return existing.status();
  // One above every numbered folder: a partial one (a checkpoint that crashed) is never reused.
  uint64_t id = existing->empty() ? 1 : existing->back().id() + 1;
  for (const std::string& p : partial) {
    uint64_t n = 0;
    if (absl::SimpleAtoi(std::filesystem::path(p).filename().string(), &n)) {
      id = std::max(id, n + 1);
    }
  }
  const uint64_t job_digest = JobDigest(job);
  const uint64_t base =
      ChooseBase(*existing, job.cluster().checkpoint_full_every(), job_digest, map.num_shards());
  const std::string folder = dir + "/" + CheckpointFolderName(id);
  std::filesystem::create_directory(folder, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", folder, ": ", ec.message()));
  auto fail = [&](absl::Status status) {
    std::filesystem::remove_all(folder, ec);
    return status;
  };

  // The workers see the notice in their next clock report and put their state. The key names
  // this attempt, not only the id: a failed checkpoint's folder is removed, so its id comes back
  // for the next one, and a worker answers each key once (a retry under the id a worker already
  // answered would otherwise wait for a state that never comes).
  const std::string worker_key =
      absl::StrFormat("ps/checkpoint/%d/%016x.%d/worker/", id, incarnation_, ++attempts_);
  struct Notice {
    Coordinator* coordinator;
    std::string key;
    ~Notice() {
      if (key.empty()) return;
      coordinator->SetCheckpointNotice(std::nullopt);
      coordinator->KvErasePrefix(key);
    }
  } notice{coordinator_, worker_ranks.empty() ? "" : worker_key};
  if (!worker_ranks.empty()) {
    rpc::CheckpointNotice n;
    n.set_id(id);
    n.set_step(step);
    n.set_key(worker_key);
    coordinator_->SetCheckpointNotice(n);
  }

  // Every server writes its primaries at once.
  std::vector<std::pair<uint32_t, absl::StatusOr<rpc::WriteCheckpointResponse>>> results;
  for (const auto& [server, shards] : by_server) {
    results.emplace_back(server, absl::UnknownError("not run"));
  }
  {
    std::vector<std::thread> threads;
    size_t i = 0;
    for (const auto& [server, shards] : by_server) {
      rpc::WriteCheckpointRequest request;
      request.mutable_header()->set_map_version(map.version());
      request.set_path(folder);
      request.set_step(sync ? step : -1);
      request.set_id(id);
      request.set_base_id(base);
      for (uint32_t s : shards) request.add_shards(s);
      threads.emplace_back([this, &results, i, request, addr = address[server]] {
        results[i].second = write_(addr, request);
      });
      ++i;
    }
    for (std::thread& t : threads) t.join();
  }

  rpc::CheckpointManifest manifest;
  manifest.set_format(kCheckpointFormat);
  manifest.set_id(id);
  manifest.set_job_name(job.name());
  manifest.set_job_digest(job_digest);
  manifest.set_mode(config::Training::Mode_Name(job.training().mode()));
  manifest.set_step(sync ? step : -1);
  manifest.set_next_member_id(coordinator_->next_member_id());
  *manifest.mutable_shard_map() = map;
  for (const config::Table& t : job.tables()) *manifest.add_tables() = t;
  std::vector<rpc::CheckpointShardFile> files(map.num_shards());
  std::vector<bool> have(map.num_shards(), false);
  double max_stall_ms = 0;
  uint64_t bytes = 0;
  bool incremental = false;
  for (auto& [server, result] : results) {
    if (!result.ok()) return fail(result.status());
    max_stall_ms = std::max(max_stall_ms, result->max_stall_ms());
    for (const rpc::CheckpointShardFile& f : result->files()) {
      if (f.shard() >= files.size() || have[f.shard()]) {
        return fail(absl::InternalError(absl::StrFormat(
            "server %d wrote shard %d, which it was not asked for", server, f.shard())));
      }
      if (f.incremental() && (base == 0 || f.base_id() != base)) {
        return fail(absl::InternalError(
            absl::StrFormat("server %d wrote shard %d incrementally on checkpoint %d, not on %d",
                            server, f.shard(), f.base_id(), base)));
      }
      incremental |= f.incremental();
      files[f.shard()] = f;
      have[f.shard()] = true;
      bytes += f.bytes();
    }
  }
  for (uint32_t s = 0; s < files.size(); ++s) {
    if (!have[s]) return fail(absl::InternalError(absl::StrFormat("shard %d was not written", s)));
    *manifest.add_shards() = files[s];
  }
  // Servers write in full the shards they did not cut for the base (after a failover, a restart,
  // a restore): a checkpoint without an incremental file is a full one, needing no base.
  manifest.set_base_id(incremental ? base : 0);
  if (!worker_ranks.empty()) {
    std::vector<std::string> keys;
    for (int32_t r : worker_ranks) keys.push_back(absl::StrCat(worker_key, r));
    absl::StatusOr<std::vector<std::string>> states =
        coordinator_->KvWait(keys, coordinator_->Now() + kWorkerWait);
    if (!states.ok()) {
      return fail(absl::Status(states.status().code(),
                               absl::StrCat("waiting for the workers' state at step ", step, ": ",
                                            states.status().message())));
    }
    for (size_t i = 0; i < states->size(); ++i) {
      const std::string& value = (*states)[i];
      rpc::CheckpointWorkerState& w = workers.emplace_back();
      if (absl::StartsWith(value, kWorkerStateError)) {
        return fail(absl::FailedPreconditionError(absl::StrCat(
            "worker ", worker_ranks[i], ": ", value.substr(strlen(kWorkerStateError)))));
      }
      if (!w.ParseFromString(value) || w.rank() != worker_ranks[i] || w.step() != step) {
        return fail(absl::InternalError(absl::StrFormat(
            "worker %d put a state that is not its state at step %d", worker_ranks[i], step)));
      }
    }
  }
  for (const rpc::CheckpointWorkerState& w : workers) {
    const std::string file = absl::StrFormat("worker-%05d.pb", w.rank());
    const std::string path = folder + "/" + file;
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      if (!w.SerializeToOstream(&out) || !out.flush()) {
        return fail(absl::InternalError(absl::StrCat("writing ", path, " failed")));
      }
    }
    absl::Status synced = SyncPath(path, /*folder=*/false);
    if (!synced.ok()) return fail(synced);
    absl::StatusOr<uint64_t> digest = FileXxh3(path);
    if (!digest.ok()) return fail(digest.status());
    rpc::CheckpointWorkerFile* entry = manifest.add_workers();
    entry->set_rank(w.rank());
    entry->set_file(file);
    entry->set_bytes(std::filesystem::file_size(path, ec));
    entry->set_xxh3(*digest);
  }
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  manifest.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  absl::Status written = WriteCheckpointManifest(folder, manifest);
  if (!written.ok()) return fail(written);

  // Keep the newest checkpoint_keep and the bases they build on; partial folders older than this
  // one are leftovers.
  partial.clear();
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> all = ListCheckpoints(dir, &partial);
  if (all.ok()) {
    for (uint64_t retired : Retired(*all, job.cluster().checkpoint_keep())) {
      std::filesystem::remove_all(dir + "/" + CheckpointFolderName(retired), ec);
    }
    for (const std::string& p : partial) {
      if (std::filesystem::path(p).filename().string() < CheckpointFolderName(id)) {
        std::filesystem::remove_all(p, ec);
      }
    }
  }

  rpc::CheckpointResponse response;
  response.set_step(manifest.step());
  response.set_path(folder);
  response.set_id(id);
  response.set_bytes(bytes);
  response.set_seconds(manifest.seconds());
  response.set_max_stall_ms(max_stall_ms);
  return response;
}

}  // namespace coordinator
}  // namespace ps

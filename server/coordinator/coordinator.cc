#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/job_config.h"
#include "common/status_macros.h"
#include "xxhash.h"

namespace ps {
namespace coordinator {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// Checks that `address` is host:port (host may be a bracketed IPv6 literal), port 1..65535.
absl::Status ValidateAddress(absl::string_view address) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" is not host:port: ", why));
  };
  absl::string_view host;
  absl::string_view port;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return bad("unclosed '['");
    host = address.substr(1, close - 1);
    const absl::string_view rest = address.substr(close + 1);
    if (!absl::StartsWith(rest, ":")) return bad("no port after ']'");
    port = rest.substr(1);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return bad("no port");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) return bad("IPv6 hosts need brackets");
  }
  if (host.empty()) return bad("empty host");
  for (const char c : host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) return bad("space in host");
  }
  int port_number = 0;
  if (port.empty() ||
      !std::all_of(port.begin(), port.end(), [](char c) { return absl::ascii_isdigit(c); }) ||
      !absl::SimpleAtoi(port, &port_number) || port_number < 1 || port_number > 65535) {
    return bad("port must be a number in 1..65535");
  }
  return absl::OkStatus();
}

absl::Status ValidateKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (key.size() > Coordinator::kMaxKeyBytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "key of %d bytes is over the limit of %d bytes", key.size(), Coordinator::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

// `"a", "b"`, at most 10 keys and then a count.
std::string QuoteKeys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 10;
  std::vector<std::string> shown;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    shown.push_back(absl::StrCat("\"", keys[i], "\""));
  }
  std::string out = absl::StrJoin(shown, ", ");
  if (keys.size() > kShown) absl::StrAppend(&out, " and ", keys.size() - kShown, " more");
  return out;
}

const char* RoleName(rpc::Role role) {
  switch (role) {
    case rpc::SERVER:
      return "server";
    case rpc::WORKER:
      return "worker";
    case rpc::CLIENT:
      return "client";
    default:
      return "unspecified";
  }
}

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

absl::Status Coordinator::CheckHeartbeatTiming(absl::Duration heartbeat_interval,
                                               absl::Duration dead_after) {
  if (heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("heartbeat_interval must be > 0, got ",
                                                   absl::FormatDuration(heartbeat_interval)));
  }
  if (dead_after <= heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat("dead_after (", absl::FormatDuration(dead_after),
                                                   ") must be greater than heartbeat_interval (",
                                                   absl::FormatDuration(heartbeat_interval), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options) {
  PS_RETURN_IF_ERROR(ValidateJob(options.job));
  PS_RETURN_IF_ERROR(CheckHeartbeatTiming(options.heartbeat_interval, options.dead_after));
  CoordinatorStore* const store = options.store;
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  if (store != nullptr) {
    PS_ASSIGN_OR_RETURN(std::optional<SavedCoordinator> saved, store->Load());
    absl::MutexLock lock(&c->mu_);
    if (saved.has_value()) {
      if (saved->state.job_digest() != c->job_digest_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "data_dir ", store->dir(),
            " holds the state of another job (or of another version of this job file); give "
            "this job a data_dir of its own"));
      }
      c->TakeUpLocked(*saved, c->clock_->Now());
    } else {
      c->PersistLocked();
    }
  }
  c->timer_ = std::thread([raw = c.get()] { raw->TimerLoop(); });
  return c;
}

Coordinator::Coordinator(CoordinatorOptions options)
    : job_(std::move(options.job)),
      num_servers_(job_.cluster().num_servers()),
      num_workers_(job_.cluster().num_workers()),
      heartbeat_interval_(options.heartbeat_interval),
      dead_after_(options.dead_after),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      restore_from_(options.restore_from),
      store_(options.store),
      job_digest_([this] {
        const std::string bytes = job_.SerializeAsString();
        return XXH3_64bits(bytes.data(), bytes.size());
      }()),
      start_step_(!restore_from_.empty() && job_.training().mode() == config::Training::SYNC &&
                          options.restore_manifest.step() > 0
                      ? options.restore_manifest.step()
                      : 0),
      on_job_failed_(std::move(options.on_job_failed)),
      first_member_id_(std::max<uint32_t>(1, options.restore_manifest.next_member_id())),
      next_member_id_(first_member_id_),
      workers_(num_workers_),
      progress_(num_servers_) {
  restore_unchecked_ = !restore_from_.empty() && !options.restore_files_checked;
  // Kept in the map before it is built too, so that a coordinator restarted from its store
  // before every server registered still restores the checkpoint (and checks it).
  map_.set_restore_from(restore_from_);
  map_.set_restore_unchecked(restore_unchecked_);
  // Every rank has finished the steps before the restored one.
  for (WorkerSlot& slot : workers_) slot.clock = start_step_ - 1;
}

void Coordinator::TakeUpLocked(const SavedCoordinator& saved, absl::Time now) {
  const rpc::CoordinatorState& st = saved.state;
  next_member_id_ = std::max(next_member_id_, st.next_member_id());
  if (st.first_member_id() != 0) first_member_id_ = st.first_member_id();
  for (const rpc::SavedMember& m : st.members()) {
    Member member;
    member.member_id = m.member_id();
    member.role = m.role();
    member.rank = m.rank();
    member.address = m.address();
    member.alive = true;
    member.last_seen = now;
    member.left = m.left();
    members_[m.member_id()] = member;
  }
  servers_.clear();
  for (int i = 0; i < st.server_addresses_size() && i < st.server_members_size(); ++i) {
    servers_.push_back(ServerSlot{st.server_addresses(i), st.server_members(i)});
  }
  for (int r = 0; r < st.worker_members_size() && r < static_cast<int>(workers_.size()); ++r) {
    workers_[r].member_id = st.worker_members(r);
  }
  for (const auto& [rank, clock] : saved.clocks) {
    if (rank >= 0 && rank < static_cast<int32_t>(workers_.size())) workers_[rank].clock = clock;
  }
  has_map_ = st.map_built();
  map_ = st.map();
  restore_unchecked_ = map_.restore_unchecked();
  failovers_ = st.failovers();
  for (const auto& [key, value] : saved.kv) kv_[key] = value;
  persisted_version_ = map_.version();
  persisted_next_id_ = next_member_id_;
  std::fprintf(stderr,
               "coordinator: carrying on job \"%s\" from %s: %zu members, shard map version %llu\n",
               job_.name().c_str(), store_->dir().c_str(), members_.size(),
               static_cast<unsigned long long>(map_.version()));
}

void Coordinator::StoreFailedLocked(const absl::Status& status) {
  if (status.ok() || store_failed_) return;
  store_failed_ = true;
  std::fprintf(stderr,
               "coordinator: cannot keep its state in its data_dir (a restart would lose the "
               "job): %s\n",
               status.ToString().c_str());
}

void Coordinator::PersistLocked(bool force) {
  if (store_ == nullptr) return;
  if (!force && persisted_next_id_ != 0 && persisted_version_ == map_.version() &&
      persisted_next_id_ == next_member_id_ && !members_changed_) {
    return;
  }
  rpc::CoordinatorState st;
  st.set_job_digest(job_digest_);
  st.set_first_member_id(first_member_id_);
  st.set_next_member_id(next_member_id_);
  for (const auto& [id, m] : members_) {
    rpc::SavedMember* saved = st.add_members();
    saved->set_member_id(id);
    saved->set_role(m.role);
    saved->set_rank(m.rank);
    saved->set_address(m.address);
    saved->set_left(m.left);
  }
  for (const ServerSlot& slot : servers_) {
    st.add_server_addresses(slot.address);
    st.add_server_members(slot.member_id);
  }
  for (const WorkerSlot& slot : workers_) st.add_worker_members(slot.member_id);
  st.set_map_built(has_map_);
  *st.mutable_map() = map_;
  st.set_failovers(failovers_);
  StoreFailedLocked(store_->SaveState(st));
  persisted_version_ = map_.version();
  persisted_next_id_ = next_member_id_;
  members_changed_ = false;
}

uint32_t Coordinator::next_member_id() const {
  absl::MutexLock lock(&mu_);
  return next_member_id_;
}

rpc::MemberIds Coordinator::MemberIds() const {
  absl::MutexLock lock(&mu_);
  rpc::MemberIds ids;
  ids.set_first_member_id(first_member_id_);
  ids.set_next_member_id(next_member_id_);
  return ids;
}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::Run(Completions* completions) {
  for (auto& f : *completions) f();
  completions->clear();
}

// --- Waiters ---

template <typename T>
WaitId Coordinator::AddWaiter(absl::Time deadline,
                              std::function<std::optional<absl::StatusOr<T>>(bool expired)> decide,
                              std::function<void(absl::StatusOr<T>)> done) {
  Waiter waiter;
  waiter.deadline = deadline;
  waiter.poll = [decide = std::move(decide),
                 done = std::move(done)](WaitEnd end) mutable -> std::function<void()> {
    std::optional<absl::StatusOr<T>> result;
    switch (end) {
      case WaitEnd::kCancelled:
        result = absl::CancelledError("wait cancelled");
        break;
      case WaitEnd::kShutdown:
        result = absl::UnavailableError("coordinator is shutting down");
        break;
      case WaitEnd::kCheck:
        result = decide(false);
        break;
      case WaitEnd::kDeadline:
        result = decide(true);
        if (!result.has_value()) {
          std::fprintf(stderr, "coordinator: a waiter gave no answer at its deadline\n");
          std::abort();
        }
        break;
    }
    if (!result.has_value()) return nullptr;
    return [done = std::move(done), result = std::move(*result)]() mutable {
      done(std::move(result));
    };
  };

  Completions out;
  WaitId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_wait_id_++;
    const absl::Time now = clock_->Now();
    SweepLocked(now, &out);
    std::function<void()> finished;
    if (shutting_down_) {
      finished = waiter.poll(WaitEnd::kShutdown);
    } else {
      finished = waiter.poll(WaitEnd::kCheck);
      if (!finished && deadline <= now) finished = waiter.poll(WaitEnd::kDeadline);
    }
    if (finished) {
      out.push_back(std::move(finished));
    } else {
      waiters_.emplace(id, std::move(waiter));
      if (deadline < timer_wake_at_) timer_cv_.Signal();
    }
  }
  Run(&out);
  return id;
}

void Coordinator::PollWaitersLocked(Completions* out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    std::function<void()> finished = it->second.poll(WaitEnd::kCheck);
    if (finished) {
      out->push_back(std::move(finished));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void Coordinator::CancelWait(WaitId id) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    out.push_back(it->second.poll(WaitEnd::kCancelled));
    waiters_.erase(it);
  }
  Run(&out);
}

size_t Coordinator::NumPendingWaits() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

void Coordinator::SweepLocked(absl::Time now, Completions* out) {
  bool server_changed = false;
  bool any_changed = false;
  std::vector<uint32_t> silent_workers;
  for (auto& [id, member] : members_) {
    if (member.alive && now - member.last_seen >= dead_after_) {
      member.alive = false;
      any_changed = true;
      if (member.role == rpc::WORKER && !member.left && !member.failed) {
        silent_workers.push_back(id);
      }
      if (member.role == rpc::SERVER) {
        server_changed = true;
        std::fprintf(stderr, "coordinator: server %d (%s) missed its heartbeats: failing it over\n",
                     member.rank, member.address.c_str());
        if (has_map_) FailOverLocked(static_cast<uint32_t>(member.rank));
      }
    }
  }
  if (server_changed) {
    if (has_map_) HealLocked();
    MapChangedLocked();
  }
  for (const uint32_t id : silent_workers) {
    const Member& worker = members_.at(id);
    const int64_t clock = workers_[worker.rank].clock;
    WorkerFailedLocked(
        worker,
        absl::StrFormat("its heartbeats stopped: not heard from for %s (killed, crashed or hung, "
                        "or its host is gone), after %d steps done",
                        absl::FormatDuration(
                            absl::Milliseconds(absl::ToInt64Milliseconds(now - worker.last_seen))),
                        clock + 1),
        /*silent=*/true, now, out);
  }
  if (any_changed) PollWaitersLocked(out);
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.deadline <= now) {
      out->push_back(it->second.poll(WaitEnd::kDeadline));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void Coordinator::Sweep() {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    SweepLocked(clock_->Now(), &out);
  }
  Run(&out);
}

void Coordinator::TimerLoop() {
  for (;;) {
    Completions out;
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_) return;
      const absl::Time now = clock_->Now();
      SweepLocked(now, &out);
      if (out.empty()) {
        absl::Time wake = now + heartbeat_interval_;
        for (const auto& [id, waiter] : waiters_) wake = std::min(wake, waiter.deadline);
        timer_wake_at_ = wake;
        // The clock may be a fake: waiting `wake - now` of real time and then looking at the clock
        // again is right for both.
        timer_cv_.WaitWithTimeout(&mu_, wake - now);
        timer_wake_at_ = absl::InfiniteFuture();
      }
    }
    Run(&out);
  }
}

void Coordinator::Shutdown() {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      shutting_down_ = true;
      for (auto& [id, waiter] : waiters_) out.push_back(waiter.poll(WaitEnd::kShutdown));
      waiters_.clear();
      timer_cv_.SignalAll();
    }
  }
  Run(&out);
  absl::MutexLock lock(&shutdown_mu_);
  if (timer_.joinable()) timer_.join();
}

// --- Membership ---

rpc::RegisterResponse Coordinator::ResponseFor(const Member& member) const {
  rpc::RegisterResponse response;
  response.set_member_id(member.member_id);
  response.set_rank(member.rank);
  *response.mutable_job() = job_;
  response.set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(heartbeat_interval_)));
  if (member.role != rpc::SERVER) response.set_start_step(start_step_);
  return response;
}

absl::StatusOr<rpc::RegisterResponse> Coordinator::Register(rpc::Role role,
                                                            absl::string_view address,
                                                            int32_t rank) {
  if (role != rpc::SERVER && role != rpc::WORKER && role != rpc::CLIENT) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: role must be SERVER, WORKER or CLIENT, got ", role));
  }
  if (role == rpc::SERVER && address.empty()) {
    return absl::InvalidArgumentError(
        "register: a server must give the host:port it serves on as its address");
  }
  if (!address.empty()) PS_RETURN_IF_ERROR(ValidateAddress(address));

  Completions out;
  absl::StatusOr<rpc::RegisterResponse> response;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    SweepLocked(now, &out);  // liveness decides which worker ranks are free
    response = RegisterLocked(role, address, rank, now);
    if (response.ok()) {
      PersistLocked();
      PollWaitersLocked(&out);
    }
  }
  Run(&out);
  return response;
}

absl::StatusOr<rpc::RegisterResponse> Coordinator::RegisterLocked(rpc::Role role,
                                                                  absl::string_view address,
                                                                  int32_t rank, absl::Time now) {
  Member member;
  member.role = role;
  member.address = std::string(address);
  member.last_seen = now;
  member.alive = true;

  if (role == rpc::SERVER) {
    int32_t server_id = -1;
    for (size_t i = 0; i < servers_.size(); ++i) {
      if (servers_[i].address == address) server_id = static_cast<int32_t>(i);
    }
    if (server_id < 0) {
      if (servers_.size() >= num_servers_) {
        std::vector<std::string> known;
        for (const ServerSlot& s : servers_) known.push_back(s.address);
        return absl::FailedPreconditionError(absl::StrCat(
            "register: the job expects ", num_servers_, " servers and all are registered (",
            absl::StrJoin(known, ", "), "); a new server at ", address,
            " cannot join (a restarted server must register with its old address)"));
      }
      server_id = static_cast<int32_t>(servers_.size());
      servers_.push_back(ServerSlot{std::string(address), 0});
    } else {
      // A restart replaces the old process, and what it held is gone with it.
      const auto old = members_.find(servers_[server_id].member_id);
      if (old != members_.end() && old->second.alive && has_map_) {
        std::fprintf(stderr, "coordinator: server %d (%s) restarted: failing it over\n", server_id,
                     std::string(address).c_str());
        FailOverLocked(static_cast<uint32_t>(server_id));
      }
      members_.erase(servers_[server_id].member_id);
      progress_[server_id].clear();
    }
    member.rank = server_id;
    member.member_id = next_member_id_++;
    servers_[server_id].member_id = member.member_id;
    members_.emplace(member.member_id, member);
    if (has_map_) {
      HealLocked();  // the (re)joined server can take copies
      MapChangedLocked();
    } else {
      MaybeBuildMapLocked();
    }
    return ResponseFor(member);
  }

  if (role == rpc::WORKER) {
    if (rank < -1 || rank >= static_cast<int64_t>(num_workers_)) {
      return absl::InvalidArgumentError(absl::StrCat("register: worker rank ", rank,
                                                     " is out of range [0, ", num_workers_,
                                                     ") (or -1 for the next free rank)"));
    }
    if (rank == -1) {
      for (size_t r = 0; r < workers_.size() && rank < 0; ++r) {
        if (workers_[r].member_id == 0) rank = static_cast<int32_t>(r);
      }
      for (size_t r = 0; r < workers_.size() && rank < 0; ++r) {
        if (!members_.at(workers_[r].member_id).alive) rank = static_cast<int32_t>(r);
      }
      if (rank < 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "register: all ", num_workers_, " worker ranks are held by alive workers"));
      }
    }
    WorkerSlot& slot = workers_[rank];
    if (slot.member_id != 0) {
      const Member& holder = members_.at(slot.member_id);
      if (holder.alive) {
        return absl::AlreadyExistsError(absl::StrCat(
            "register: worker rank ", rank, " is held by alive member ", holder.member_id));
      }
      members_.erase(slot.member_id);  // the rank's clock stays with the rank
    }
    member.rank = rank;
    member.member_id = next_member_id_++;
    slot.member_id = member.member_id;
    members_.emplace(member.member_id, member);
    return ResponseFor(member);
  }

  member.rank = -1;  // a client
  member.member_id = next_member_id_++;
  members_.emplace(member.member_id, member);
  return ResponseFor(member);
}

void Coordinator::TouchLocked(Member* member, absl::Time now) {
  member->last_seen = now;
  if (member->alive) return;
  member->alive = true;
  if (member->role == rpc::SERVER) {
    // Back after it was failed over: it holds nothing of the map any more, and may take copies.
    if (has_map_) HealLocked();
    MapChangedLocked();
  }
}

absl::StatusOr<uint64_t> Coordinator::Heartbeat(uint32_t member_id,
                                                const std::vector<rpc::ShardProgress>& shards,
                                                std::optional<rpc::JobFailure>* failure) {
  Completions out;
  uint64_t version = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = members_.find(member_id);
    if (it == members_.end()) {
      return absl::NotFoundError(
          absl::StrCat("heartbeat: unknown member_id ", member_id,
                       " (never registered, or replaced by a restart that registered again)"));
    }
    const bool was_alive = it->second.alive;
    TouchLocked(&it->second, clock_->Now());
    bool changed = false;
    if (it->second.role == rpc::SERVER && !shards.empty()) {
      const uint32_t server = static_cast<uint32_t>(it->second.rank);
      for (const rpc::ShardProgress& p : shards) {
        if (!has_map_ || p.shard() >= static_cast<uint32_t>(map_.shards_size())) continue;
        progress_[server][p.shard()] = p;
        rpc::ShardAssignment* a = map_.mutable_shards(p.shard());
        if (a->lost() || a->primary() != server) continue;
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
    }
    if (changed) MapChangedLocked();
    if (!was_alive || changed) PollWaitersLocked(&out);
    MaybeFailJobLocked(&out);  // this worker is heard from after a report
    if (failure_.has_value()) {
      it->second.told = true;
      if (failure != nullptr) *failure = failure_;
    }
    version = has_map_ ? map_.version() : 0;
  }
  Run(&out);
  return version;
}

// --- Workers' ends ---

absl::Status Coordinator::Leave(uint32_t member_id) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    auto it = members_.find(member_id);
    if (it == members_.end()) {
      return absl::NotFoundError(absl::StrCat("leave: unknown member_id ", member_id));
    }
    Member& member = it->second;
    // A worker that reported its failure closes its client too: it stays failed.
    if (member.role != rpc::WORKER || member.left || member.failed) return absl::OkStatus();
    member.left = true;
    members_changed_ = true;
    PersistLocked();
    std::fprintf(stderr, "coordinator: worker %d (member %u) left the job after %lld steps done\n",
                 member.rank, member_id, static_cast<long long>(workers_[member.rank].clock + 1));
    MaybeFailJobLocked(&out);  // a failure report may have waited for it
  }
  Run(&out);
  return absl::OkStatus();
}

absl::Status Coordinator::ReportWorkerFailure(uint32_t member_id, absl::string_view reason) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    auto it = members_.find(member_id);
    if (it == members_.end()) {
      return absl::NotFoundError(absl::StrCat("report failure: unknown member_id ", member_id));
    }
    Member& member = it->second;
    if (member.role != rpc::WORKER) {
      return absl::FailedPreconditionError(absl::StrCat("report failure: member ", member_id,
                                                        " is a ", RoleName(member.role),
                                                        "; only workers report their failure"));
    }
    if (member.failed) return absl::OkStatus();
    member.failed = true;
    member.told = true;  // it knows, and is about to exit
    const absl::Time now = clock_->Now();
    first_report_ = std::min(first_report_, now);
    WorkerFailedLocked(member, std::string(reason), /*silent=*/false, now, &out);
  }
  Run(&out);
  return absl::OkStatus();
}

void Coordinator::WorkerFailedLocked(const Member& worker, std::string reason, bool silent,
                                     absl::Time now, Completions* out) {
  std::fprintf(stderr, "coordinator: worker %d (member %u) %s: %s\n", worker.rank, worker.member_id,
               silent ? "is silent" : "failed", reason.c_str());
  if (failure_.has_value()) return;  // the job failed already
  WorkerFailure f;
  f.rank = worker.rank;
  f.member_id = worker.member_id;
  f.reason = std::move(reason);
  f.silent = silent;
  worker_failures_.push_back(std::move(f));
  MaybeFailJobLocked(out);
}

void Coordinator::MaybeFailJobLocked(Completions* out) {
  if (failure_.has_value() || worker_failures_.empty()) return;
  const bool silent = std::any_of(worker_failures_.begin(), worker_failures_.end(),
                                  [](const WorkerFailure& f) { return f.silent; });
  if (!silent) {
    // Only reports: wait for every other worker to show it is not the silent cause.
    for (const WorkerSlot& slot : workers_) {
      const auto it = members_.find(slot.member_id);
      if (slot.member_id == 0 || it == members_.end()) continue;
      const Member& m = it->second;
      if (m.left || m.failed || !m.alive || m.last_seen > first_report_) continue;
      return;
    }
  }
  std::stable_partition(worker_failures_.begin(), worker_failures_.end(),
                        [](const WorkerFailure& f) { return f.silent; });
  rpc::JobFailure failure;
  failure.set_rank(worker_failures_[0].rank);
  failure.set_member_id(worker_failures_[0].member_id);
  failure.set_reason(worker_failures_[0].reason);
  for (const WorkerFailure& f : worker_failures_) {
    failure.add_failures(
        absl::StrFormat("worker %d (member %u): %s", f.rank, f.member_id, f.reason));
  }
  FailJobLocked(std::move(failure), out);
}

void Coordinator::FailJobLocked(rpc::JobFailure failure, Completions* out) {
  std::fprintf(stderr, "coordinator: the job failed: %s\n",
               absl::StrJoin(failure.failures(), "; then ").c_str());
  failure_ = failure;
  if (on_job_failed_) {
    out->push_back([callback = on_job_failed_, failure] { callback(failure); });
  }
}

std::optional<rpc::JobFailure> Coordinator::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

// --- Restore ---

std::string Coordinator::UncheckedRestore() const {
  absl::MutexLock lock(&mu_);
  if (!restore_unchecked_) return "";
  return map_.restore_from();
}

void Coordinator::RestoreFilesChecked() {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (!restore_unchecked_) return;
    restore_unchecked_ = false;
    map_.set_restore_unchecked(false);
    if (has_map_) {
      MapChangedLocked();
      PollWaitersLocked(&out);
    } else {
      PersistLocked(/*force=*/true);
    }
  }
  Run(&out);
}

void Coordinator::RefuseRestore(const absl::Status& why) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.has_value()) return;
    rpc::JobFailure failure;
    failure.set_rank(-1);
    failure.set_reason(absl::StrCat("the checkpoint cannot be restored: ", why.ToString()));
    failure.add_failures(failure.reason());
    FailJobLocked(std::move(failure), &out);
    PollWaitersLocked(&out);
  }
  Run(&out);
}

bool Coordinator::AllToldLocked() const {
  if (!failure_.has_value()) return false;
  for (const auto& [id, m] : members_) {
    if (m.alive && !m.left && !m.failed && !m.told) return false;
  }
  return true;
}

bool Coordinator::AwaitFailureTold(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto told = [this] {
    mu_.AssertHeld();
    return AllToldLocked();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&told), timeout);
}

std::optional<std::string> Coordinator::AddressToCheck(uint32_t server_id) {
  absl::MutexLock lock(&mu_);
  if (server_id >= servers_.size() || !ServerAliveLocked(server_id)) return std::nullopt;
  return servers_[server_id].address;
}

uint64_t Coordinator::DeclareDead(uint32_t server_id) {
  Completions out;
  uint64_t version = 0;
  {
    absl::MutexLock lock(&mu_);
    if (server_id < servers_.size() && ServerAliveLocked(server_id)) {
      std::fprintf(stderr, "coordinator: server %d (%s) is unreachable: failing it over\n",
                   server_id, servers_[server_id].address.c_str());
      // Marked as not heard from for dead_after: the sweep fails it over, as a missed heartbeat
      // would.
      members_.at(servers_[server_id].member_id).last_seen = clock_->Now() - dead_after_;
      SweepLocked(clock_->Now(), &out);
    }
    version = has_map_ ? map_.version() : 0;
  }
  Run(&out);
  return version;
}

bool Coordinator::ServerAliveLocked(uint32_t server_id) const {
  if (server_id >= servers_.size()) return false;
  const auto it = members_.find(servers_[server_id].member_id);
  return it != members_.end() && it->second.alive;
}

std::string Coordinator::HostLocked(uint32_t server_id) const {
  const std::string& address = servers_[server_id].address;
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

bool Coordinator::FailOverLocked(uint32_t server_id) {
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
      if (!ServerAliveLocked(r)) continue;
      const auto p = progress_[r].find(a.shard());
      const uint64_t sequence = p == progress_[r].end() ? 0 : p->second.applied_sequence();
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

bool Coordinator::HealLocked() {
  const uint32_t wanted = job_.cluster().replication_factor();
  std::vector<int> load(servers_.size(), 0);
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
    while (holders.size() < wanted) {
      int best = -1;
      bool best_new_host = false;
      for (uint32_t s = 0; s < servers_.size(); ++s) {
        if (!ServerAliveLocked(s) ||
            std::find(holders.begin(), holders.end(), s) != holders.end()) {
          continue;
        }
        const std::string host = HostLocked(s);
        const bool new_host = std::none_of(
            holders.begin(), holders.end(),
            [&](uint32_t h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return HostLocked(h) == host; });
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

// --- Shard map ---

void Coordinator::MaybeBuildMapLocked() {
  if (has_map_ || servers_.size() < num_servers_) return;
  const config::Cluster& cluster = job_.cluster();
  const uint32_t num_shards = cluster.num_shards();
  const uint32_t replicas = cluster.replication_factor();
  has_map_ = true;
  const std::string restore_from = map_.restore_from();  // from the start, or the store
  map_.Clear();
  map_.set_version(0);  // MapChangedLocked makes it 1
  map_.set_num_shards(num_shards);
  map_.set_restore_from(restore_from);
  map_.set_restore_unchecked(restore_unchecked_);
  for (uint32_t shard = 0; shard < num_shards; ++shard) {
    rpc::ShardAssignment* a = map_.add_shards();
    a->set_shard(shard);
    const uint32_t primary = shard % num_servers_;
    a->set_primary(primary);
    // Replicas on the next servers round the ring, first those on hosts without a copy yet.
    std::vector<uint32_t> hosts_used = {primary};
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t r = 1; r < num_servers_ && a->replicas_size() + 1u < replicas; ++r) {
        const uint32_t s = (shard + r) % num_servers_;
        if (std::find(a->replicas().begin(), a->replicas().end(), s) != a->replicas().end()) {
          continue;
        }
        const bool new_host = std::none_of(hosts_used.begin(), hosts_used.end(),
                                           [&](uint32_t h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                             return HostLocked(h) == HostLocked(s);
                                           });
        if (pass == 0 && !new_host) continue;
        a->add_replicas(s);
        hosts_used.push_back(s);
      }
    }
  }
  MapChangedLocked();
}

void Coordinator::MapChangedLocked() {
  if (!has_map_) return;
  map_.set_version(map_.version() + 1);
  map_.clear_servers();
  for (size_t id = 0; id < servers_.size(); ++id) {
    rpc::ServerInfo* info = map_.add_servers();
    info->set_server_id(static_cast<uint32_t>(id));
    info->set_address(servers_[id].address);
    info->set_alive(members_.at(servers_[id].member_id).alive);
    info->set_host(HostLocked(static_cast<uint32_t>(id)));
  }
  PersistLocked();
}

std::string Coordinator::ShardMapNotReadyLocked(uint64_t min_version) const {
  if (!has_map_) {
    return absl::StrCat("shard map not ready: ", servers_.size(), " of ", num_servers_,
                        " servers registered");
  }
  return absl::StrCat("shard map not ready: version ", map_.version(),
                      " is older than the requested ", min_version);
}

WaitId Coordinator::AsyncGetShardMap(uint64_t min_version, absl::Time deadline,
                                     std::function<void(absl::StatusOr<rpc::ShardMap>)> done) {
  return AddWaiter<rpc::ShardMap>(
      deadline,
      [this, min_version](bool expired) -> std::optional<absl::StatusOr<rpc::ShardMap>> {
        mu_.AssertHeld();
        if (has_map_ && map_.version() >= min_version) return map_;
        if (!expired) return std::nullopt;
        return absl::UnavailableError(ShardMapNotReadyLocked(min_version));
      },
      std::move(done));
}

namespace {

// Blocks on an Async* call of the coordinator.
template <typename T, typename Start>
absl::StatusOr<T> Await(Start start) {
  absl::Notification notification;
  std::optional<absl::StatusOr<T>> result;
  start([&](absl::StatusOr<T> r) {
    result = std::move(r);
    notification.Notify();
  });
  notification.WaitForNotification();
  return std::move(*result);
}

}  // namespace

absl::StatusOr<rpc::ShardMap> Coordinator::GetShardMap(uint64_t min_version, absl::Time deadline) {
  return Await<rpc::ShardMap>([&](auto done) { AsyncGetShardMap(min_version, deadline, done); });
}

// --- Clocks ---

rpc::ClockState Coordinator::ClocksLocked() const {
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  int64_t max_clock = -1;
  bool all_registered = true;
  for (const WorkerSlot& slot : workers_) {
    if (slot.member_id == 0) all_registered = false;
    min_clock = std::min(min_clock, slot.clock);
    max_clock = std::max(max_clock, slot.clock);
  }
  rpc::ClockState state;
  state.set_min_clock(all_registered ? min_clock : -1);
  state.set_max_clock(max_clock);
  if (checkpoint_notice_.has_value()) *state.mutable_checkpoint() = *checkpoint_notice_;
  return state;
}

rpc::ClockState Coordinator::Clocks() const {
  absl::MutexLock lock(&mu_);
  return ClocksLocked();
}

absl::StatusOr<rpc::ClockState> Coordinator::ReportClock(uint32_t member_id, int64_t clock) {
  if (clock < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("report clock: clock must be >= 0, got ", clock));
  }
  Completions out;
  rpc::ClockState state;
  {
    absl::MutexLock lock(&mu_);
    auto it = members_.find(member_id);
    if (it == members_.end()) {
      return absl::NotFoundError(absl::StrCat("report clock: unknown member_id ", member_id));
    }
    Member& member = it->second;
    if (member.role != rpc::WORKER) {
      return absl::FailedPreconditionError(absl::StrCat("report clock: member ", member_id,
                                                        " is a ", RoleName(member.role),
                                                        "; only workers report clocks"));
    }
    TouchLocked(&member, clock_->Now());
    WorkerSlot& slot = workers_[member.rank];
    if (clock > slot.clock) {
      slot.clock = clock;
      if (store_ != nullptr) StoreFailedLocked(store_->SaveClock(member.rank, clock));
    }
    PollWaitersLocked(&out);
    state = ClocksLocked();
  }
  Run(&out);
  return state;
}

WaitId Coordinator::AsyncWaitClock(int64_t clock, absl::Time deadline,
                                   std::function<void(absl::StatusOr<rpc::ClockState>)> done) {
  return AddWaiter<rpc::ClockState>(
      deadline,
      [this, clock](bool expired) -> std::optional<absl::StatusOr<rpc::ClockState>> {
        mu_.AssertHeld();
        rpc::ClockState state = ClocksLocked();
        if (state.min_clock() >= clock) return state;
        if (!expired) return std::nullopt;
        size_t registered = 0;
        for (const WorkerSlot& slot : workers_) registered += slot.member_id != 0;
        return absl::DeadlineExceededError(absl::StrCat(
            "wait clock: clock ", clock, " not reached by every worker by the deadline (min_clock ",
            state.min_clock(), ", ", registered, " of ", num_workers_, " workers registered)"));
      },
      std::move(done));
}

absl::StatusOr<rpc::ClockState> Coordinator::WaitClock(int64_t clock, absl::Time deadline) {
  return Await<rpc::ClockState>([&](auto done) { AsyncWaitClock(clock, deadline, done); });
}

// --- Rendezvous store ---

absl::Status Coordinator::KvSet(std::string key, std::string value) {
  PS_RETURN_IF_ERROR(ValidateKey(key));
  if (value.size() > kMaxValueBytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("value of %d bytes for key \"%s\" is over the limit of %d bytes",
                        value.size(), key, kMaxValueBytes));
  }
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (store_ != nullptr) StoreFailedLocked(store_->SaveKv(key, value));
    kv_[std::move(key)] = std::move(value);
    PollWaitersLocked(&out);
  }
  Run(&out);
  return absl::OkStatus();
}

void Coordinator::KvErasePrefix(absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  absl::erase_if(kv_,
                 [prefix](const auto& entry) { return absl::StartsWith(entry.first, prefix); });
  if (store_ != nullptr) StoreFailedLocked(store_->EraseKvPrefix(prefix));
}

void Coordinator::SetCheckpointNotice(std::optional<rpc::CheckpointNotice> notice) {
  absl::MutexLock lock(&mu_);
  checkpoint_notice_ = std::move(notice);
}

absl::StatusOr<std::vector<std::string>> Coordinator::KvGet(
    const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) PS_RETURN_IF_ERROR(ValidateKey(key));
  std::vector<std::string> values;
  values.reserve(keys.size());
  absl::MutexLock lock(&mu_);
  for (const std::string& key : keys) {
    auto it = kv_.find(key);
    if (it == kv_.end()) return absl::NotFoundError(absl::StrCat("key \"", key, "\" is not set"));
    values.push_back(it->second);
  }
  return values;
}

WaitId Coordinator::AsyncKvWait(
    std::vector<std::string> keys, absl::Time deadline,
    std::function<void(absl::StatusOr<std::vector<std::string>>)> done) {
  for (const std::string& key : keys) {
    absl::Status valid = ValidateKey(key);
    if (!valid.ok()) {
      done(std::move(valid));
      return 0;  // never a pending wait's id
    }
  }
  return AddWaiter<std::vector<std::string>>(
      deadline,
      [this, keys = std::move(keys)](
          bool expired) -> std::optional<absl::StatusOr<std::vector<std::string>>> {
        mu_.AssertHeld();
        std::vector<std::string> missing;
        for (const std::string& key : keys) {
          if (!kv_.contains(key)) missing.push_back(key);
        }
        if (missing.empty()) {
          std::vector<std::string> values;
          values.reserve(keys.size());
          for (const std::string& key : keys) values.push_back(kv_.at(key));
          return values;
        }
        if (!expired) return std::nullopt;
        return absl::DeadlineExceededError(
            absl::StrCat("kv wait: keys not set by the deadline: ", QuoteKeys(missing)));
      },
      std::move(done));
}

absl::StatusOr<std::vector<std::string>> Coordinator::KvWait(std::vector<std::string> keys,
                                                             absl::Time deadline) {
  return Await<std::vector<std::string>>(
      [&](auto done) { AsyncKvWait(std::move(keys), deadline, done); });
}

// --- Operations ---

rpc::ClusterStatus Coordinator::Status() {
  Completions out;
  rpc::ClusterStatus status;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    SweepLocked(now, &out);
    for (const auto& [id, member] : members_) {
      rpc::MemberStatus* m = status.add_members();
      m->set_member_id(member.member_id);
      m->set_role(member.role);
      m->set_rank(member.rank);
      m->set_address(member.address);
      m->set_alive(member.alive);
      m->set_last_seen_ms(static_cast<uint64_t>(
          std::max<int64_t>(0, absl::ToInt64Milliseconds(now - member.last_seen))));
      if (member.role == rpc::WORKER) {
        m->set_left(member.left);
        m->set_failed(member.failed);
        m->set_clock(workers_[member.rank].clock);
      }
    }
    if (failure_.has_value()) *status.mutable_failure() = *failure_;
    if (has_map_) {
      *status.mutable_shard_map() = map_;
      for (const rpc::ShardAssignment& a : map_.shards()) {
        rpc::ShardStatus* shard = status.add_shards();
        shard->set_shard(a.shard());
        shard->set_lost(a.lost());
        if (a.lost()) continue;
        const auto sequence = [&](uint32_t server) ABSL_SHARED_LOCKS_REQUIRED(mu_) -> uint64_t {
          const auto p = progress_[server].find(a.shard());
          return p == progress_[server].end() ? 0 : p->second.applied_sequence();
        };
        const auto lag_of = [&](uint32_t server) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
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
        primary->set_applied_sequence(sequence(a.primary()));
        for (int kind = 0; kind < 2; ++kind) {
          for (const uint32_t r : kind == 0 ? a.replicas() : a.catching_up()) {
            rpc::ShardCopyStatus* copy = shard->add_copies();
            copy->set_server_id(r);
            copy->set_catching_up(kind == 1);
            copy->set_applied_sequence(sequence(r));
            *copy->mutable_lag() = lag_of(r);
          }
        }
      }
    }
    if (has_map_ && job_.training().mode() == config::Training::SYNC) {
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
      if (applied.has_value()) status.set_applied_step(*applied);
    }
    status.set_failovers(failovers_);
    status.set_num_workers(num_workers_);
    *status.mutable_clocks() = ClocksLocked();
    status.set_job_name(job_.name());
  }
  Run(&out);
  return status;
}

}  // namespace coordinator
}  // namespace ps

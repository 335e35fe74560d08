#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_config.h"
#include "common/status_macros.h"
#include "xxhash.h"

namespace ps {
namespace coordinator {

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
  StateStore* const store = options.store;
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  if (store != nullptr) {
    PS_ASSIGN_OR_RETURN(std::optional<SavedCoordinator> saved, store->Load());
    absl::MutexLock lock(&c->mu_);
    if (saved.has_value()) {
      const rpc::CoordinatorState& st = saved->state;
      if (st.job_digest() != c->job_digest_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "data_dir ", store->location(),
            " holds the state of another job (or of another version of this job file); give "
            "this job a data_dir of its own"));
      }
      c->membership_.TakeUp(st, saved->clocks, c->clock_->Now());
      c->placement_.TakeUp(st);
      c->kv_.TakeUp(saved->kv);
      c->persisted_version_ = st.map().version();
      c->persisted_next_id_ = c->membership_.next_member_id();
      std::fprintf(stderr,
                   "coordinator: carrying on job \"%s\" from %s: %zu members, shard map version "
                   "%llu\n",
                   c->job_.name().c_str(), store->location().c_str(), c->membership_.size(),
                   static_cast<unsigned long long>(st.map().version()));
    } else {
      c->PersistLocked();
    }
  }
  c->timer_ = std::thread([raw = c.get()] { raw->TimerLoop(); });
  return c;
}

Coordinator::Coordinator(CoordinatorOptions options)
    : job_(std::move(options.job)),
      heartbeat_interval_(options.heartbeat_interval),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      store_(options.store),
      job_digest_([this] {
        const std::string bytes = job_.SerializeAsString();
        return XXH3_64bits(bytes.data(), bytes.size());
      }()),
      start_step_(!options.restore_from.empty() &&
                          job_.training().mode() == config::Training::SYNC &&
                          options.restore_manifest.step() > 0
                      ? options.restore_manifest.step()
                      : 0),
      on_job_failed_(std::move(options.on_job_failed)),
      on_store_failed_(std::move(options.on_store_failed)),
      membership_(job_.cluster().num_servers(), job_.cluster().num_workers(),
                  std::max<uint32_t>(1, options.restore_manifest.next_member_id()), start_step_,
                  options.dead_after),
      placement_(job_.cluster().num_servers(), job_.cluster().num_shards(),
                 job_.cluster().replication_factor(), options.restore_from,
                 !options.restore_from.empty() && !options.restore_files_checked) {}

void Coordinator::StoreFailedLocked(const absl::Status& status) {
  if (status.ok() || store_failed_) return;
  store_failed_ = true;
  if (on_store_failed_) {
    on_store_failed_(status);
    return;
  }
  std::fprintf(stderr,
               "coordinator: cannot keep its state in its data_dir (a restart would lose the "
               "job): %s\n",
               status.ToString().c_str());
}

void Coordinator::SaveClockLocked(int32_t rank, int64_t clock) {
  if (store_ != nullptr && store_->keeps_clocks()) {
    StoreFailedLocked(store_->SaveClock(rank, clock));
  }
}

void Coordinator::PersistLocked(bool force) {
  if (store_ == nullptr) return;
  const uint64_t version = placement_.map().version();
  const uint32_t next_id = membership_.next_member_id();
  if (!force && persisted_next_id_ != 0 && persisted_version_ == version &&
      persisted_next_id_ == next_id && !members_changed_) {
    return;
  }
  rpc::CoordinatorState st;
  st.set_job_digest(job_digest_);
  membership_.SaveTo(&st);
  placement_.SaveTo(&st);
  StoreFailedLocked(store_->SaveState(st));
  persisted_version_ = version;
  persisted_next_id_ = next_id;
  members_changed_ = false;
}

uint32_t Coordinator::next_member_id() const {
  absl::MutexLock lock(&mu_);
  return membership_.next_member_id();
}

rpc::MemberIds Coordinator::MemberIds() const {
  absl::MutexLock lock(&mu_);
  return membership_.ids();
}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::JobFailedLocked(Completions* out) {
  std::optional<rpc::JobFailure> failure = membership_.TakeNewFailure();
  if (!failure.has_value()) return;
  // A coordinator that takes the state up after this one tells the members too.
  PersistLocked(/*force=*/true);
  if (!on_job_failed_) return;
  out->push_back([callback = on_job_failed_, failure = *std::move(failure)] { callback(failure); });
}

// --- Waiters ---

template <typename T>
WaitId Coordinator::AddWaiter(absl::Time deadline,
                              std::function<std::optional<absl::StatusOr<T>>(bool expired)> decide,
                              std::function<void(absl::StatusOr<T>)> done) {
  WaitPoll poll = MakeWaitPoll<T>(std::move(decide), std::move(done));
  Completions out;
  WaitId id;
  {
    absl::MutexLock lock(&mu_);
    id = waits_.NewId();
    const absl::Time now = clock_->Now();
    SweepLocked(now, &out);
    std::function<void()> finished;
    if (shutting_down_) {
      finished = poll(WaitEnd::kShutdown);
    } else {
      finished = poll(WaitEnd::kCheck);
      if (!finished && deadline <= now) finished = poll(WaitEnd::kDeadline);
    }
    if (finished) {
      out.push_back(std::move(finished));
    } else {
      waits_.Add(id, deadline, std::move(poll));
      if (deadline < timer_wake_at_) timer_cv_.Signal();
    }
  }
  RunAll(&out);
  return id;
}

void Coordinator::CancelWait(WaitId id) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (!waits_.Cancel(id, &out)) return;
  }
  RunAll(&out);
}

size_t Coordinator::NumPendingWaits() const {
  absl::MutexLock lock(&mu_);
  return waits_.size();
}

void Coordinator::StartServing() {
  absl::MutexLock lock(&mu_);
  membership_.StartJudging(clock_->Now());
}

void Coordinator::SweepLocked(absl::Time now, Completions* out) {
  // The coordinator itself stalled (its store's write held the lock, its process was paused):
  // members could not be heard meanwhile, and are judged from now, as after a restart.
  // Measured in real time: the timer thread sweeps every heartbeat interval (tests on a fake
  // clock call Sweep themselves after moving it).
  const absl::Time real_now = absl::Now();
  if (last_sweep_ != absl::InfinitePast() &&
      real_now - last_sweep_ > 2 * heartbeat_interval_ + absl::Milliseconds(500)) {
    std::fprintf(stderr,
                 "coordinator: it could not look at its members for %s: they are judged from "
                 "now\n",
                 absl::FormatDuration(real_now - last_sweep_).c_str());
    membership_.ExcuseSilence(now);
  }
  last_sweep_ = real_now;
  const Membership::SweepResult swept =
      membership_.Sweep(now, [this](const Membership::Member& server) {
        mu_.AssertHeld();
        std::fprintf(stderr, "coordinator: server %d (%s) missed its heartbeats: failing it over\n",
                     server.rank, server.address.c_str());
        placement_.FailOver(static_cast<uint32_t>(server.rank), membership_.Servers());
      });
  if (swept.server_died) {
    placement_.Heal(membership_.Servers());
    MapChangedLocked();
  }
  membership_.WorkersSilent(swept.silent_workers, now);
  JobFailedLocked(out);
  if (swept.any_died) waits_.PollAll(out);
  waits_.Expire(now, out);
}

void Coordinator::Sweep() {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    SweepLocked(clock_->Now(), &out);
  }
  RunAll(&out);
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
        const absl::Time wake = waits_.EarliestDeadline(now + heartbeat_interval_);
        timer_wake_at_ = wake;
        // The clock may be a fake: waiting `wake - now` of real time and then looking at the clock
        // again is right for both.
        timer_cv_.WaitWithTimeout(&mu_, wake - now);
        timer_wake_at_ = absl::InfiniteFuture();
      }
    }
    RunAll(&out);
  }
}

void Coordinator::Shutdown() {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      shutting_down_ = true;
      waits_.EndAll(&out);
      timer_cv_.SignalAll();
    }
  }
  RunAll(&out);
  absl::MutexLock lock(&shutdown_mu_);
  if (timer_.joinable()) timer_.join();
}

// --- Membership ---

rpc::RegisterResponse Coordinator::ResponseFor(const Membership::Member& member) const {
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
  PS_RETURN_IF_ERROR(Membership::CheckRegistration(role, address));
  Completions out;
  absl::StatusOr<rpc::RegisterResponse> response;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    SweepLocked(now, &out);  // liveness decides which worker ranks are free
    absl::StatusOr<Membership::Registration> registered =
        membership_.Register(role, address, rank, now);
    if (!registered.ok()) {
      response = registered.status();
    } else {
      const Membership::Member& member = registered->member;
      if (role == rpc::SERVER) {
        const uint32_t server_id = static_cast<uint32_t>(member.rank);
        if (registered->restarted_alive && placement_.has_map()) {
          // A restart replaces the old process, and what it held is gone with it.
          std::fprintf(stderr, "coordinator: server %d (%s) restarted: failing it over\n",
                       member.rank, member.address.c_str());
          placement_.FailOver(server_id, membership_.Servers());
        }
        placement_.ForgetProgress(server_id);
        if (placement_.has_map()) {
          placement_.Heal(membership_.Servers());  // the (re)joined server can take copies
          MapChangedLocked();
        } else {
          placement_.MaybeBuild(membership_.Servers());
        }
      }
      response = ResponseFor(member);
      PersistLocked();
      waits_.PollAll(&out);
    }
  }
  RunAll(&out);
  return response;
}

void Coordinator::TouchLocked(Membership::Member* member, absl::Time now) {
  if (!membership_.Touch(member, now) || member->role != rpc::SERVER) return;
  // Back after it was failed over: it holds nothing of the map any more, and may take copies.
  placement_.Heal(membership_.Servers());
  MapChangedLocked();
}

absl::StatusOr<uint64_t> Coordinator::Heartbeat(uint32_t member_id,
                                                const std::vector<rpc::ShardProgress>& shards,
                                                std::optional<rpc::JobFailure>* failure,
                                                std::optional<int64_t> clock) {
  Completions out;
  uint64_t version = 0;
  {
    absl::MutexLock lock(&mu_);
    Membership::Member* member = membership_.Find(member_id);
    if (member == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("heartbeat: unknown member_id ", member_id,
                       " (never registered, or replaced by a restart that registered again)"));
    }
    const bool was_alive = member->alive;
    TouchLocked(member, clock_->Now());
    bool clock_advanced = false;
    if (clock.has_value() && *clock >= 0 && member->role == rpc::WORKER) {
      absl::StatusOr<Membership::ClockReport> report =
          membership_.ReportClock(member_id, *clock, clock_->Now());
      clock_advanced = report.ok() && report->advanced;
      if (clock_advanced) SaveClockLocked(report->rank, *clock);
    }
    const bool changed = member->role == rpc::SERVER &&
                         placement_.ApplyProgress(static_cast<uint32_t>(member->rank), shards);
    if (changed) MapChangedLocked();
    if (!was_alive || changed || clock_advanced) waits_.PollAll(&out);
    membership_.MaybeFailJob();  // this worker is heard from after a report
    JobFailedLocked(&out);
    if (membership_.failure().has_value()) {
      member->told = true;
      if (failure != nullptr) *failure = membership_.failure();
    }
    version = placement_.version();
  }
  RunAll(&out);
  return version;
}

// --- Workers' ends ---

absl::Status Coordinator::Leave(uint32_t member_id) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    PS_ASSIGN_OR_RETURN(const bool left, membership_.Leave(member_id));
    if (!left) return absl::OkStatus();
    members_changed_ = true;
    PersistLocked();
    membership_.MaybeFailJob();  // a failure report may have waited for it
    JobFailedLocked(&out);
  }
  RunAll(&out);
  return absl::OkStatus();
}

absl::Status Coordinator::ReportWorkerFailure(uint32_t member_id, absl::string_view reason) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    PS_RETURN_IF_ERROR(membership_.ReportFailure(member_id, reason, clock_->Now()));
    JobFailedLocked(&out);
  }
  RunAll(&out);
  return absl::OkStatus();
}

std::optional<rpc::JobFailure> Coordinator::failure() const {
  absl::MutexLock lock(&mu_);
  return membership_.failure();
}

// --- Restore ---

std::string Coordinator::UncheckedRestore() const {
  absl::MutexLock lock(&mu_);
  if (!placement_.restore_unchecked()) return "";
  return placement_.map().restore_from();
}

void Coordinator::RestoreFilesChecked() {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (!placement_.restore_unchecked()) return;
    placement_.ClearRestoreUnchecked();
    if (placement_.has_map()) {
      MapChangedLocked();
      waits_.PollAll(&out);
    } else {
      PersistLocked(/*force=*/true);
    }
  }
  RunAll(&out);
}

void Coordinator::RefuseRestore(const absl::Status& why) {
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (membership_.failure().has_value()) return;
    rpc::JobFailure failure;
    failure.set_rank(-1);
    failure.set_reason(absl::StrCat("the checkpoint cannot be restored: ", why.ToString()));
    failure.add_failures(failure.reason());
    membership_.FailJob(std::move(failure));
    JobFailedLocked(&out);
    waits_.PollAll(&out);
  }
  RunAll(&out);
}

bool Coordinator::AwaitFailureTold(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto told = [this] {
    mu_.AssertHeld();
    return membership_.AllTold();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&told), timeout);
}

// --- Failover ---

std::optional<std::string> Coordinator::AddressToCheck(uint32_t server_id) {
  absl::MutexLock lock(&mu_);
  return membership_.LiveServerAddress(server_id);
}

uint64_t Coordinator::DeclareDead(uint32_t server_id) {
  Completions out;
  uint64_t version = 0;
  {
    absl::MutexLock lock(&mu_);
    if (const std::optional<std::string> address = membership_.LiveServerAddress(server_id)) {
      std::fprintf(stderr, "coordinator: server %d (%s) is unreachable: failing it over\n",
                   server_id, address->c_str());
      // As if not heard from for dead_after: the sweep fails it over, as a missed heartbeat would.
      membership_.Expire(server_id, clock_->Now());
      SweepLocked(clock_->Now(), &out);
    }
    version = placement_.version();
  }
  RunAll(&out);
  return version;
}

// --- Shard map ---

void Coordinator::MapChangedLocked() {
  if (!placement_.has_map()) return;
  placement_.Changed(membership_.Servers());
  PersistLocked();
}

WaitId Coordinator::AsyncGetShardMap(uint64_t min_version, absl::Time deadline,
                                     std::function<void(absl::StatusOr<rpc::ShardMap>)> done) {
  return AddWaiter<rpc::ShardMap>(
      deadline,
      [this, min_version](bool expired) -> std::optional<absl::StatusOr<rpc::ShardMap>> {
        mu_.AssertHeld();
        return placement_.Answer(min_version, membership_.servers_registered(), expired);
      },
      std::move(done));
}

absl::StatusOr<rpc::ShardMap> Coordinator::GetShardMap(uint64_t min_version, absl::Time deadline) {
  return AwaitAnswer<rpc::ShardMap>(
      [&](auto done) { AsyncGetShardMap(min_version, deadline, done); });
}

// --- Clocks ---

rpc::ClockState Coordinator::ClocksLocked() const {
  rpc::ClockState state = membership_.Clocks();
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
    PS_ASSIGN_OR_RETURN(const Membership::ClockReport report,
                        membership_.ReportClock(member_id, clock, clock_->Now()));
    if (report.advanced) SaveClockLocked(report.rank, clock);
    waits_.PollAll(&out);
    state = ClocksLocked();
  }
  RunAll(&out);
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
        return membership_.ClockNotReached(clock);
      },
      std::move(done));
}

absl::StatusOr<rpc::ClockState> Coordinator::WaitClock(int64_t clock, absl::Time deadline) {
  return AwaitAnswer<rpc::ClockState>([&](auto done) { AsyncWaitClock(clock, deadline, done); });
}

// --- Rendezvous store ---

absl::Status Coordinator::KvSet(std::string key, std::string value) {
  PS_RETURN_IF_ERROR(RendezvousStore::CheckEntry(key, value));
  if (store_ != nullptr && value.size() > store_->max_value_bytes()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv set: value of ", value.size(), " bytes for key '", key, "' is over the ",
                     store_->max_value_bytes(), " bytes the coordinators' store (",
                     store_->location(), ") takes"));
  }
  Completions out;
  {
    absl::MutexLock lock(&mu_);
    if (store_ != nullptr) StoreFailedLocked(store_->SaveKv(key, value));
    PS_RETURN_IF_ERROR(kv_.Set(std::move(key), std::move(value)));
    waits_.PollAll(&out);
  }
  RunAll(&out);
  return absl::OkStatus();
}

void Coordinator::KvErasePrefix(absl::string_view prefix) {
  absl::MutexLock lock(&mu_);
  kv_.ErasePrefix(prefix);
  if (store_ != nullptr) StoreFailedLocked(store_->EraseKvPrefix(prefix));
}

void Coordinator::SetCheckpointNotice(std::optional<rpc::CheckpointNotice> notice) {
  absl::MutexLock lock(&mu_);
  checkpoint_notice_ = std::move(notice);
}

absl::StatusOr<std::vector<std::string>> Coordinator::KvGet(
    const std::vector<std::string>& keys) const {
  absl::MutexLock lock(&mu_);
  return kv_.Get(keys);
}

WaitId Coordinator::AsyncKvWait(
    std::vector<std::string> keys, absl::Time deadline,
    std::function<void(absl::StatusOr<std::vector<std::string>>)> done) {
  for (const std::string& key : keys) {
    absl::Status valid = RendezvousStore::CheckKey(key);
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
        return kv_.Answer(keys, expired);
      },
      std::move(done));
}

absl::StatusOr<std::vector<std::string>> Coordinator::KvWait(std::vector<std::string> keys,
                                                             absl::Time deadline) {
  return AwaitAnswer<std::vector<std::string>>(
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
    membership_.FillStatus(now, &status);
    placement_.FillStatus(job_.training().mode() == config::Training::SYNC, &status);
    status.set_num_workers(job_.cluster().num_workers());
    *status.mutable_clocks() = ClocksLocked();
    status.set_job_name(job_.name());
  }
  RunAll(&out);
  return status;
}

}  // namespace coordinator
}  // namespace ps

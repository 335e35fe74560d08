#include "server/coordinator/membership.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/net_address.h"
#include "common/role_name.h"

namespace ps {
namespace coordinator {

Membership::Membership(uint32_t num_servers, uint32_t num_workers, uint32_t first_member_id,
                       int64_t start_step, absl::Duration dead_after)
    : num_servers_(num_servers),
      num_workers_(num_workers),
      dead_after_(dead_after),
      first_member_id_(first_member_id),
      next_member_id_(first_member_id),
      workers_(num_workers) {
  // Every rank has finished the steps before the restored one.
  for (WorkerSlot& slot : workers_) slot.clock = start_step - 1;
}

absl::Status Membership::CheckRegistration(rpc::Role role, absl::string_view address) {
  if (role != rpc::SERVER && role != rpc::WORKER && role != rpc::CLIENT) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: role must be SERVER, WORKER or CLIENT, got ", role));
  }
  if (role == rpc::SERVER && address.empty()) {
    return absl::InvalidArgumentError(
        "register: a server must give the host:port it serves on as its address");
  }
  if (!address.empty()) {
    if (absl::StatusOr<HostPort> parsed = ParseHostPort(address, AddressUse::kDial); !parsed.ok()) {
      return parsed.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Membership::Registration> Membership::Register(rpc::Role role,
                                                              absl::string_view address,
                                                              int32_t rank, absl::Time now) {
  Registration registration;
  Member& member = registration.member;
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
      registration.restarted_alive = old != members_.end() && old->second.alive;
      members_.erase(servers_[server_id].member_id);
    }
    member.rank = server_id;
    member.member_id = next_member_id_++;
    servers_[server_id].member_id = member.member_id;
    members_.emplace(member.member_id, member);
    return registration;
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
    return registration;
  }

  member.rank = -1;  // a client
  member.member_id = next_member_id_++;
  members_.emplace(member.member_id, member);
  return registration;
}

Membership::Member* Membership::Find(uint32_t member_id) {
  auto it = members_.find(member_id);
  return it == members_.end() ? nullptr : &it->second;
}

bool Membership::Touch(Member* member, absl::Time now) {
  member->last_seen = now;
  if (member->alive) return false;
  member->alive = true;
  return true;
}

Membership::SweepResult Membership::Sweep(absl::Time now,
                                          const std::function<void(const Member&)>& server_died) {
  SweepResult result;
  if (!judging_) return result;
  for (auto& [id, member] : members_) {
    if (!member.alive || now - member.last_seen < dead_after_) continue;
    member.alive = false;
    result.any_died = true;
    if (member.role == rpc::WORKER && !member.left && !member.failed) {
      result.silent_workers.push_back(id);
    }
    if (member.role == rpc::SERVER) {
      result.server_died = true;
      server_died(member);
    }
  }
  return result;
}

void Membership::WorkersSilent(const std::vector<uint32_t>& silent, absl::Time now) {
  for (const uint32_t id : silent) {
    const Member& worker = members_.at(id);
    const int64_t clock = workers_[worker.rank].clock;
    WorkerFailed(
        worker,
        absl::StrFormat("its heartbeats stopped: not heard from for %s (killed, crashed or hung, "
                        "or its host is gone), after %d steps done",
                        absl::FormatDuration(
                            absl::Milliseconds(absl::ToInt64Milliseconds(now - worker.last_seen))),
                        clock + 1),
        /*silent=*/true);
  }
}

std::vector<ServerState> Membership::Servers() const {
  std::vector<ServerState> servers;
  servers.reserve(servers_.size());
  for (size_t id = 0; id < servers_.size(); ++id) {
    servers.push_back(ServerState{servers_[id].address, ServerAlive(static_cast<uint32_t>(id))});
  }
  return servers;
}

bool Membership::ServerAlive(uint32_t server_id) const {
  if (server_id >= servers_.size()) return false;
  const auto it = members_.find(servers_[server_id].member_id);
  return it != members_.end() && it->second.alive;
}

std::optional<std::string> Membership::LiveServerAddress(uint32_t server_id) const {
  if (!ServerAlive(server_id)) return std::nullopt;
  return servers_[server_id].address;
}

bool Membership::Expire(uint32_t server_id, absl::Time now) {
  if (!ServerAlive(server_id)) return false;
  members_.at(servers_[server_id].member_id).last_seen = now - dead_after_;
  return true;
}

// --- Clocks ---

absl::StatusOr<Membership::ClockReport> Membership::ReportClock(uint32_t member_id, int64_t clock,
                                                                absl::Time now) {
  Member* member = Find(member_id);
  if (member == nullptr) {
    return absl::NotFoundError(absl::StrCat("report clock: unknown member_id ", member_id));
  }
  if (member->role != rpc::WORKER) {
    return absl::FailedPreconditionError(absl::StrCat("report clock: member ", member_id, " is a ",
                                                      RoleName(member->role),
                                                      "; only workers report clocks"));
  }
  Touch(member, now);
  ClockReport report;
  report.rank = member->rank;
  WorkerSlot& slot = workers_[member->rank];
  if (clock > slot.clock) {
    slot.clock = clock;
    report.advanced = true;
  }
  return report;
}

rpc::ClockState Membership::Clocks() const {
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
  return state;
}

absl::Status Membership::ClockNotReached(int64_t clock) const {
  size_t registered = 0;
  for (const WorkerSlot& slot : workers_) registered += slot.member_id != 0;
  return absl::DeadlineExceededError(absl::StrCat(
      "wait clock: clock ", clock, " not reached by every worker by the deadline (min_clock ",
      Clocks().min_clock(), ", ", registered, " of ", num_workers_, " workers registered)"));
}

// --- Workers' ends ---

absl::StatusOr<bool> Membership::Leave(uint32_t member_id) {
  Member* member = Find(member_id);
  if (member == nullptr) {
    return absl::NotFoundError(absl::StrCat("leave: unknown member_id ", member_id));
  }
  // A worker that reported its failure closes its client too: it stays failed.
  if (member->role != rpc::WORKER || member->left || member->failed) return false;
  member->left = true;
  std::fprintf(stderr, "coordinator: worker %d (member %u) left the job after %lld steps done\n",
               member->rank, member_id, static_cast<long long>(workers_[member->rank].clock + 1));
  return true;
}

absl::Status Membership::ReportFailure(uint32_t member_id, absl::string_view reason,
                                       absl::Time now) {
  Member* member = Find(member_id);
  if (member == nullptr) {
    return absl::NotFoundError(absl::StrCat("report failure: unknown member_id ", member_id));
  }
  if (member->role != rpc::WORKER) {
    return absl::FailedPreconditionError(absl::StrCat("report failure: member ", member_id,
                                                      " is a ", RoleName(member->role),
                                                      "; only workers report their failure"));
  }
  if (member->failed) return absl::OkStatus();
  member->failed = true;
  member->told = true;  // it knows, and is about to exit
  first_report_ = std::min(first_report_, now);
  WorkerFailed(*member, std::string(reason), /*silent=*/false);
  return absl::OkStatus();
}

void Membership::WorkerFailed(const Member& worker, std::string reason, bool silent) {
  std::fprintf(stderr, "coordinator: worker %d (member %u) %s: %s\n", worker.rank, worker.member_id,
               silent ? "is silent" : "failed", reason.c_str());
  if (failure_.has_value()) return;  // the job failed already
  WorkerFailure f;
  f.rank = worker.rank;
  f.member_id = worker.member_id;
  f.reason = std::move(reason);
  f.silent = silent;
  worker_failures_.push_back(std::move(f));
  MaybeFailJob();
}

void Membership::MaybeFailJob() {
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
  FailJob(std::move(failure));
}

void Membership::FailJob(rpc::JobFailure failure) {
  if (failure_.has_value()) return;
  std::fprintf(stderr, "coordinator: the job failed: %s\n",
               absl::StrJoin(failure.failures(), "; then ").c_str());
  failure_ = std::move(failure);
}

std::optional<rpc::JobFailure> Membership::TakeNewFailure() {
  if (!failure_.has_value() || failure_taken_) return std::nullopt;
  failure_taken_ = true;
  return failure_;
}

bool Membership::AllTold() const {
  if (!failure_.has_value()) return false;
  for (const auto& [id, m] : members_) {
    if (m.alive && !m.left && !m.failed && !m.told) return false;
  }
  return true;
}

// --- State store and status ---

void Membership::SaveTo(rpc::CoordinatorState* state) const {
  state->set_first_member_id(first_member_id_);
  state->set_next_member_id(next_member_id_);
  for (const auto& [id, m] : members_) {
    rpc::SavedMember* saved = state->add_members();
    saved->set_member_id(id);
    saved->set_role(m.role);
    saved->set_rank(m.rank);
    saved->set_address(m.address);
    saved->set_left(m.left);
  }
  for (const ServerSlot& slot : servers_) {
    state->add_server_addresses(slot.address);
    state->add_server_members(slot.member_id);
  }
  for (const WorkerSlot& slot : workers_) state->add_worker_members(slot.member_id);
  if (failure_.has_value()) *state->mutable_failure() = *failure_;
}

void Membership::StartJudging(absl::Time now) {
  if (judging_) return;
  judging_ = true;
  for (auto& [id, member] : members_) {
    if (member.alive) member.last_seen = now;
  }
}

void Membership::ExcuseSilence(absl::Time now) {
  for (auto& [id, member] : members_) {
    if (member.alive) member.last_seen = std::max(member.last_seen, now);
  }
}

void Membership::TakeUp(const rpc::CoordinatorState& st, const std::map<int32_t, int64_t>& clocks,
                        absl::Time now) {
  judging_ = false;
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
  for (const auto& [rank, clock] : clocks) {
    if (rank >= 0 && rank < static_cast<int32_t>(workers_.size())) workers_[rank].clock = clock;
  }
  if (st.has_failure()) {
    failure_ = st.failure();
    failure_taken_ = false;  // the coordinator taking it up reports it (TakeNewFailure)
  }
}

void Membership::FillStatus(absl::Time now, rpc::ClusterStatus* status) const {
  for (const auto& [id, member] : members_) {
    rpc::MemberStatus* m = status->add_members();
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
  if (failure_.has_value()) *status->mutable_failure() = *failure_;
}

}  // namespace coordinator
}  // namespace ps

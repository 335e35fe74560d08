// Membership: who is in a job (servers, workers, clients), which server and worker slots they
// hold, whether they are alive, the workers' step clocks, and how workers ended (left, failed,
// silent) and whether that failed the job.
#ifndef PS_SERVER_COORDINATOR_MEMBERSHIP_H_
#define PS_SERVER_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator/placement.h"

namespace ps {
namespace coordinator {

// A Membership holds the members of one job and their slots: server_id 0..num_servers-1, worker
// ranks 0..num_workers-1 (each with the largest step clock its workers reported), and member ids
// handed out in increasing order and never reused. It reads time only as given (`now`), and
// knows nothing of the shard map: the coordinator fails servers over when Sweep or Register says
// so. Thread-compatible (the coordinator calls it under its lock).
class Membership {
 public:
  struct Member {
    uint32_t member_id = 0;
    rpc::Role role = rpc::ROLE_UNSPECIFIED;
    int32_t rank = -1;  // server_id for servers
    std::string address;
    bool alive = true;
    absl::Time last_seen;
    bool left = false;    // a worker done with the job
    bool failed = false;  // a worker that reported its failure
    bool told = false;    // its heartbeat was answered with the job's failure
  };

  // A job of `num_servers` servers and `num_workers` workers whose member ids start at
  // `first_member_id` (>= 1) and whose worker ranks have all finished step `start_step - 1`.
  // Members not heard from for `dead_after` are found dead by Sweep.
  Membership(uint32_t num_servers, uint32_t num_workers, uint32_t first_member_id,
             int64_t start_step, absl::Duration dead_after);

  // Member ids handed out so far are in [first_member_id, next_member_id).
  uint32_t first_member_id() const { return first_member_id_; }
  uint32_t next_member_id() const { return next_member_id_; }
  // Both of the above, as Coordinator.GetMemberIds answers them.
  rpc::MemberIds ids() const {
    rpc::MemberIds ids;
    ids.set_first_member_id(first_member_id_);
    ids.set_next_member_id(next_member_id_);
    return ids;
  }

  // OK when a member of `role` may register with `address`; INVALID_ARGUMENT when the role is not
  // SERVER, WORKER or CLIENT, a server gives no address, or an address that is given is not
  // host:port with a host and a port in 1..65535 (ParseHostPort for AddressUse::kDial,
  // common/net_address.h).
  static absl::Status CheckRegistration(rpc::Role role, absl::string_view address);

  struct Registration {
    Member member;
    // A server registered again with its address while its old member was alive: it restarted
    // and lost what it held, so it must be failed over.
    bool restarted_alive = false;
  };

  // Adds a member (as Coordinator::Register describes), alive and seen at `now`; `role` and
  // `address` passed CheckRegistration. A server takes the slot of a known address (replacing
  // its member, whose progress the caller forgets) or the next free one: FAILED_PRECONDITION
  // when all are taken. A worker asks for `rank` or -1: INVALID_ARGUMENT out of range,
  // ALREADY_EXISTS held by an alive worker, FAILED_PRECONDITION no free rank for -1. A client
  // gets rank -1.
  absl::StatusOr<Registration> Register(rpc::Role role, absl::string_view address, int32_t rank,
                                        absl::Time now);

  // The member `member_id`; nullptr when it is unknown (never registered, or replaced).
  Member* Find(uint32_t member_id);

  // Marks `member` alive and seen at `now`. Returns whether it was found dead before (it is back).
  bool Touch(Member* member, absl::Time now);

  struct SweepResult {
    bool any_died = false;
    bool server_died = false;
    // Workers found dead that had neither left nor failed, in member id order.
    std::vector<uint32_t> silent_workers;
  };

  // Marks members not heard from for dead_after at `now` as not alive, in member id order;
  // `server_died` is called for each server so marked, right after it is. After TakeUp and
  // before StartJudging, marks nobody.
  SweepResult Sweep(absl::Time now, const std::function<void(const Member&)>& server_died);

  // The workers `silent` (SweepResult.silent_workers) failed by falling silent at `now`.
  void WorkersSilent(const std::vector<uint32_t>& silent, absl::Time now);

  // The server slots registered so far, with liveness as of the last Sweep or Touch.
  std::vector<ServerState> Servers() const;
  size_t servers_registered() const { return servers_.size(); }
  bool ServerAlive(uint32_t server_id) const;
  // Server `server_id`'s address when it is a live member; nullopt otherwise.
  std::optional<std::string> LiveServerAddress(uint32_t server_id) const;
  // Makes live server `server_id` look not heard from for dead_after at `now`, so that the next
  // Sweep finds it dead. Returns false (and changes nothing) for an unknown or dead server.
  bool Expire(uint32_t server_id, absl::Time now);

  // --- Clocks ---

  struct ClockReport {
    int32_t rank = -1;
    bool advanced = false;  // the rank's clock went up (else it already was >= clock)
  };
  // Worker `member_id` finished step `clock` (>= 0) at `now`; counts as a heartbeat (Touch).
  // NOT_FOUND for an unknown member; FAILED_PRECONDITION for one that is not a worker.
  absl::StatusOr<ClockReport> ReportClock(uint32_t member_id, int64_t clock, absl::Time now);
  // min_clock (-1 until every rank registered) and max_clock (-1 before any report).
  rpc::ClockState Clocks() const;
  // Why WaitClock(clock) has no answer at its deadline: DEADLINE_EXCEEDED naming min_clock and how
  // many workers registered.
  absl::Status ClockNotReached(int64_t clock) const;

  // --- Workers' ends (Coordinator's "Workers' ends") ---

  // Worker `member_id` is done. Returns whether it newly left (false for a member of another role,
  // or one that left or failed already); NOT_FOUND for an unknown member.
  absl::StatusOr<bool> Leave(uint32_t member_id);
  // Worker `member_id` failed for `reason` at `now`. NOT_FOUND for an unknown member;
  // FAILED_PRECONDITION for one that is not a worker; OK, changing nothing, for a second report.
  absl::Status ReportFailure(uint32_t member_id, absl::string_view reason, absl::Time now);
  // Fails the job on the workers' failures recorded so far, when it may (every other worker was
  // heard from since the first report, or one of them is silent). Called when a member is heard.
  void MaybeFailJob();
  // The job fails with `failure` (unless it failed already): printed and kept.
  void FailJob(rpc::JobFailure failure);
  const std::optional<rpc::JobFailure>& failure() const { return failure_; }
  // The job's failure the first time it is asked after it failed; nullopt otherwise.
  std::optional<rpc::JobFailure> TakeNewFailure();
  // The job failed, and every alive member that has neither left nor failed was told.
  bool AllTold() const;

  // --- State store and status ---

  // Writes the member ids, members and slots into `state`.
  void SaveTo(rpc::CoordinatorState* state) const;
  // Takes up what a state store kept: every member alive and seen at `now`, and not judged by
  // its heartbeats (Sweep) until StartJudging: a coordinator reading its state cannot be reached
  // until it listens.
  void TakeUp(const rpc::CoordinatorState& state, const std::map<int32_t, int64_t>& clocks,
              absl::Time now);
  // After TakeUp: every alive member counts as heard from at `now`, and Sweep judges them from
  // then on. Does nothing otherwise.
  void StartJudging(absl::Time now);
  // The coordinator could not hear anyone for a while (it stalled): every alive member counts as
  // heard from at `now`.
  void ExcuseSilence(absl::Time now);
  // Adds every member (liveness and last seen as of `now`; workers with their ends and clocks)
  // and the job's failure to `status`.
  void FillStatus(absl::Time now, rpc::ClusterStatus* status) const;
  size_t size() const { return members_.size(); }

 private:
  struct ServerSlot {
    std::string address;
    uint32_t member_id = 0;
  };
  struct WorkerSlot {
    uint32_t member_id = 0;  // 0: never taken
    int64_t clock = -1;
  };
  // A worker's failure, before the job failed on it.
  struct WorkerFailure {
    int32_t rank = -1;
    uint32_t member_id = 0;
    std::string reason;
    bool silent = false;  // found by its missed heartbeats, not reported
  };

  void WorkerFailed(const Member& worker, std::string reason, bool silent);

  const uint32_t num_servers_;
  const uint32_t num_workers_;
  const absl::Duration dead_after_;

  uint32_t first_member_id_;
  uint32_t next_member_id_;
  std::map<uint32_t, Member> members_;
  std::vector<ServerSlot> servers_;  // index: server_id
  std::vector<WorkerSlot> workers_;  // index: rank
  std::vector<WorkerFailure> worker_failures_;
  absl::Time first_report_ = absl::InfiniteFuture();
  std::optional<rpc::JobFailure> failure_;
  bool failure_taken_ = false;
  bool judging_ = true;  // false from TakeUp to StartJudging
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_MEMBERSHIP_H_

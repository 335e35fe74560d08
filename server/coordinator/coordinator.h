// The coordinator's state machine: membership, failure detection, the versioned shard map, step
// clocks and the rendezvous key-value store. It knows nothing of gRPC; coordinator_service.h puts
// it on the wire. It ties its parts together under one lock: Membership (membership.h: members,
// slots, liveness, clocks, workers' ends), Placement (placement.h: the shard map and failover),
// RendezvousStore (rendezvous_store.h), the StateStore it writes them to (state_store.h), and the
// WaitList of pending waiting calls (wait_list.h).
//
// Waiting calls (the shard map, clocks, keys) come in two forms. `AsyncX(..., done)` registers a
// waiter and returns at once; `done` is called exactly once, when the state allows an answer, at
// the deadline, on CancelWait or on Shutdown, so the service never parks an RPC thread. `done` runs
// without the coordinator's lock, on the calling thread (answered at once), on the thread whose
// call changed the state, or on the internal timer thread; it must not block. The blocking `X(...)`
// forms wrap the async ones for in-process callers and tests.
#ifndef PS_SERVER_COORDINATOR_COORDINATOR_H_
#define PS_SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "server/coordinator/clock.h"
#include "server/coordinator/membership.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/rendezvous_store.h"
#include "server/coordinator/state_store.h"
#include "server/coordinator/wait_list.h"

namespace ps {
namespace coordinator {

struct CoordinatorOptions {
  // The job the cluster runs. Must pass ValidateJob (common/job_config.h); its `cluster` section
  // sizes the membership (num_servers, num_workers) and the shard map (num_shards,
  // replication_factor). No default: an empty job fails validation.
  config::Job job;

  // How often members are told to heartbeat (RegisterResponse.heartbeat_interval_ms), and how often
  // the internal timer sweeps for dead members. Default 500 ms; must be > 0.
  absl::Duration heartbeat_interval = absl::Milliseconds(500);

  // A member not heard from for this long is marked not alive. Default 3 s; must be greater than
  // heartbeat_interval.
  absl::Duration dead_after = absl::Seconds(3);

  // Time for heartbeats and deadlines. Not owned; must outlive the coordinator. Default (nullptr):
  // Clock::Real().
  Clock* clock = nullptr;

  // The checkpoint folder the job starts from (see CheckRestorable in restore_check.h), or empty
  // for a job that starts empty. The shard map names it (ShardMap.restore_from), so that the
  // servers load their shards from it.
  std::string restore_from;
  // Its manifest, when restore_from is set. Sync jobs: a checkpoint cut at step t gives every
  // worker rank clock t - 1 and its workers and clients start_step t. Member ids are handed out
  // from its next_member_id on.
  rpc::CheckpointManifest restore_manifest;
  // Whether restore_from's shard files were already read and found intact (VerifyRestoreFiles in
  // restore_check.h). Default true. False: the shard map says so (ShardMap.restore_unchecked),
  // so that the servers load their shards but serve none, until RestoreFilesChecked() or
  // RefuseRestore().
  bool restore_files_checked = true;

  // Where the coordinator keeps its state (members, shard map, clocks, rendezvous store) as it
  // changes, so that a coordinator restarted on the same store carries the job on (state_store.h:
  // RocksDB in a data_dir today). Not owned; must outlive the coordinator. Null (default): in
  // memory only. A store holding a job's state is taken up: every member it knew counts as alive,
  // is not judged by its heartbeats until StartServing, and must heartbeat within dead_after of
  // it as usual; restore_from is not applied again. A failed write is reported once on stderr and the coordinator carries on
  // from memory.
  StateStore* store = nullptr;

  // Called once when a write to `store` fails, with the error, under the coordinator's lock (it
  // must not call the coordinator, nor block). A store shared by several coordinators (etcd)
  // refuses a write once this coordinator no longer leads, or cannot reach a quorum: the caller
  // then stops answering, since what the coordinator holds may not be durable. Default: the
  // failure is reported once on stderr and the coordinator carries on from memory.
  std::function<void(const absl::Status&)> on_store_failed;

  // Called once when the job fails (see "Workers' ends" below), without the coordinator's lock,
  // on the thread whose call or sweep failed it; it must not block. Default: none.
  std::function<void(const rpc::JobFailure&)> on_job_failed;
};

// A Coordinator holds the cluster's membership, shard map, clocks and rendezvous store for one job.
// Thread-safe.
class Coordinator {
 public:
  // Upper bounds of the rendezvous store.
  static constexpr size_t kMaxKeyBytes = RendezvousStore::kMaxKeyBytes;
  static constexpr size_t kMaxValueBytes = RendezvousStore::kMaxValueBytes;

  // Starts a coordinator and its timer thread. INVALID_ARGUMENT if the job fails validation or
  // the durations break their constraints; FAILED_PRECONDITION if options.store holds the state
  // of another job; the store's errors.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options);

  // Tells a coordinator that took up a store's state (CoordinatorOptions::store) that its RPC
  // server now accepts calls: the members it knew count as heard from now, and must heartbeat
  // within dead_after of it. Until then none is found silent, however long starting to listen
  // took (a busy machine): they could not reach it. Does nothing otherwise, or when called again.
  void StartServing();

  // The durations' constraints, which Create checks: heartbeat_interval > 0 and dead_after above
  // it. OK or INVALID_ARGUMENT saying which.
  static absl::Status CheckHeartbeatTiming(absl::Duration heartbeat_interval,
                                           absl::Duration dead_after);

  // Calls Shutdown().
  ~Coordinator();

  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // The coordinator's clock; deadlines passed to the waiting calls are on this clock.
  absl::Time Now() const { return clock_->Now(); }
  const config::Job& job() const { return job_; }

  // Member ids handed out so far are below this (CheckpointManifest.next_member_id).
  uint32_t next_member_id() const;
  // Every member id this coordinator handed out, and no other, is in [first_member_id,
  // next_member_id): ids are given in increasing order from 1 (a restored job: from its
  // checkpoint's next_member_id) and never reused, also across a restart from the store.
  rpc::MemberIds MemberIds() const;
  absl::Duration heartbeat_interval() const { return heartbeat_interval_; }

  // --- Membership ---

  // Adds a member. Returns its member_id (unique from 1, never reused), its rank, the job and the
  // heartbeat interval. Registering counts as a heartbeat.
  //  - SERVER: `address` (host:port) is required, else INVALID_ARGUMENT; `rank` is ignored. Gets
  //    server_id 0..num_servers-1 in registration order. A server registering with the address of
  //    a known server is a restart: it takes that server_id (and replaces the old member, whose
  //    member_id becomes unknown). It has lost its memory, so it is first failed over as if it had
  //    died (if that did not happen yet), then joins empty and is given copies to catch up. A new
  //    address when num_servers servers are known: FAILED_PRECONDITION.
  //  - WORKER: `rank` in [0, num_workers) asks for that rank, -1 for the lowest rank never taken
  //    (else the lowest held by a dead worker). Out of range: INVALID_ARGUMENT; held by an alive
  //    worker: ALREADY_EXISTS; no free rank for -1: FAILED_PRECONDITION. A worker taking a dead
  //    worker's rank replaces it and keeps the rank's clock.
  //  - CLIENT: rank is -1.
  //  - ROLE_UNSPECIFIED or unknown: INVALID_ARGUMENT. An address that is given must be host:port
  //    with a port in 1..65535 (INVALID_ARGUMENT otherwise).
  absl::StatusOr<rpc::RegisterResponse> Register(rpc::Role role, absl::string_view address,
                                                 int32_t rank);

  // Records that `member_id` is alive (again). Returns the shard map's version (0 before the map
  // exists); NOT_FOUND for an unknown member. A server's heartbeat carries the progress of every
  // shard copy it holds: the applied sequences decide which replica a failover promotes, and a
  // copy catching up that its primary reports caught up (ReplicaLag.caught_up) becomes a replica
  // (a new map version). Once the job failed, sets `*failure` (when given) to why, and the member
  // counts as told (AwaitFailureTold). A worker's heartbeat may carry `clock`, the largest step
  // it reported: it counts as ReportClock(member_id, clock) (clocks only grow), which is how a
  // coordinator taking over from a store that keeps no clocks learns them again.
  absl::StatusOr<uint64_t> Heartbeat(uint32_t member_id,
                                     const std::vector<rpc::ShardProgress>& shards = {},
                                     std::optional<rpc::JobFailure>* failure = nullptr,
                                     std::optional<int64_t> clock = std::nullopt);

  // --- Workers' ends ---
  //
  // A worker ends by leaving (its client closes after its last step: done), by reporting that it
  // failed, or by falling silent: no heartbeat for dead_after without having left (killed,
  // crashed, hung, its host gone). Either of the last two fails the job, which no member can
  // carry on: a silent worker at once, a reported failure once every other registered worker has
  // been heard from since the report, has left, has failed or was found silent (a worker whose
  // peer was killed often fails first, and the silent one is the cause). failure() then says
  // why, and every heartbeat's answer tells its member, which exits. A straggler, or a worker
  // outside a sync quorum, keeps heartbeating and is no failure.

  // Worker `member_id` is done with the job: its silence from now on is not a failure. OK (and
  // nothing changes) for a member of another role; NOT_FOUND for an unknown member.
  absl::Status Leave(uint32_t member_id);

  // Worker `member_id` cannot go on, for `reason` (its error), and is about to exit: the job fails
  // as described above. NOT_FOUND for an unknown member; FAILED_PRECONDITION for one that is not
  // a worker. A second report of the same worker changes nothing.
  absl::Status ReportWorkerFailure(uint32_t member_id, absl::string_view reason);

  // Why the job failed; nullopt while it has not.
  std::optional<rpc::JobFailure> failure() const;

  // --- Restore ---

  // The checkpoint folder whose shard files are still to be checked (restore_files_checked was
  // false, or a store taken up holds a map that says restore_unchecked); empty when there is none.
  std::string UncheckedRestore() const;
  // The checkpoint's files were read and found intact: the shard map no longer says
  // restore_unchecked (a new version), so the servers install their loaded shards and serve.
  // Nothing happens when no check was pending.
  void RestoreFilesChecked();
  // The checkpoint's files are not intact (`why`: VerifyRestoreFiles' error): the job fails, as
  // for a worker's failure, with that reason (JobFailure.rank -1); every member is told and exits,
  // and no server ever served a restored shard.
  void RefuseRestore(const absl::Status& why);

  // Waits, up to `timeout` of real time, until the job has failed and every alive member that
  // has neither left nor reported a failure was told so by a heartbeat's answer (members found
  // dead meanwhile are not waited for). Returns whether that happened.
  bool AwaitFailureTold(absl::Duration timeout);

  // --- Failover ---

  // A member could not reach server `server_id`: the host:port to check, if that server is a live
  // member; nullopt otherwise (unknown or already dead: nothing to check).
  std::optional<std::string> AddressToCheck(uint32_t server_id);

  // Server `server_id` is gone (its check failed): fails it over at once, as a missed heartbeat
  // would (see Sweep). Returns the map version after. Does nothing for an unknown or dead server.
  uint64_t DeclareDead(uint32_t server_id);

  // Marks members not heard from for dead_after as not alive and ends waits whose deadline has
  // passed. A server that dies is failed over, in one new map version: each shard it was primary
  // of gets the live replica with the highest applied sequence as primary (its primary_term goes
  // up), or is marked lost when none is left; it is dropped from every shard's copies; and every
  // shard left with fewer than replication_factor copies gets a copy catching up on a live server
  // that holds none of it (other hosts first, then the least loaded). The timer thread calls
  // this every heartbeat_interval; tests with a fake clock call it after advancing time.
  void Sweep();

  // --- Shard map ---

  // Waits until the shard map exists (num_servers servers registered) with version >= min_version
  // and returns it. At `deadline`: UNAVAILABLE "shard map not ready: K of N servers registered"
  // (or naming the version when the map exists but is older). UNAVAILABLE on Shutdown.
  absl::StatusOr<rpc::ShardMap> GetShardMap(uint64_t min_version, absl::Time deadline);
  WaitId AsyncGetShardMap(uint64_t min_version, absl::Time deadline,
                          std::function<void(absl::StatusOr<rpc::ShardMap>)> done);

  // --- Clocks ---

  // Records that worker `member_id` has finished step `clock` (a worker's clock never goes back:
  // the largest reported is kept) and counts as a heartbeat. Returns the clocks after the report.
  // NOT_FOUND for an unknown member, FAILED_PRECONDITION if it is not a worker, INVALID_ARGUMENT
  // for a negative clock.
  absl::StatusOr<rpc::ClockState> ReportClock(uint32_t member_id, int64_t clock);

  // min_clock: the slowest rank's clock, -1 until all num_workers ranks registered and reported;
  // max_clock: the fastest rank's, -1 before any report.
  rpc::ClockState Clocks() const;

  // Waits until min_clock >= clock and returns the clocks; DEADLINE_EXCEEDED at `deadline`,
  // UNAVAILABLE on Shutdown.
  absl::StatusOr<rpc::ClockState> WaitClock(int64_t clock, absl::Time deadline);
  WaitId AsyncWaitClock(int64_t clock, absl::Time deadline,
                        std::function<void(absl::StatusOr<rpc::ClockState>)> done);

  // --- Rendezvous store ---

  // Sets (or overwrites) `key`. INVALID_ARGUMENT for an empty key; RESOURCE_EXHAUSTED for a key
  // over kMaxKeyBytes or a value over kMaxValueBytes (or over what the store takes:
  // StateStore::max_value_bytes).
  absl::Status KvSet(std::string key, std::string value);

  // The values of `keys`, in order. NOT_FOUND naming the first missing key; INVALID_ARGUMENT for
  // an empty key.
  absl::StatusOr<std::vector<std::string>> KvGet(const std::vector<std::string>& keys) const;

  // Waits until every key is set and returns the values, in order. DEADLINE_EXCEEDED naming the
  // missing keys at `deadline`; INVALID_ARGUMENT for an empty key (at once); UNAVAILABLE on
  // Shutdown.
  absl::StatusOr<std::vector<std::string>> KvWait(std::vector<std::string> keys,
                                                  absl::Time deadline);
  WaitId AsyncKvWait(std::vector<std::string> keys, absl::Time deadline,
                     std::function<void(absl::StatusOr<std::vector<std::string>>)> done);

  // Removes every key that starts with `prefix` (a checkpoint's workers' states once written).
  void KvErasePrefix(absl::string_view prefix);

  // --- Checkpoints ---

  // Sets the checkpoint whose workers' state clocks answers ask for (ClockState.checkpoint), or
  // clears it (nullopt).
  void SetCheckpointNotice(std::optional<rpc::CheckpointNotice> notice);

  // --- Waits ---

  // Ends the wait `id` with CANCELLED if it is still pending; otherwise does nothing.
  void CancelWait(WaitId id);

  // The number of pending waits.
  size_t NumPendingWaits() const;

  // --- Operations ---

  // Members (by member_id, liveness as of now; workers with their ends and clocks), the shard map
  // (empty before it exists), clocks, the job's name, its failure, and in SYNC training the step
  // every shard applied (once every primary reported one).
  rpc::ClusterStatus Status();

  // Ends every pending wait with UNAVAILABLE, makes later waits end so at once, and joins the
  // timer thread. Everything else keeps working. Idempotent.
  void Shutdown();

 private:
  explicit Coordinator(CoordinatorOptions options);

  void TimerLoop();

  // Adds a wait (MakeWaitPoll); `decide` is called under mu_ with whether the deadline has passed
  // and returns the answer, or nullopt (only before the deadline) when there is none yet.
  template <typename T>
  WaitId AddWaiter(absl::Time deadline,
                   std::function<std::optional<absl::StatusOr<T>>(bool expired)> decide,
                   std::function<void(absl::StatusOr<T>)> done);

  // Marks members not seen for dead_after as dead (failing dead servers over) and expires waiters
  // at `now`.
  void SweepLocked(absl::Time now, Completions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks a member alive and seen at `now`; heals and bumps the map when a server comes back.
  void TouchLocked(Membership::Member* member, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bumps the map's version, refreshes its server list and writes the state (no-op before the
  // map exists).
  void MapChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  rpc::ClockState ClocksLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  rpc::RegisterResponse ResponseFor(const Membership::Member& member) const;
  // Writes the members, slots and map to the store (when they changed since the last write, or
  // when `force`).
  void PersistLocked(bool force = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves a worker rank's clock, when the store keeps clocks.
  void SaveClockLocked(int32_t rank, int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports a store error (once).
  void StoreFailedLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues on_job_failed in `out` when the job has failed since the last call.
  void JobFailedLocked(Completions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const config::Job job_;
  const absl::Duration heartbeat_interval_;
  Clock* const clock_;
  StateStore* const store_;
  const uint64_t job_digest_;
  // Sync jobs restored from a checkpoint cut at step t: t; 0 otherwise.
  const int64_t start_step_;
  const std::function<void(const rpc::JobFailure&)> on_job_failed_;
  const std::function<void(const absl::Status&)> on_store_failed_;

  mutable absl::Mutex mu_;
  absl::CondVar timer_cv_;  // signalled on shutdown and when a waiter with an earlier deadline
                            // than timer_wake_at_ arrives
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time timer_wake_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  Membership membership_ ABSL_GUARDED_BY(mu_);
  Placement placement_ ABSL_GUARDED_BY(mu_);
  RendezvousStore kv_ ABSL_GUARDED_BY(mu_);
  std::optional<rpc::CheckpointNotice> checkpoint_notice_ ABSL_GUARDED_BY(mu_);
  // What the store holds: the map version and next member id of the last state written.
  uint64_t persisted_version_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t persisted_next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool store_failed_ ABSL_GUARDED_BY(mu_) = false;
  // When the sweep last ran, in real time (InfinitePast before the first).
  absl::Time last_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // A member's `left` changed since the last write to the store.
  bool members_changed_ ABSL_GUARDED_BY(mu_) = false;
  WaitList waits_ ABSL_GUARDED_BY(mu_);

  // Serialises Shutdown's join; never held with mu_.
  absl::Mutex shutdown_mu_;
  std::thread timer_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_COORDINATOR_H_

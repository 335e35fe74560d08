// Which coordinator of a job leads: an election in etcd under an etcd lease, as etcd's own
// election recipe does it. Every coordinator holds a lease, which it renews a few times per TTL,
// and announces itself under P + "candidates/" + ADDRESS with it. The leader is the one that
// created P + "leader" (its address, under its lease): a transaction creates the key only if it
// does not exist. When the leader's process dies, or its host or network is cut off, its lease
// ends within the TTL, etcd deletes the key, and a standby that polls it creates it in turn.
//
// A leader stops leading on its own before etcd could have let another take over: CheckLeading
// fails once the lease may have ended by this process's clock (the last renewal's sending time
// plus the TTL etcd granted, less a margin), however long its threads were stopped (SIGSTOP, a
// long pause); and every write of the state is conditional on the leader key (etcd_state_store.h),
// so a deposed leader's writes are refused. Not leading is final for a term: the coordinator
// builds its state again from etcd when it wins a later one.
//
// The TTL: etcd grants no lease shorter than 1.5 election timeouts (2 s with etcd's default
// 1 s election timeout, 1 s with a 500 ms one), and the TTL bounds how long a job has no
// coordinator after the leader dies. 2 s (the default) keeps a takeover within about 2.5 s while
// leaving the leader room for a renewal lost to an etcd member's failure (renewals every TTL/4,
// each with a 1/4 TTL deadline, so three may fail before the lease is at risk).
#ifndef PS_SERVER_COORDINATOR_LEADER_ELECTION_H_
#define PS_SERVER_COORDINATOR_LEADER_ELECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/etcd_client.h"

namespace ps {
namespace coordinator {

struct LeaderElectionOptions {
  // The job's key prefix (ends with '/'). Required.
  std::string prefix;
  // This coordinator's address (host:port, as members dial it). Required.
  std::string address;
  // The lease's time to live, in seconds. Default 2; >= 1 (etcd may grant more).
  int64_t lease_ttl_s = 2;
  // How often a standby reads the leader key. Default 100 ms; > 0.
  absl::Duration poll = absl::Milliseconds(100);
};

// A LeaderElection is one coordinator's candidacy. Thread-safe.
class LeaderElection {
 public:
  // One term of leadership.
  struct Term {
    // The revision at which etcd created the leader key: the state store's writes compare it.
    int64_t leader_revision = 0;
    // The terms of the job so far, this one included.
    int64_t number = 0;
    absl::Time took_office;
  };

  // Starts the lease-renewing thread. INVALID_ARGUMENT for options out of their ranges. `etcd`
  // is not owned and must outlive the election.
  static absl::StatusOr<std::unique_ptr<LeaderElection>> Create(EtcdClient* etcd,
                                                                LeaderElectionOptions options);
  // Stop(), then revokes the lease (a leader's resignation: a standby takes over at once).
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // Blocks until this coordinator leads, and returns its term; CANCELLED after Stop(). While it
  // waits it keeps a lease (a new one when the last expired) and its candidate key, and tracks
  // the leader (leader()). etcd being unreachable only makes it wait.
  absl::StatusOr<Term> Campaign();

  // OK while this coordinator surely leads (see the file comment); UNAVAILABLE
  // "coordinator ADDRESS is no longer the leader" (or "... is a standby") otherwise.
  absl::Status CheckLeading() const;

  // Ends this term now: the lease is revoked, so that a standby takes over at once, and a new
  // lease is taken for the next Campaign. `why` is kept for messages.
  void Resign(const absl::Status& why);

  // The leader's address as last seen (this one's while it leads); empty when none is known.
  std::string leader() const;
  // The addresses of every coordinator campaigning now (this one included), read from etcd.
  absl::StatusOr<std::vector<std::string>> Candidates();
  // The lease's TTL as granted, in seconds (0 before any).
  int64_t lease_ttl_s() const;

  // Ends Campaign (CANCELLED) and the renewing thread. Idempotent.
  void Stop();

 private:
  LeaderElection(EtcdClient* etcd, LeaderElectionOptions options);

  // Renews the lease every TTL/4 until Stop.
  void RenewLoop();
  // A lease with its candidate key, when there is none. Without mu_.
  absl::Status EnsureLease();
  std::string LeaderKey() const { return options_.prefix + "leader"; }

  EtcdClient* const etcd_;
  const LeaderElectionOptions options_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_id_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none
  int64_t granted_ttl_s_ ABSL_GUARDED_BY(mu_) = 0;
  // The lease surely lives until then, by this process's clock.
  absl::Time lease_valid_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status last_renewal_ ABSL_GUARDED_BY(mu_);  // for messages
  absl::Duration last_renewal_took_ ABSL_GUARDED_BY(mu_);
  std::string leader_ ABSL_GUARDED_BY(mu_);
  std::thread renewer_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_LEADER_ELECTION_H_

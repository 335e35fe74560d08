// The coordinators' state in etcd (state_store.h's StateStore), shared by every coordinator of a
// job: the leader writes it, a standby that takes over loads it. Every write is a transaction
// that holds only while this coordinator's leadership key (leader_election.h) is the one it
// created, so a deposed leader cannot write: its writes fail FAILED_PRECONDITION "no longer
// leader" and change nothing.
//
// Keys, under the job's prefix P (e.g. "/ps/quickstart/"):
//   P + "state"          the state record (rpc::CoordinatorState), replaced whole;
//   P + "kv/" + KEY      the rendezvous store;
//   P + "leader", P + "candidates/" + ADDRESS, P + "terms"   the election's (leader_election.h).
// Clocks are not kept (keeps_clocks() is false): a new leader learns them from the workers'
// heartbeats.
#ifndef PS_SERVER_COORDINATOR_ETCD_STATE_STORE_H_
#define PS_SERVER_COORDINATOR_ETCD_STATE_STORE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/coordinator/etcd_client.h"
#include "server/coordinator/state_store.h"

namespace ps {
namespace coordinator {

// An EtcdStateStore is one job's state under `prefix` in etcd, written on behalf of the leader
// whose key `leader_key` etcd created at revision `leader_revision`. Thread-compatible (the
// coordinator calls it under its lock).
class EtcdStateStore final : public StateStore {
 public:
  // etcd's default limit on a request is 1.5 MiB; a value leaves room for the rest of the txn.
  static constexpr size_t kMaxValueBytes = 1 << 20;

  // `etcd` is not owned and must outlive the store.
  // A write may take up to `write_timeout` in all (it holds the coordinator's lock meanwhile);
  // the lease's TTL is a good bound: a leader that cannot write for that long cannot renew its
  // lease either.
  EtcdStateStore(EtcdClient* etcd, std::string prefix, std::string leader_key,
                 int64_t leader_revision, absl::Duration write_timeout = absl::Seconds(2));

  // "etcd ENDPOINTS, prefix P".
  std::string location() const override;
  // The state record and the rendezvous keys under the prefix; nullopt without a state record.
  // DATA_LOSS when the record does not parse; etcd's errors (UNAVAILABLE when no member
  // answers).
  absl::StatusOr<std::optional<SavedCoordinator>> Load() const override;
  // Each: OK once etcd committed it; FAILED_PRECONDITION "no longer leader" when the leader key
  // is gone or another's (nothing written); UNAVAILABLE when etcd cannot be reached.
  absl::Status SaveState(const rpc::CoordinatorState& state) override;
  // Not kept: returns OK and writes nothing (keeps_clocks() is false).
  absl::Status SaveClock(int32_t rank, int64_t clock) override;
  absl::Status SaveKv(absl::string_view key, absl::string_view value) override;
  absl::Status EraseKvPrefix(absl::string_view prefix) override;

  bool keeps_clocks() const override { return false; }
  size_t max_value_bytes() const override { return kMaxValueBytes; }
  bool shared() const override { return true; }

 private:
  // Runs `ops` if the leader key is still ours.
  absl::Status WriteIfLeader(etcd::TxnRequest txn);

  EtcdClient* const etcd_;
  const std::string prefix_;
  const std::string leader_key_;
  const int64_t leader_revision_;
  const absl::Duration write_timeout_;
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_ETCD_STATE_STORE_H_

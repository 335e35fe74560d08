// The seam under the coordinator's durable state: what a coordinator restarted (or a standby
// taking over) needs to carry the job on. One implementation keeps it in RocksDB in the
// coordinator's --data_dir (coordinator_store.h), one in etcd, where several coordinators share
// the state and only the leader may write (etcd_state_store.h); MemoryStateStore keeps it in
// memory (tests).
//
// What is durable, and nothing else:
//  - the state record (rpc::CoordinatorState): the job's digest, member ids handed out, members
//    (role, rank, address, left), the server and worker slots, the shard map with its version and
//    primary terms, whether it was built, the failover count, and the job's failure once it failed;
//  - each worker rank's clock (the largest step it reported), where the store keeps_clocks();
//  - the rendezvous key-value store.
// Not kept: liveness and heartbeat times (a restarted coordinator counts every member it knew as
// alive and heard from at the start), shard progress (the next heartbeats report it again),
// pending waits and the checkpoint notice.
//
// Writes and leadership. Every write may fail; the coordinator keeps serving from memory then and
// reports the first failure (a restart would lose what was not written). An implementation whose
// writes are conditional on a lease or a revision (etcd_state_store.h: a transaction comparing
// the leader key's creation revision) answers a write it refused because this coordinator no
// longer leads with FAILED_PRECONDITION "no longer leader"; nothing of that write is applied. A
// coordinator on a shared() store stops answering at its first failed write
// (CoordinatorOptions::on_store_failed). A write that returns OK is applied whole: the state
// record is replaced atomically, never merged.
#ifndef PS_SERVER_COORDINATOR_STATE_STORE_H_
#define PS_SERVER_COORDINATOR_STATE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"

namespace ps {
namespace coordinator {

// What a state store holds.
struct SavedCoordinator {
  rpc::CoordinatorState state;
  std::map<int32_t, int64_t> clocks;      // by worker rank
  std::map<std::string, std::string> kv;  // the rendezvous store
};

// A StateStore keeps one job's coordinator state (see the file comment). Implementations are at
// least thread-compatible: the coordinator calls them under its own lock, one call at a time.
class StateStore {
 public:
  virtual ~StateStore() = default;

  // Where the state lives, for messages: a folder, an etcd prefix.
  virtual std::string location() const = 0;

  // What the store holds: nullopt when it holds no state record yet (clocks and keys without a
  // state record are ignored). DATA_LOSS when a record does not parse; UNAVAILABLE or INTERNAL
  // when the store cannot be read.
  virtual absl::StatusOr<std::optional<SavedCoordinator>> Load() const = 0;

  // Replaces the state record. OK once it is durable; FAILED_PRECONDITION "no longer leader" for
  // a conditional store whose condition failed (nothing written); INTERNAL or UNAVAILABLE when the
  // store failed.
  virtual absl::Status SaveState(const rpc::CoordinatorState& state) = 0;

  // Replaces worker `rank`'s clock. Outcomes as SaveState.
  virtual absl::Status SaveClock(int32_t rank, int64_t clock) = 0;

  // Sets (or overwrites) rendezvous key `key`. Outcomes as SaveState.
  virtual absl::Status SaveKv(absl::string_view key, absl::string_view value) = 0;

  // Removes every rendezvous key starting with `prefix` (all of them or none). Outcomes as
  // SaveState.
  virtual absl::Status EraseKvPrefix(absl::string_view prefix) = 0;

  // Whether SaveClock keeps clocks. A store that does not (etcd: a write per step and worker
  // would cost every sync step a consensus round) is not given them, and a coordinator taking
  // over from it rebuilds the clocks from the workers' heartbeats (HeartbeatRequest.clock).
  virtual bool keeps_clocks() const { return true; }

  // The largest rendezvous value SaveKv takes; larger values are refused before anything
  // changes (RESOURCE_EXHAUSTED from Coordinator::KvSet).
  virtual size_t max_value_bytes() const { return SIZE_MAX; }

  // Whether several coordinators share the store, one leading under a lease: a coordinator whose
  // write fails must then stop answering at once (CoordinatorOptions::on_store_failed), since
  // what it holds in memory may no longer be the job's state.
  virtual bool shared() const { return false; }
};

// A StateStore in memory: it lives as long as the object, so a coordinator re-created on the same
// object carries the job on as one restarted on the same data_dir would. Never fails. Thread-safe.
class MemoryStateStore final : public StateStore {
 public:
  MemoryStateStore() = default;
  MemoryStateStore(const MemoryStateStore&) = delete;
  MemoryStateStore& operator=(const MemoryStateStore&) = delete;

  // "memory".
  std::string location() const override;
  // Never fails.
  absl::StatusOr<std::optional<SavedCoordinator>> Load() const override;
  // Each always returns OK.
  absl::Status SaveState(const rpc::CoordinatorState& state) override;
  absl::Status SaveClock(int32_t rank, int64_t clock) override;
  absl::Status SaveKv(absl::string_view key, absl::string_view value) override;
  absl::Status EraseKvPrefix(absl::string_view prefix) override;

 private:
  mutable absl::Mutex mu_;
  bool has_state_ ABSL_GUARDED_BY(mu_) = false;
  SavedCoordinator saved_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_STATE_STORE_H_

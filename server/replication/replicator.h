// The primary's side of replication: streams the records of the shards this server is primary of
// to their other copies, in order, and tells pushes when their records are safe.
//
// Per destination server there is one queue and at most one Replicate call in flight: records
// that arrive while a call is out go together in the next one, so a busy shard's records are
// batched and a quiet one's go at once. A copy that joins gets a snapshot of the shard first, cut
// under the shard's lock so that the stream continues exactly where the snapshot ends.
#ifndef PS_SERVER_REPLICATION_REPLICATOR_H_
#define PS_SERVER_REPLICATION_REPLICATOR_H_

#include <grpcpp/security/credentials.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"
#include "server/replication/replicate_wire.h"
#include "server/shard/shard.h"

namespace ps {
namespace server {

// Sends one batch of records to a server: `request` is a ReplicateRequest's bytes
// (FrameReplicateRequest). Implementations must be thread-safe; `done` is called exactly once, on
// any thread, and may call back into the Replicator.
class ReplicationTransport {
 public:
  virtual ~ReplicationTransport() = default;
  virtual void Send(const std::string& address, grpc::ByteBuffer request,
                    std::function<void(absl::StatusOr<rpc::ReplicateResponse>)> done) = 0;
};

// The copy's side of a Replicate call, once its bytes are read (ReplicateRequestReader): applies
// `records`, in order, to the copies that `find(shard)` returns (nullptr: this server holds no
// copy of it) and adds one ShardAck per shard of the batch to `response`: APPLIED, NOT_HELD,
// NEEDS_SNAPSHOT (a record out of sequence) or REFUSED (a malformed record), with the copy's
// applied sequence, snapshot and completeness. After a record of a shard fails, the shard's later
// records of the batch are skipped.
void ApplyReplicatedRecords(absl::Span<const ReplicatedRecord> records,
                            absl::FunctionRef<Shard*(uint32_t shard)> find,
                            rpc::ReplicateResponse* response);

// ApplyReplicatedRecords over the ReplicateRequest in `request` (its rows read in place,
// ReplicateRequestReader). INVALID_ARGUMENT, with nothing applied and *response unchanged, when
// the bytes are not a ReplicateRequest.
absl::Status ApplyReplicateRequest(const grpc::ByteBuffer& request,
                                   absl::FunctionRef<Shard*(uint32_t shard)> find,
                                   rpc::ReplicateResponse* response);

// A ReplicationTransport over gRPC: one channel per address, kept.
// `credentials` null: plaintext.
std::unique_ptr<ReplicationTransport> NewGrpcReplicationTransport(
    absl::Duration timeout, std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

// One copy of a shard that receives its records.
struct ReplicaTarget {
  uint32_t server_id = 0;
  std::string address;
  // Live replicas hold back pushes under SYNC replication; copies catching up do not.
  bool live = true;

  bool operator==(const ReplicaTarget& o) const {
    return server_id == o.server_id && address == o.address && live == o.live;
  }
};

// A Replicator streams shard records to copies. Thread-safe.
class Replicator {
 public:
  struct Options {
    // This server's id, sent with every batch.
    uint32_t server_id = 0;
    // SYNC replication: WhenReplicated waits for every live copy. False (ASYNC): it answers at
    // once.
    bool sync = true;
    // A batch is closed at about this many bytes of records (it may hold one larger record).
    size_t max_batch_bytes = 4 << 20;
    // Calls in flight per destination: a shard's records always take the same lane (a hash of
    // the shard), one call at a time, so they arrive in order while other shards' records overlap.
    uint32_t lanes = 4;
    // Records of a snapshot are cut at about this many bytes.
    size_t snapshot_record_bytes = 1 << 20;
    // After a failed call, the next try waits this long.
    absl::Duration retry_after = absl::Milliseconds(20);
    // Called (without the Replicator's lock) when a destination cannot be reached, so that the
    // coordinator can check it at once. May be empty.
    std::function<void(uint32_t server_id, const absl::Status& error)> on_unreachable;
    // Called (without the lock) when a copy catching up has become caught up (see Lags), so
    // that the coordinator can hear of it at once. May be empty.
    std::function<void()> on_caught_up;
  };

  // Holds back, while it lives, the sends of the records that this thread's shards append
  // (their changes are made on the calling thread), and sends them when it ends: a push's records
  // then leave together, one call per lane, instead of the first alone and the rest after its
  // answer. Corks may nest; a null replicator makes it do nothing. Not movable.
  class Cork {
   public:
    explicit Cork(Replicator* replicator);
    ~Cork();
    Cork(const Cork&) = delete;
    Cork& operator=(const Cork&) = delete;

   private:
    friend class Replicator;
    Replicator* const replicator_;
    Cork* const outer_;
    std::vector<uint64_t> lanes_;  // lanes with records held back, by LaneKey
  };

  // `transport` is not owned and must outlive the Replicator.
  Replicator(Options options, ReplicationTransport* transport);
  ~Replicator();

  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // Makes `targets` the copies of `shard` (this server is its primary; not owned, must stay alive
  // until RemoveShard or destruction). Copies not targeted before get a snapshot, then the
  // stream; copies no longer named stop receiving, and pushes waiting on them only are released.
  // Sets the shard's record sink. An empty `targets` keeps the shard without records.
  // The new copies' snapshots are cut under the shard's lock, which holds back its pushes for as
  // long: with `snapshots`, that work is added there instead, for the caller to run once it has
  // released locks of its own that other requests need (the shard must stay alive until then).
  void SetTargets(Shard* shard, std::vector<ReplicaTarget> targets,
                  std::vector<std::function<void()>>* snapshots = nullptr);

  // Stops replicating `shard` (this server is no longer its primary) and clears its sink. Pushes
  // still waiting for its copies get UNAVAILABLE: the client retries them where the shard is now.
  void RemoveShard(Shard* shard);

  // Calls done(OK) once every copy of each shard that pushes wait for (live replicas, and copies
  // catching up that applied their snapshot) has acknowledged that sequence (at once under ASYNC,
  // or for a shard without such copies); done(UNAVAILABLE) if the
  // Replicator shuts down first. `done` runs without the lock, on the calling thread or a
  // transport thread, and must not block.
  void WhenReplicated(std::vector<std::pair<uint32_t, uint64_t>> sequences,
                      std::function<void(absl::Status)> done);

  // The lag of each target of `shard_id` (records and bytes queued or in flight, age of the
  // oldest), and whether it is caught up (holds every push acknowledged to a client: the
  // coordinator makes a copy catching up a replica only then); empty when it has none.
  std::vector<rpc::ReplicaLag> Lags(uint32_t shard_id) const;

  // Fails every wait with UNAVAILABLE, sends nothing more, waits for calls in flight and for the
  // handling of their answers; the replicator may be destroyed after it. Idempotent.
  void Shutdown();

 private:
  struct Pending {
    uint32_t shard;
    uint64_t sequence;
    size_t bytes;
    absl::Time queued;
    // Shared by every copy's queue and by the calls that carry it.
    SharedRecord record;
  };

  // One lane to a destination server (see Options::lanes).
  struct Peer {
    uint64_t key = 0;  // in peers_
    uint32_t server_id = 0;
    std::string address;
    std::deque<Pending> queue;  // not yet sent
    // Sent, not yet answered; they go back to the queue when they must be sent again.
    std::vector<Pending> in_flight;
    bool busy = false;  // a call is out or a retry is scheduled
    absl::Time retry_at = absl::InfinitePast();
  };

  // What the primary knows of one copy of one shard.
  struct TargetState {
    ReplicaTarget target;
    // The snapshot sent to the copy (0: none yet) and the sequence it was cut at.
    uint64_t snapshot_id = 0;
    uint64_t snapshot_sequence = 0;
    // The newest sequence the copy acknowledged, counted only from acknowledgements that name
    // snapshot_id (a restarted server's earlier copy does not count).
    uint64_t acked = 0;
    // Pushes wait for this copy (SYNC): a live replica always; a copy catching up once it applied
    // its snapshot. waited_from: the shard's newest sequence when that began; once the copy
    // acknowledged it, it holds every push the primary acknowledged (caught up).
    bool waited = false;
    uint64_t waited_from = 0;
  };

  struct ShardTargets {
    Shard* shard = nullptr;
    std::vector<TargetState> targets;
    // The sequence of the shard's newest record.
    uint64_t last_sequence = 0;
  };

  // The state of `server_id`'s copy of `shard`, or null.
  TargetState* FindTargetLocked(uint32_t shard, uint32_t server_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Waiter {
    std::vector<std::pair<uint32_t, uint64_t>> sequences;
    std::function<void(absl::Status)> done;
  };

  using Completions = std::vector<std::function<void()>>;

  // The sink of `shard_id` (called under the shard's lock).
  void Append(uint32_t shard_id, RecordOut&& record);
  // Queues a record for `peer`; a call to start is added to `sends`, run after the lock, unless
  // `cork` (then the cork sends it when it ends).
  void AppendLocked(Peer* peer, uint32_t shard_id, SharedRecord record, Completions* sends,
                    Cork* cork = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cork of this thread on this replicator, or null.
  Cork* CurrentCork();
  // A cork's end: sends what it held back.
  void Uncork(Cork* cork);
  // The key of the lane of `shard`'s records to `server_id` in peers_.
  uint64_t LaneKey(uint32_t server_id, uint32_t shard) const {
    // Mixed: a server's primaries are often every num_servers-th shard.
    return (uint64_t{server_id} << 32) | ((shard * 2654435761u) >> 16) % options_.lanes;
  }
  Peer* PeerLocked(const ReplicaTarget& target, uint32_t shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the peer's next batch if it is idle and has one; the call that sends it is added to
  // `sends`, to be run without the lock.
  void MaybeSendLocked(Peer* peer, Completions* sends) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnResponse(uint64_t lane, absl::StatusOr<rpc::ReplicateResponse> response);
  // Snapshots `shard` to `server_id` and makes it a target (the shard's lock is taken).
  void SendSnapshot(Shard* shard, const ReplicaTarget& target);
  bool ReplicatedLocked(const Waiter& waiter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(Completions* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetryLoop();

  // Constant after construction.
  const Options options_;
  ReplicationTransport* const transport_;

  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  int calls_in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // sent, and OnResponse not yet finished
  std::map<uint64_t, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);  // by LaneKey
  absl::flat_hash_map<uint32_t, ShardTargets> shards_ ABSL_GUARDED_BY(mu_);
  // Targets of each shard that receive its live records (after their snapshot).
  absl::flat_hash_map<uint32_t, std::vector<uint32_t>> attached_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_snapshot_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::thread retry_thread_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_REPLICATION_REPLICATOR_H_

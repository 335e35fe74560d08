#include "server/replication/replicator.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc_status.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace server {
namespace {

class GrpcReplicationTransport : public ReplicationTransport {
 public:
  GrpcReplicationTransport(absl::Duration timeout,
                           std::shared_ptr<grpc::ChannelCredentials> credentials)
      : timeout_(timeout), credentials_(std::move(credentials)) {}

  void Send(const std::string& address, grpc::ByteBuffer request,
            std::function<void(absl::StatusOr<rpc::ReplicateResponse>)> done) override {
    grpc::GenericStub* stub = StubFor(address);
    struct Call {
      grpc::ClientContext context;
      grpc::ByteBuffer request;
      grpc::ByteBuffer response;
      std::function<void(absl::StatusOr<rpc::ReplicateResponse>)> done;
    };
    auto* call = new Call;
    call->request = std::move(request);
    call->done = std::move(done);
    call->context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoMilliseconds(timeout_));
    stub->UnaryCall(&call->context, "/ps.rpc.ParameterServer/Replicate", grpc::StubOptions(),
                    &call->request, &call->response, [call](grpc::Status status) {
                      std::unique_ptr<Call> owned(call);
                      rpc::ReplicateResponse response;
                      if (status.ok()) {
                        status = grpc::SerializationTraits<rpc::ReplicateResponse>::Deserialize(
                            &owned->response, &response);
                      }
                      if (status.ok()) {
                        owned->done(std::move(response));
                      } else {
                        owned->done(FromGrpcStatus(status));
                      }
                    });
  }

 private:
  grpc::GenericStub* StubFor(const std::string& address) {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<grpc::GenericStub>& stub = stubs_[address];
    if (stub == nullptr) {
      // Reconnects quickly to a restarted server; large windows and write buffers for batches
      // of megabytes.
      grpc_util::ChannelOptions options = grpc_util::ReplicationChannelOptions();
      options.credentials = credentials_;
      stub = std::make_unique<grpc::GenericStub>(grpc_util::NewChannel(address, options));
    }
    return stub.get();
  }

  const absl::Duration timeout_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<grpc::GenericStub>> stubs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status ApplyReplicateRequest(const grpc::ByteBuffer& request,
                                   absl::FunctionRef<Shard*(uint32_t shard)> find,
                                   rpc::ReplicateResponse* response) {
  ReplicateRequestReader reader;
  const absl::Status read = reader.Parse(request);
  if (!read.ok()) return read;
  ApplyReplicatedRecords(reader.records(), find, response);
  return absl::OkStatus();
}

void ApplyReplicatedRecords(absl::Span<const ReplicatedRecord> records,
                            absl::FunctionRef<Shard*(uint32_t shard)> find,
                            rpc::ReplicateResponse* response) {
  // Index of each shard's ack in the response.
  absl::flat_hash_map<uint32_t, int> acks;
  for (const ReplicatedRecord& replicated : records) {
    const rpc::ShardRecord& record = replicated.record;
    auto [it, first] = acks.try_emplace(record.shard(), response->acks_size());
    rpc::ShardAck* ack;
    Shard* shard = find(record.shard());
    if (first) {
      ack = response->add_acks();
      ack->set_shard(record.shard());
      if (shard == nullptr) ack->set_result(rpc::ShardAck::NOT_HELD);
    } else {
      ack = response->mutable_acks(it->second);
    }
    if (shard == nullptr || ack->result() != rpc::ShardAck::APPLIED) continue;
    const absl::Status applied = record.has_rows()
                                     ? shard->ApplyRowsRecord(record, replicated.values)
                                     : shard->ApplyRecord(record);
    if (absl::IsAborted(applied)) {
      ack->set_result(rpc::ShardAck::NEEDS_SNAPSHOT);
      ack->set_error(std::string(applied.message()));
    } else if (!applied.ok()) {
      ack->set_result(rpc::ShardAck::REFUSED);
      ack->set_error(std::string(applied.message()));
    }
  }
  for (rpc::ShardAck& ack : *response->mutable_acks()) {
    if (Shard* shard = find(ack.shard())) {
      ack.set_applied_sequence(shard->applied_sequence());
      ack.set_snapshot_id(shard->snapshot_id());
      ack.set_complete(shard->complete());
    }
  }
}

std::unique_ptr<ReplicationTransport> NewGrpcReplicationTransport(
    absl::Duration timeout, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return std::make_unique<GrpcReplicationTransport>(timeout, std::move(credentials));
}

namespace {
// The innermost cork of this thread (on any replicator).
thread_local Replicator::Cork* current_cork = nullptr;
}  // namespace

Replicator::Cork::Cork(Replicator* replicator) : replicator_(replicator), outer_(current_cork) {
  if (replicator_ != nullptr) current_cork = this;
}

Replicator::Cork::~Cork() {
  if (replicator_ == nullptr) return;
  current_cork = outer_;
  replicator_->Uncork(this);
}

Replicator::Cork* Replicator::CurrentCork() {
  for (Cork* cork = current_cork; cork != nullptr; cork = cork->outer_) {
    if (cork->replicator_ == this) return cork;
  }
  return nullptr;
}

void Replicator::Uncork(Cork* cork) {
  if (cork->lanes_.empty()) return;
  Completions sends;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const uint64_t lane : cork->lanes_) {
      const auto it = peers_.find(lane);
      if (it != peers_.end() && it->second->retry_at <= now) {
        MaybeSendLocked(it->second.get(), &sends);
      }
    }
  }
  for (auto& send : sends) send();
}

Replicator::Replicator(Options options, ReplicationTransport* transport)
    : options_(std::move(options)), transport_(transport) {
  retry_thread_ = std::thread([this] { RetryLoop(); });
}

Replicator::~Replicator() { Shutdown(); }

void Replicator::Shutdown() {
  std::vector<Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      shutting_down_ = true;
      waiters.swap(waiters_);
    }
  }
  for (Waiter& w : waiters) w.done(absl::UnavailableError("the server is shutting down"));
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_in_flight_ == 0; };
    mu_.Await(absl::Condition(&idle));
  }
  if (retry_thread_.joinable()) retry_thread_.join();
}

Replicator::Peer* Replicator::PeerLocked(const ReplicaTarget& target, uint32_t shard) {
  std::unique_ptr<Peer>& peer = peers_[LaneKey(target.server_id, shard)];
  if (peer == nullptr) {
    peer = std::make_unique<Peer>();
    peer->key = LaneKey(target.server_id, shard);
    peer->server_id = target.server_id;
  }
  peer->address = target.address;
  return peer.get();
}

Replicator::TargetState* Replicator::FindTargetLocked(uint32_t shard, uint32_t server_id) {
  const auto it = shards_.find(shard);
  if (it == shards_.end()) return nullptr;
  for (TargetState& t : it->second.targets) {
    if (t.target.server_id == server_id) return &t;
  }
  return nullptr;
}

void Replicator::SetTargets(Shard* shard, std::vector<ReplicaTarget> targets,
                            std::vector<std::function<void()>>* snapshots) {
  const uint32_t id = shard->id();
  std::vector<ReplicaTarget> added;
  Completions released;
  {
    absl::MutexLock lock(&mu_);
    ShardTargets& entry = shards_[id];
    entry.shard = shard;
    std::vector<TargetState> next;
    for (const ReplicaTarget& t : targets) {
      PeerLocked(t, id);
      const auto old =
          std::find_if(entry.targets.begin(), entry.targets.end(),
                       [&](const TargetState& o) { return o.target.server_id == t.server_id; });
      // A copy that was live and is now catching up, or moved, is a new copy (a server that
      // restarted): it starts from a snapshot.
      const bool same = old != entry.targets.end() && old->target.address == t.address &&
                        !(old->target.live && !t.live);
      TargetState state = same ? *old : TargetState();
      state.target = t;
      if (t.live && !state.waited) {
        state.waited = true;
        state.waited_from = entry.last_sequence;
      }
      if (!same) added.push_back(t);
      next.push_back(state);
    }
    // Copies that are gone, or start again, stop receiving this shard's records.
    std::vector<uint32_t>& attached = attached_[id];
    attached.erase(
        std::remove_if(
            attached.begin(), attached.end(),
            [&](uint32_t server) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
              const bool kept =
                  std::none_of(added.begin(), added.end(),
                               [&](const ReplicaTarget& a) { return a.server_id == server; }) &&
                  std::any_of(targets.begin(), targets.end(),
                              [&](const ReplicaTarget& t) { return t.server_id == server; });
              if (!kept) {
                auto& q = peers_[LaneKey(server, id)]->queue;
                q.erase(std::remove_if(q.begin(), q.end(),
                                       [&](const Pending& p) { return p.shard == id; }),
                        q.end());
              }
              return !kept;
            }),
        attached.end());
    entry.targets = std::move(next);
    ReleaseLocked(&released);
  }
  shard->SetRecordSink([this, id](RecordOut&& record) { Append(id, std::move(record)); });
  for (const ReplicaTarget& t : added) {
    if (snapshots != nullptr) {
      snapshots->push_back([this, shard, t] { SendSnapshot(shard, t); });
    } else {
      SendSnapshot(shard, t);
    }
  }
  for (auto& fn : released) fn();
}

void Replicator::RemoveShard(Shard* shard) {
  shard->SetRecordSink(nullptr);
  Completions released;
  {
    absl::MutexLock lock(&mu_);
    const uint32_t id = shard->id();
    shards_.erase(id);
    attached_.erase(id);
    for (auto& [server, peer] : peers_) {
      auto& q = peer->queue;
      q.erase(std::remove_if(q.begin(), q.end(), [&](const Pending& p) { return p.shard == id; }),
              q.end());
    }
    // Pushes not yet safe on the copies must be retried where the shard is now.
    std::vector<Waiter> waiting;
    for (Waiter& w : waiters_) {
      const bool involved =
          std::any_of(w.sequences.begin(), w.sequences.end(),
                      [&](const std::pair<uint32_t, uint64_t>& s) { return s.first == id; });
      if (involved) {
        released.push_back([done = std::move(w.done), id] {
          done(absl::UnavailableError(absl::StrFormat(
              "shard %d moved before its copies acknowledged the push; retry", id)));
        });
      } else {
        waiting.push_back(std::move(w));
      }
    }
    waiters_.swap(waiting);
    ReleaseLocked(&released);
  }
  for (auto& fn : released) fn();
}

void Replicator::SendSnapshot(Shard* shard, const ReplicaTarget& target) {
  const uint32_t id = shard->id();
  uint64_t snapshot_id = 0;
  {
    absl::MutexLock lock(&mu_);
    snapshot_id = next_snapshot_id_++;
  }
  shard->Snapshot(
      snapshot_id, options_.snapshot_record_bytes,
      [&](rpc::ShardRecord&& record) {
        Completions sends;
        {
          absl::MutexLock lock(&mu_);
          if (shutting_down_) return;
          if (record.has_snapshot_begin()) {
            // From now on only acknowledgements of this snapshot's copy count.
            if (TargetState* state = FindTargetLocked(id, target.server_id)) {
              state->snapshot_id = snapshot_id;
              state->snapshot_sequence = record.sequence();
              state->acked = 0;
              // Until it applied the snapshot, it is waited for only if it is a live replica.
              if (!state->target.live) state->waited = false;
            }
          }
          AppendLocked(PeerLocked(target, id), id,
                       std::make_shared<const RecordOut>(RecordOut{std::move(record), nullptr, 0}),
                       &sends);
        }
        for (auto& send : sends) send();
      },
      [&] {
        absl::MutexLock lock(&mu_);
        std::vector<uint32_t>& attached = attached_[id];
        if (std::find(attached.begin(), attached.end(), target.server_id) == attached.end()) {
          attached.push_back(target.server_id);
        }
      });
}

void Replicator::Append(uint32_t shard_id, RecordOut&& record) {
  Completions sends;
  Cork* const cork = CurrentCork();
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    const auto entry = shards_.find(shard_id);
    if (entry != shards_.end()) entry->second.last_sequence = record.record.sequence();
    const auto it = attached_.find(shard_id);
    if (it == attached_.end() || it->second.empty()) return;
    // One record for every copy: queued by each, sent from its own memory.
    const SharedRecord shared = std::make_shared<const RecordOut>(std::move(record));
    for (const uint32_t server : it->second) {
      AppendLocked(peers_[LaneKey(server, shard_id)].get(), shard_id, shared, &sends, cork);
    }
  }
  for (auto& send : sends) send();
}

void Replicator::AppendLocked(Peer* peer, uint32_t shard_id, SharedRecord record,
                              Completions* sends, Cork* cork) {
  Pending p;
  p.shard = shard_id;
  p.sequence = record->record.sequence();
  p.bytes = record->record.ByteSizeLong() + record->value_bytes;
  p.queued = absl::Now();
  p.record = std::move(record);
  peer->queue.push_back(std::move(p));
  if (cork == nullptr) {
    MaybeSendLocked(peer, sends);
  } else if (std::find(cork->lanes_.begin(), cork->lanes_.end(), peer->key) ==
             cork->lanes_.end()) {
    cork->lanes_.push_back(peer->key);
  }
}

void Replicator::MaybeSendLocked(Peer* peer, Completions* sends) {
  if (peer->busy || peer->queue.empty() || shutting_down_) return;
  std::vector<SharedRecord> records;
  size_t bytes = 0;
  while (!peer->queue.empty() &&
         (bytes == 0 || bytes + peer->queue.front().bytes <= options_.max_batch_bytes)) {
    Pending& p = peer->queue.front();
    bytes += p.bytes;
    records.push_back(p.record);
    peer->in_flight.push_back(std::move(p));
    peer->queue.pop_front();
  }
  peer->busy = true;
  ++calls_in_flight_;
  // The transport may answer on the sending thread: the caller frames and sends without the
  // lock.
  sends->push_back([this, lane = peer->key, address = peer->address,
                    records = std::move(records)] {
    transport_->Send(address, FrameReplicateRequest(options_.server_id, records),
                     [this, lane](absl::StatusOr<rpc::ReplicateResponse> response) {
                       OnResponse(lane, std::move(response));
                     });
  });
}

void Replicator::OnResponse(uint64_t lane, absl::StatusOr<rpc::ReplicateResponse> response) {
  Completions released;
  Completions sends;
  uint32_t server_id = 0;
  bool caught_up = false;
  std::vector<uint32_t> resnapshot;
  absl::Status unreachable;
  {
    absl::MutexLock lock(&mu_);
    Peer* peer = peers_[lane].get();
    server_id = peer->server_id;
    if (!response.ok()) {
      // Nothing is known to be applied: send the same records again, after a pause.
      for (auto it = peer->in_flight.rbegin(); it != peer->in_flight.rend(); ++it) {
        peer->queue.push_front(std::move(*it));
      }
      peer->in_flight.clear();
      peer->retry_at = absl::Now() + options_.retry_after;
      if (absl::IsUnavailable(response.status())) unreachable = response.status();
    } else {
      absl::flat_hash_map<uint32_t, bool> redo;
      for (const rpc::ShardAck& ack : response->acks()) {
        TargetState* state = FindTargetLocked(ack.shard(), server_id);
        if (state != nullptr && state->snapshot_id != 0 &&
            ack.snapshot_id() == state->snapshot_id) {
          const bool was_caught_up = state->waited && state->acked >= state->waited_from;
          state->acked = std::max(state->acked, ack.applied_sequence());
          if (!state->waited && ack.complete() && state->acked >= state->snapshot_sequence) {
            // It applied its snapshot: from now on pushes wait for it too.
            state->waited = true;
            state->waited_from = shards_[ack.shard()].last_sequence;
          }
          if (!was_caught_up && !state->target.live && state->waited &&
              state->acked >= state->waited_from) {
            caught_up = true;
          }
        }
        if (ack.result() == rpc::ShardAck::NEEDS_SNAPSHOT ||
            ack.result() == rpc::ShardAck::REFUSED) {
          redo[ack.shard()] = true;
        } else if (ack.result() == rpc::ShardAck::NOT_HELD) {
          redo[ack.shard()] = false;
        }
      }
      // Records of shards the copy did not take: NOT_HELD go again later (its map is behind),
      // the others are replaced by a snapshot.
      std::deque<Pending> again;
      for (Pending& p : peer->in_flight) {
        const auto it = redo.find(p.shard);
        if (it != redo.end() && !it->second) again.push_back(std::move(p));
      }
      peer->in_flight.clear();
      for (auto it = again.rbegin(); it != again.rend(); ++it) {
        peer->queue.push_front(std::move(*it));
      }
      for (const auto& [shard, snapshot] : redo) {
        if (!snapshot) continue;
        auto& q = peer->queue;
        // Copied: C++17 lambdas cannot capture a structured binding (clang refuses it).
        q.erase(std::remove_if(q.begin(), q.end(),
                               [s = shard](const Pending& p) { return p.shard == s; }),
                q.end());
        std::vector<uint32_t>& attached = attached_[shard];
        attached.erase(std::remove(attached.begin(), attached.end(), server_id), attached.end());
        if (TargetState* state = FindTargetLocked(shard, server_id)) state->snapshot_id = 0;
        resnapshot.push_back(shard);
      }
      peer->retry_at = again.empty() ? absl::InfinitePast() : absl::Now() + options_.retry_after;
    }
    peer->busy = false;
    if (peer->retry_at <= absl::Now()) MaybeSendLocked(peer, &sends);
    ReleaseLocked(&released);
  }
  for (auto& send : sends) send();
  if (!unreachable.ok() && options_.on_unreachable) {
    options_.on_unreachable(server_id, unreachable);
  }
  if (caught_up && options_.on_caught_up) options_.on_caught_up();
  for (const uint32_t shard_id : resnapshot) {
    Shard* shard = nullptr;
    ReplicaTarget target;
    {
      absl::MutexLock lock(&mu_);
      const auto it = shards_.find(shard_id);
      if (it == shards_.end() || shutting_down_) continue;
      for (const TargetState& t : it->second.targets) {
        if (t.target.server_id == server_id) {
          shard = it->second.shard;
          target = t.target;
        }
      }
    }
    if (shard != nullptr) SendSnapshot(shard, target);
  }
  for (auto& fn : released) fn();
  // Only now, when nothing here touches the replicator any more: Shutdown waits for this count,
  // and the replicator may be destroyed as soon as it is zero (a late answer's callbacks above
  // ran after the replicator was freed when the call was counted done at the top).
  absl::MutexLock lock(&mu_);
  --calls_in_flight_;
}

void Replicator::RetryLoop() {
  absl::MutexLock lock(&mu_);
  while (!shutting_down_) {
    absl::Time wake = absl::InfiniteFuture();
    for (auto& [server, peer] : peers_) {
      if (peer->busy || peer->queue.empty()) continue;
      wake = std::min(wake, peer->retry_at);
    }
    if (wake > absl::Now()) {
      // Checks again at least every retry_after: a failed call sets a new retry time.
      mu_.AwaitWithDeadline(absl::Condition(&shutting_down_),
                            std::min(wake, absl::Now() + options_.retry_after));
      continue;
    }
    Completions sends;
    for (auto& [server, peer] : peers_) {
      if (!peer->busy && !peer->queue.empty() && peer->retry_at <= absl::Now()) {
        MaybeSendLocked(peer.get(), &sends);
      }
    }
    mu_.Unlock();
    for (auto& send : sends) send();
    mu_.Lock();
  }
}

bool Replicator::ReplicatedLocked(const Waiter& waiter) const {
  if (!options_.sync) return true;
  for (const auto& [shard, sequence] : waiter.sequences) {
    const auto it = shards_.find(shard);
    if (it == shards_.end()) continue;
    for (const TargetState& t : it->second.targets) {
      if (!t.waited) continue;
      if (t.snapshot_id == 0 || t.acked < sequence) return false;
    }
  }
  return true;
}

void Replicator::ReleaseLocked(Completions* out) {
  std::vector<Waiter> waiting;
  for (Waiter& w : waiters_) {
    if (ReplicatedLocked(w)) {
      out->push_back([done = std::move(w.done)] { done(absl::OkStatus()); });
    } else {
      waiting.push_back(std::move(w));
    }
  }
  waiters_.swap(waiting);
}

void Replicator::WhenReplicated(std::vector<std::pair<uint32_t, uint64_t>> sequences,
                                std::function<void(absl::Status)> done) {
  absl::Status now;
  {
    absl::MutexLock lock(&mu_);
    Waiter waiter{std::move(sequences), std::move(done)};
    if (shutting_down_) {
      now = absl::UnavailableError("the server is shutting down");
    } else if (!ReplicatedLocked(waiter)) {
      waiters_.push_back(std::move(waiter));
      return;
    }
    done = std::move(waiter.done);
  }
  done(now);
}

std::vector<rpc::ReplicaLag> Replicator::Lags(uint32_t shard_id) const {
  std::vector<rpc::ReplicaLag> lags;
  absl::MutexLock lock(&mu_);
  const auto it = shards_.find(shard_id);
  if (it == shards_.end()) return lags;
  const absl::Time now = absl::Now();
  for (const TargetState& t : it->second.targets) {
    rpc::ReplicaLag lag;
    lag.set_server_id(t.target.server_id);
    lag.set_caught_up(t.waited && t.snapshot_id != 0 && t.acked >= t.waited_from);
    const auto peer = peers_.find(LaneKey(t.target.server_id, shard_id));
    if (peer != peers_.end()) {
      absl::Time oldest = now;
      auto count = [&](const Pending& p) {
        if (p.shard != shard_id) return;
        lag.set_records(lag.records() + 1);
        lag.set_bytes(lag.bytes() + p.bytes);
        oldest = std::min(oldest, p.queued);
      };
      for (const Pending& p : peer->second->in_flight) count(p);
      for (const Pending& p : peer->second->queue) count(p);
      lag.set_millis(static_cast<uint64_t>(absl::ToInt64Milliseconds(now - oldest)));
    }
    lags.push_back(lag);
  }
  return lags;
}

}  // namespace server
}  // namespace ps

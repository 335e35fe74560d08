#include "client/ps_client.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/internal/dense_calls.h"
#include "client/internal/key_router.h"
#include "client/internal/routing.h"
#include "client/internal/scheduler.h"
#include "client/internal/send_pool.h"
#include "client/internal/server_link.h"
#include "client/internal/sparse_call.h"
#include "common/coordinator_client.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "common/shared_region_layout.h"
#include "common/status_macros.h"

namespace ps {
namespace {

using client_internal::DenseCalls;
using client_internal::Routing;
using client_internal::ServerLink;
using client_internal::SparseCall;
using client_internal::TableInfo;

// Room for the header, table name and runs of a request beyond keys and values.
constexpr uint64_t kRequestOverheadBytes = 64 << 10;
// How long a worker's closing client waits for the coordinator to hear that it leaves.
constexpr absl::Duration kLeaveTimeout = absl::Seconds(1);

// The client: tables and options, the shard map, and the sparse calls' rounds (planning, routing,
// retries); the way to each server is its ServerLink's, the dense calls are DenseCalls'.
class ClientImpl final : public Client, SparseCall::Host, DenseCalls::Host {
 public:
  // `coordinator` is owned_coordinator, or options.coordinator_client when that is null.
  ClientImpl(const ClientOptions& options, std::unique_ptr<CoordinatorClient> owned_coordinator,
             CoordinatorClient* coordinator, const rpc::RegisterResponse& registration)
      : options_(options),
        owned_coordinator_(std::move(owned_coordinator)),
        coordinator_(coordinator),
        job_(registration.job()),
        worker_id_(registration.member_id()),
        rank_(registration.rank()),
        start_step_(registration.start_step()),
        max_message_bytes_(options.max_message_bytes != 0
                               ? options.max_message_bytes
                               : registration.job().cluster().max_message_bytes()),
        dense_(DenseOptions(), this, &clock_, &next_sequence_) {
    for (const config::Table& t : job_.tables()) {
      tables_.push_back(TableInfo{t.name(), t.dim(), NameHash(t.name())});
    }
    for (size_t i = 0; i < tables_.size(); ++i) table_index_[tables_[i].name] = i;
    const int send_threads = options.send_threads >= 0
                                 ? options.send_threads
                                 : client_internal::SendPool::AutomaticThreads(
                                       static_cast<int>(std::thread::hardware_concurrency()));
    if (send_threads > 0) send_pool_ = std::make_unique<client_internal::SendPool>(send_threads);
  }

  ~ClientImpl() override {
    {
      absl::MutexLock lock(&calls_mu_);
      auto idle = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls_mu_) { return calls_in_flight_ == 0; };
      calls_mu_.Await(absl::Condition(&idle));
    }
    // The regions the servers lent are given back (those of servers no longer in the map expire
    // on their own).
    for (const auto& [id, link] : CurrentRouting()->servers) link->CloseRegion();
    // A worker that closes its client is done; one that falls silent without this has failed.
    coordinator_->StopHeartbeats();  // a borrowed coordinator client lives on
    if (options_.role == rpc::WORKER) {
      coordinator_->Leave(worker_id_, kLeaveTimeout).IgnoreError();
    }
  }

  absl::Status Start() {
    PS_ASSIGN_OR_RETURN(rpc::ShardMap map, coordinator_->GetShardMap(1, options_.connect_timeout));
    return InstallMap(map);
  }

  const config::Job& job() const override { return job_; }
  uint32_t worker_id() const override { return worker_id_; }
  int rank() const override { return rank_; }
  int64_t start_step() const override { return start_step_; }

  absl::StatusOr<uint32_t> Dim(absl::string_view table) const override {
    PS_ASSIGN_OR_RETURN(const TableInfo* info, FindTable(table));
    return info->dim;
  }

  void SetClock(int64_t step) override { clock_.store(step, std::memory_order_relaxed); }

  rpc::ShardMap shard_map() const override { return CurrentRouting()->map; }

  absl::Status Pull(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<float> values) override {
    return Wait([&](Callback done) {
      StartSparse(SparseCall::Kind::kPull, table, keys, values, {}, std::move(done),
                  /*caller_waits=*/true);
    });
  }

  absl::Status Push(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads) override {
    return Wait([&](Callback done) {
      StartSparse(SparseCall::Kind::kPush, table, keys, {}, grads, std::move(done),
                  /*caller_waits=*/true);
    });
  }

  void PullAsync(absl::string_view table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                 Callback done) override {
    StartSparse(SparseCall::Kind::kPull, table, keys, values, {}, std::move(done),
                /*caller_waits=*/false);
  }

  void PushAsync(absl::string_view table, absl::Span<const uint64_t> keys,
                 absl::Span<const float> grads, Callback done) override {
    StartSparse(SparseCall::Kind::kPush, table, keys, {}, grads, std::move(done),
                /*caller_waits=*/false);
  }

  absl::Status RetryPush(const PushTicket& ticket, absl::string_view table,
                         absl::Span<const uint64_t> keys, absl::Span<const float> grads) override {
    return Wait([&](Callback done) {
      StartSparse(SparseCall::Kind::kPush, table, keys, {}, grads, std::move(done),
                  /*caller_waits=*/true, &ticket);
    });
  }

  void RetryPushAsync(const PushTicket& ticket, absl::string_view table,
                      absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                      Callback done) override {
    StartSparse(SparseCall::Kind::kPush, table, keys, {}, grads, std::move(done),
                /*caller_waits=*/false, &ticket);
  }

  absl::Status PullDense(absl::string_view name, absl::Span<float> values) override {
    return dense_.Pull(name, values);
  }
  absl::Status PushDense(absl::string_view name, absl::Span<const float> values,
                         DenseUpdate update) override {
    return dense_.Push(name, values,
                       update == DenseUpdate::kAssign ? rpc::PushDenseRequest::ASSIGN
                                                      : rpc::PushDenseRequest::GRADIENT);
  }
  absl::StatusOr<int64_t> EndStep(int64_t step) override { return dense_.EndStep(step); }

  // DenseCalls::Host.
  std::shared_ptr<const Routing> CurrentRouting() const override {
    absl::MutexLock lock(&routing_mu_);
    return routing_;
  }

  // Fetches a newer map if there is one; returns whether the routing changed.
  bool RefreshMap(uint64_t routed_version) override {
    absl::StatusOr<rpc::ShardMap> map =
        coordinator_->GetShardMap(routed_version + 1, absl::Milliseconds(200));
    if (!map.ok()) return false;
    return InstallMap(*map).ok() && CurrentRouting()->version > routed_version;
  }

  // Perhaps the server is gone: the coordinator checks at once and fails it over.
  void ReportUnavailable(uint32_t server, const absl::Status& status) override {
    coordinator_->ReportFailureAsync(worker_id_, server, std::string(status.message()));
  }

 private:
  DenseCalls::Options DenseOptions() const {
    DenseCalls::Options dense;
    dense.worker_id = worker_id_;
    dense.chunk_floats = job_.cluster().dense_chunk_floats();
    dense.max_message_bytes = max_message_bytes_;
    dense.sync = job_.training().mode() == config::Training::SYNC;
    dense.retry_timeout = options_.retry_timeout;
    dense.request_timeout = options_.request_timeout;
    return dense;
  }

  // Pull or Push, blocking (`caller_waits`: the calling thread blocks until `done` has run
  // anyway, so it may wait for a call made in shared memory itself) or not; a push made again
  // with `retry_of` (RetryPush).
  void StartSparse(SparseCall::Kind kind, absl::string_view table, absl::Span<const uint64_t> keys,
                   absl::Span<float> values, absl::Span<const float> grads, Callback done,
                   bool caller_waits, const PushTicket* retry_of = nullptr) {
    absl::StatusOr<const TableInfo*> info = FindTable(table);
    if (!info.ok()) return done(info.status());
    const bool push = kind == SparseCall::Kind::kPush;
    const size_t given = push ? grads.size() : values.size();
    if (given != keys.size() * (*info)->dim) {
      return done(absl::InvalidArgumentError(absl::StrFormat(
          "%s of %d keys of dim %d needs %d %s, got %d", push ? "push" : "pull", keys.size(),
          (*info)->dim, keys.size() * (*info)->dim, push ? "gradients" : "values", given)));
    }
    if (retry_of != nullptr) {
      if (absl::Status refused = CheckTicket(*retry_of, table, keys, grads); !refused.ok()) {
        return done(std::move(refused));
      }
    }
    // Gradients are checked for NaN and Inf while the keys are planned (StartCall).
    auto call = std::make_shared<SparseCall>();
    if (retry_of != nullptr) call->retry_of = std::make_shared<const PushTicket>(*retry_of);
    call->kind = kind;
    call->host = this;
    call->table = *info;
    call->keys = keys;
    call->values = values;
    call->grads = grads;
    call->done = std::move(done);
    call->caller_waits = caller_waits;
    StartCall(std::move(call));
  }

  // Whether `ticket` may be made again as a push of `keys` and `grads` to `table` by this
  // client (Client::RetryPush): INVALID_ARGUMENT saying why not.
  absl::Status CheckTicket(const PushTicket& ticket, absl::string_view table,
                           absl::Span<const uint64_t> keys, absl::Span<const float> grads) const {
    if (ticket.worker_id != worker_id_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the ticket names a push of worker %d, and this client is worker %d: a push is made "
          "again only by the client that made it; nothing was sent",
          ticket.worker_id, worker_id_));
    }
    if (ticket.table != table) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the ticket names a push to table \"%s\", not \"%s\"; nothing was sent",
                          ticket.table, table));
    }
    if (ticket.runs.empty()) {
      return absl::InvalidArgumentError("the ticket names no request; nothing was sent");
    }
    const uint64_t newest = next_sequence_.load(std::memory_order_relaxed) - 1;
    if (ticket.first_sequence() + PushTicket::kWindow < newest) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the push of sequences %d to %d is too old to be made again: this client has numbered "
          "requests up to %d since, and a server tells whether it applied a sequence only within "
          "the %d below a worker's newest (proto/ps.proto rule 5); nothing was sent, and whether "
          "its parts were applied cannot be told",
          ticket.first_sequence(), ticket.last_sequence(), newest, PushTicket::kWindow));
    }
    if (PushTicket::Fingerprint(keys, grads) != ticket.fingerprint) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the keys or gradients differ from those of the push to table \"%s\" the ticket names "
          "(sequences %d to %d); nothing was sent",
          table, ticket.first_sequence(), ticket.last_sequence()));
    }
    return absl::OkStatus();
  }

  static absl::Status Wait(const std::function<void(Callback)>& start) {
    absl::Notification finished;
    absl::Status result;
    start([&](absl::Status status) {
      result = std::move(status);
      finished.Notify();
    });
    finished.WaitForNotification();
    return result;
  }

  absl::StatusOr<const TableInfo*> FindTable(absl::string_view name) const {
    const auto it = table_index_.find(name);
    if (it == table_index_.end()) {
      return absl::NotFoundError(absl::StrFormat("unknown table \"%s\"", name));
    }
    return &tables_[it->second];
  }

  absl::Status InstallMap(const rpc::ShardMap& map) {
    absl::MutexLock lock(&routing_mu_);
    if (routing_ != nullptr && routing_->version >= map.version()) return absl::OkStatus();
    PS_ASSIGN_OR_RETURN(
        routing_, client_internal::MakeRouting(
                      map, job_.cluster().read_from_replicas(),
                      [this](const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                          routing_mu_) { return LinkTo(address); }));
    return absl::OkStatus();
  }

  // The link to the server at `address`, made on first use and kept across map versions.
  std::shared_ptr<ServerLink> LinkTo(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(routing_mu_) {
    std::shared_ptr<ServerLink>& link = links_[address];
    if (link != nullptr) return link;
    client_internal::ServerLinkOptions link_options;
    link_options.address = address;
    link_options.channels = std::max(1, options_.channels_per_server);
    link_options.credentials = options_.credentials;
    link_options.shared_memory = options_.shared_memory;
    link_options.shared_memory_calls = options_.shared_memory_calls;
    // Slots for the requests a few calls may have in flight, each for a whole request of the
    // job's widest table; fewer for wide tables, so that a region stays near 64 MiB.
    uint32_t max_dim = 1;
    for (const TableInfo& table : tables_) max_dim = std::max(max_dim, table.dim);
    link_options.slot_bytes = std::min<uint64_t>(
        uint64_t{MaxKeysPerRequest(max_dim)} * (sizeof(uint64_t) + max_dim * sizeof(float)),
        kMaxSharedSlotBytes);
    const uint32_t slots = static_cast<uint32_t>(
        std::clamp<uint64_t>((uint64_t{64} << 20) / link_options.slot_bytes, 2,
                             4 * static_cast<uint64_t>(options_.channels_per_server)));
    link_options.slots = std::min<uint32_t>(slots, kMaxSharedSlots);
    link = std::make_shared<ServerLink>(std::move(link_options));
    return link;
  }

  uint32_t MaxKeysPerRequest(uint32_t dim) const {
    const uint64_t per_key = sizeof(uint64_t) + uint64_t{dim} * sizeof(float);
    const uint64_t room = max_message_bytes_ > 2 * kRequestOverheadBytes
                              ? max_message_bytes_ - kRequestOverheadBytes
                              : max_message_bytes_ / 2;
    const uint64_t by_bytes = std::max<uint64_t>(1, room / per_key);
    return static_cast<uint32_t>(
        std::min<uint64_t>(by_bytes, std::max(1, options_.max_keys_per_request)));
  }

  void StartCall(std::shared_ptr<SparseCall> call) {
    {
      absl::MutexLock lock(&calls_mu_);
      ++calls_in_flight_;
    }
    call->clock = call->retry_of != nullptr ? call->retry_of->clock
                                            : clock_.load(std::memory_order_relaxed);
    call->deadline = absl::Now() + options_.retry_timeout;
    const std::shared_ptr<const Routing> routing = CurrentRouting();
    const std::vector<uint32_t>* owners = &routing->shard_to_server;
    std::vector<uint32_t> readers;
    if (call->kind == SparseCall::Kind::kPull && !routing->readers.empty()) {
      // Pulls spread over every live copy, a different one each call (retries go to primaries).
      const uint64_t turn = next_read_.fetch_add(1, std::memory_order_relaxed);
      readers.resize(routing->readers.size());
      for (size_t s = 0; s < readers.size(); ++s) {
        const std::vector<uint32_t>& copies = routing->readers[s];
        readers[s] = copies[(turn + s) % copies.size()];
      }
      owners = &readers;
    }
    if (absl::Status planned = call->Plan(*owners, MaxKeysPerRequest(call->table->dim),
                                          call->retry_of == nullptr ? &plans_ : nullptr);
        !planned.ok()) {
      return Finish(call, std::move(planned));
    }
    std::vector<std::unique_ptr<SparseCall::Request>> requests;
    if (call->retry_of != nullptr) {
      absl::StatusOr<std::vector<std::unique_ptr<SparseCall::Request>>> numbered =
          call->RequestsOf(*call->retry_of, routing->shard_to_server);
      if (!numbered.ok()) {
        call->retry_of.reset();  // refused before sending: no ticket
        return Finish(call, numbered.status());
      }
      requests = *std::move(numbered);
    } else {
      requests = call->TakeRequests();
      if (call->kind == SparseCall::Kind::kPush && !requests.empty()) {
        // One block of sequences per call, in plan order: what its ticket names.
        call->routing = routing;
        call->first_sequence = next_sequence_.fetch_add(requests.size(), std::memory_order_relaxed);
        for (size_t i = 0; i < requests.size(); ++i) {
          requests[i]->sequence = call->first_sequence + i;
        }
      }
    }
    if (requests.empty()) return Finish(call, absl::OkStatus());
    Send(call, routing, std::move(requests), /*on_caller=*/true);
  }

  // Sends `requests` with `routing`; their answers drive the call on (OnAnswer).
  // `on_caller`: this is the thread that started the call (not a retry's).
  void Send(const std::shared_ptr<SparseCall>& call, const std::shared_ptr<const Routing>& routing,
            std::vector<std::unique_ptr<SparseCall::Request>> requests, bool on_caller = false) {
    const bool wait_here = on_caller && call->caller_waits && requests.size() == 1;
    call->Sent(static_cast<int>(requests.size()));
    bool first = true;
    for (auto& owned : requests) {
      SparseCall::Request* request = owned.release();
      request->routed_version = routing->version;
      request->call = call;
      // A shard without a live copy: its rows are gone, and no server may make them up.
      const auto lost =
          std::find_if(request->part.segments.begin(), request->part.segments.end(),
                       [&](const client_internal::Segment& seg) {
                         return routing->map.shards(seg.shard).lost();
                       });
      if (lost != request->part.segments.end()) {
        OnAnswer(request, ToGrpcStatus(absl::DataLossError(absl::StrFormat(
                              "shard %d of table \"%s\" lost every copy (shard map version %d); "
                              "its rows come back only from a checkpoint",
                              lost->shard, call->table->name, routing->version))));
        continue;
      }
      // The first request is started here, the others by the send pool if there is one.
      auto start = [this, routing, request, wait_here] {
        request->link = routing->servers.at(request->part.server);
        request->address = &request->link->address();
        request->call->Describe(request, routing->version, worker_id_);
        request->deadline = absl::Now() + options_.request_timeout;
        request->wait_here = wait_here;
        request->link->Transport()->Start(request);
      };
      if (send_pool_ != nullptr && !first) {
        send_pool_->Run(std::move(start));
      } else {
        start();
      }
      first = false;
    }
  }

  // SparseCall::Host: a request ended.
  void OnAnswer(SparseCall::Request* raw, const grpc::Status& ended) override {
    std::unique_ptr<SparseCall::Request> request(raw);
    const std::shared_ptr<SparseCall> call = request->call;
    absl::Status status = FromGrpcStatus(ended);
    if (status.ok()) status = call->TakeAnswer(request.get());
    if (request->link != nullptr) status = request->link->Settle(request.get(), ended, status);
    if (absl::IsUnavailable(status)) ReportUnavailable(request->part.server, status);
    if (call->Record(std::move(request), status)) EndRound(call);
  }

  // Called when no request of the call is in flight: finish, or retry what failed.
  void EndRound(const std::shared_ptr<SparseCall>& call) {
    SparseCall::Next next = call->EndRound(absl::Now());
    if (next.retry.empty()) return Finish(call, std::move(next.status));
    auto retry = std::make_shared<std::vector<std::unique_ptr<SparseCall::Request>>>(
        std::move(next.retry));
    scheduler_.At(next.when, [this, call, retry, last_retryable = next.last_retryable] {
      uint64_t routed = std::numeric_limits<uint64_t>::max();
      for (const auto& r : *retry) routed = std::min(routed, r->routed_version);
      const bool changed = RefreshMap(routed);
      if (!changed && last_retryable.code() == absl::StatusCode::kFailedPrecondition) {
        // The server refuses a shard and no newer map exists: not a stale map.
        retry->clear();
        return Finish(call, last_retryable);
      }
      const std::shared_ptr<const Routing> routing = CurrentRouting();
      Send(call, routing, SparseCall::Reroute(retry.get(), routing->shard_to_server));
    });
  }

  void Finish(const std::shared_ptr<SparseCall>& call, absl::Status status) {
    if (!status.ok() && (call->first_sequence != 0 || call->retry_of != nullptr)) {
      // Sent, perhaps applied in part: the caller may make it again (RetryPush).
      status = call->Ticket(worker_id_).AttachTo(std::move(status));
    }
    Callback done = std::move(call->done);
    done(std::move(status));
    absl::MutexLock lock(&calls_mu_);
    --calls_in_flight_;
  }

  const ClientOptions options_;
  const std::unique_ptr<CoordinatorClient> owned_coordinator_;  // null when borrowed
  CoordinatorClient* const coordinator_;
  const config::Job job_;
  const uint32_t worker_id_;
  const int rank_;
  const int64_t start_step_;
  const uint64_t max_message_bytes_;
  std::vector<TableInfo> tables_;
  absl::flat_hash_map<std::string, size_t> table_index_;

  std::atomic<uint64_t> next_read_{0};
  std::atomic<uint64_t> next_sequence_{1};
  std::atomic<int64_t> clock_{-1};
  DenseCalls dense_;
  // Recent calls' plans: a worker's push of the keys it just pulled reuses the pull's.
  client_internal::PlanCache plans_;

  mutable absl::Mutex routing_mu_;
  std::shared_ptr<const Routing> routing_ ABSL_GUARDED_BY(routing_mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<ServerLink>> links_
      ABSL_GUARDED_BY(routing_mu_);

  absl::Mutex calls_mu_;
  int calls_in_flight_ ABSL_GUARDED_BY(calls_mu_) = 0;

  client_internal::Scheduler scheduler_;
  // Null without send threads. Last, so that it goes first: the destructor has waited for every
  // call, so none of its tasks is left by then.
  std::unique_ptr<client_internal::SendPool> send_pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.coordinator.empty() && options.coordinator_client == nullptr) {
    return absl::InvalidArgumentError("ClientOptions.coordinator is empty");
  }
  if (options.channels_per_server < 1 || options.max_keys_per_request < 1) {
    return absl::InvalidArgumentError("channels_per_server and max_keys_per_request must be >= 1");
  }
  if (options.send_threads < -1 || options.send_threads > 64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "send_threads must be -1 (automatic) or in [0, 64], got %d", options.send_threads));
  }
  std::unique_ptr<CoordinatorClient> owned;
  CoordinatorClient* coordinator = options.coordinator_client;
  if (coordinator == nullptr) {
    PS_ASSIGN_OR_RETURN(owned,
                        CoordinatorClient::Connect(options.coordinator, options.connect_timeout,
                                                   options.credentials));
    coordinator = owned.get();
  }
  PS_ASSIGN_OR_RETURN(rpc::RegisterResponse registration,
                      coordinator->Register(options.role, "", options.rank));
  if (options.on_coordinator_lost) {
    coordinator->SetOnCoordinatorLost(options.coordinator_lost_after, options.on_coordinator_lost);
  }
  if (options.on_job_failed) coordinator->SetOnJobFailed(options.on_job_failed);
  PS_RETURN_IF_ERROR(coordinator->StartHeartbeats(
      registration.member_id(), absl::Milliseconds(registration.heartbeat_interval_ms())));
  auto client = std::make_unique<ClientImpl>(options, std::move(owned), coordinator, registration);
  PS_RETURN_IF_ERROR(client->Start());
  return std::unique_ptr<Client>(std::move(client));
}

std::future<absl::Status> Client::PullAsync(absl::string_view table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<float> values) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> future = promise->get_future();
  PullAsync(table, keys, values, [promise](absl::Status s) { promise->set_value(std::move(s)); });
  return future;
}

absl::Status Client::RetryPush(const PushTicket& ticket, absl::string_view table,
                               absl::Span<const uint64_t> keys, absl::Span<const float> grads) {
  return RetryPushAsync(ticket, table, keys, grads).get();
}

void Client::RetryPushAsync(const PushTicket& ticket, absl::string_view table,
                            absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                            Callback done) {
  done(absl::UnimplementedError("this client does not make a push again"));
}

std::future<absl::Status> Client::RetryPushAsync(const PushTicket& ticket, absl::string_view table,
                                                 absl::Span<const uint64_t> keys,
                                                 absl::Span<const float> grads) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> future = promise->get_future();
  RetryPushAsync(ticket, table, keys, grads,
                 [promise](absl::Status s) { promise->set_value(std::move(s)); });
  return future;
}

std::future<absl::Status> Client::PushAsync(absl::string_view table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<const float> grads) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> future = promise->get_future();
  PushAsync(table, keys, grads, [promise](absl::Status s) { promise->set_value(std::move(s)); });
  return future;
}

}  // namespace ps

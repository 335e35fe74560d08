#include "client/ps_client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/internal/dense_chunks.h"
#include "client/internal/key_router.h"
#include "client/internal/send_pool.h"
#include "client/internal/shared_region.h"
#include "client/internal/sparse_wire.h"
#include "common/coordinator_client.h"
#include "common/finite.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "common/shared_region_layout.h"
#include "common/status_macros.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace {

using client_internal::KeyPlan;
using client_internal::MessageWriter;
using client_internal::Part;
using client_internal::PullResponseReader;
using client_internal::Segment;

// Room for the header, table name and runs of a request beyond keys and values.
constexpr uint64_t kRequestOverheadBytes = 64 << 10;
// How long a worker's closing client waits for the coordinator to hear that it leaves.
constexpr absl::Duration kLeaveTimeout = absl::Seconds(1);
// Shared regions (ClientOptions.shared_memory): how long asking a server for one may take, how
// long giving one back may, and how many times one connection opens one (a server that lost
// the regions it lent, having restarted, is asked again).
constexpr absl::Duration kRegionOpenTimeout = absl::Seconds(5);
constexpr absl::Duration kRegionCloseTimeout = absl::Seconds(1);
constexpr int kMaxRegionOpens = 4;

// Pull and Push go through the generic stub with messages built and read in place
// (client/internal/sparse_wire.h); these are their gRPC method names.
constexpr char kPullMethod[] = "/ps.rpc.ParameterServer/Pull";
constexpr char kPushMethod[] = "/ps.rpc.ParameterServer/Push";
// How many rows ahead the gather of gradients and the scatter of pulled rows prefetch: their
// rows are at random places of the caller's buffers, and the copies are bound by how many cache
// misses are in flight.
constexpr uint32_t kPrefetchRows = 16;

// Prefetches the cache lines of a row of `bytes` bytes at `row` (for writing if `write`).
template <bool write>
inline void PrefetchRow(const void* row, size_t bytes) {
  const char* p = static_cast<const char*>(row);
  __builtin_prefetch(p, write ? 1 : 0);
  __builtin_prefetch(p + bytes - 1, write ? 1 : 0);
}

// Fields of PullRequest and PushRequest (proto/ps.proto) that the client writes in place.
constexpr uint32_t kKeysField = 3;
constexpr uint32_t kGradsField = 5;

bool IsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kFailedPrecondition:  // a stale map: retried after refreshing it
    case absl::StatusCode::kDeadlineExceeded:
      return true;
    default:
      return false;
  }
}

// The channels to one server, each with a typed stub and a generic (raw bytes) one.
struct ServerConnection {
  std::string address;
  std::vector<std::unique_ptr<rpc::ParameterServer::Stub>> stubs;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_stubs;
  std::atomic<uint32_t> next{0};

  // The shared region this server lent (ClientOptions.shared_memory), opened by the first request
  // that may use one; `region_off` once it cannot be had (the server is elsewhere or lends none).
  absl::Mutex region_mu;
  std::shared_ptr<client_internal::SharedRegion> region ABSL_GUARDED_BY(region_mu);
  int region_opens ABSL_GUARDED_BY(region_mu) = 0;
  bool region_off ABSL_GUARDED_BY(region_mu) = false;

  rpc::ParameterServer::Stub* Stub() {
    return stubs[next.fetch_add(1, std::memory_order_relaxed) % stubs.size()].get();
  }
  grpc::GenericStub* GenericStub() {
    return generic_stubs[next.fetch_add(1, std::memory_order_relaxed) % generic_stubs.size()].get();
  }
};

// A shard map ready for routing. Immutable once built; replaced whole on refresh.
struct Routing {
  uint64_t version = 0;
  std::vector<uint32_t> shard_to_server;
  // cluster.read_from_replicas: by shard, the servers a pull may go to (the primary, then the
  // live replicas); empty otherwise.
  std::vector<std::vector<uint32_t>> readers;
  absl::flat_hash_map<uint32_t, std::shared_ptr<ServerConnection>> servers;
  rpc::ShardMap map;
};

struct TableInfo {
  std::string name;
  uint32_t dim = 0;
  uint64_t name_hash = 0;
};

// Runs functions at given times on one thread: the backoff of retries, which must not block
// gRPC's callback threads.
class Scheduler {
 public:
  Scheduler() : thread_([this] { Run(); }) {}
  ~Scheduler() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void At(absl::Time when, std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    tasks_.push_back({when, std::move(fn)});
  }

 private:
  struct Task {
    absl::Time when;
    std::function<void()> fn;
  };
  void Run() {
    while (true) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        // Wake when stopping with nothing left, or when the earliest task is due.
        while (true) {
          if (stop_ && tasks_.empty()) return;
          auto earliest =
              std::min_element(tasks_.begin(), tasks_.end(),
                               [](const Task& a, const Task& b) { return a.when < b.when; });
          const absl::Time now = absl::Now();
          if (earliest != tasks_.end() && (earliest->when <= now || stop_)) {
            fn = std::move(earliest->fn);
            tasks_.erase(earliest);
            break;
          }
          const absl::Time until =
              earliest == tasks_.end() ? now + absl::Seconds(1) : earliest->when;
          const size_t size = tasks_.size();
          auto changed = [this, size]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            return stop_ || tasks_.size() != size;
          };
          mu_.AwaitWithDeadline(absl::Condition(&changed), until);
        }
      }
      fn();
    }
  }

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class ClientImpl;

// One Pull or Push call in flight: its plan, its requests, and what is left to do.
struct SparseCall {
  enum class Kind { kPull, kPush };

  // One request of the call; kept whole across retries (same sequence number).
  struct Request {
    Part part;
    uint64_t sequence = 0;
    uint64_t routed_version = 0;
    // The server it went to, and the shared slot its payload is in (slot -1: in the message).
    std::shared_ptr<ServerConnection> conn;
    std::shared_ptr<client_internal::SharedRegion> region;
    int slot = -1;
    // Made in the region (rule 10) with this message, rather than as an RPC; and whether the
    // server answered it (its slot is then free again, whatever the answer).
    bool in_region = false;
    rpc::PushRequest region_message;
    bool region_answered = false;
    std::unique_ptr<grpc::ClientContext> context;
    // A PullRequest or PushRequest; a PullResponse or PushResponse.
    grpc::ByteBuffer request_bytes;
    grpc::ByteBuffer response_bytes;
  };

  Kind kind = Kind::kPull;
  const TableInfo* table = nullptr;
  int64_t clock = -1;
  absl::Span<const uint64_t> keys;
  absl::Span<float> values;       // pull
  absl::Span<const float> grads;  // push
  KeyPlan plan;
  std::vector<float> grad_sums;  // push with repeated keys: summed gradients in unique order
  Client::Callback done;
  // The thread that started the call blocks until `done` has run (Pull, Push): a call of one
  // request made in shared memory is waited for by that thread itself, not the region's.
  bool caller_waits = false;
  absl::Time deadline;
  absl::Duration backoff = absl::Milliseconds(5);

  absl::Mutex mu;
  int outstanding ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::unique_ptr<Request>> to_retry ABSL_GUARDED_BY(mu);
  absl::Status error ABSL_GUARDED_BY(mu);  // a non-retryable error
  absl::Status last_retryable ABSL_GUARDED_BY(mu);
};

class ClientImpl final : public Client {
 public:
  ClientImpl(const ClientOptions& options, std::unique_ptr<CoordinatorClient> coordinator,
             const rpc::RegisterResponse& registration)
      : options_(options),
        coordinator_(std::move(coordinator)),
        job_(registration.job()),
        worker_id_(registration.member_id()),
        rank_(registration.rank()),
        start_step_(registration.start_step()),
        max_message_bytes_(options.max_message_bytes != 0
                               ? options.max_message_bytes
                               : registration.job().cluster().max_message_bytes()) {
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
    for (const auto& [id, conn] : CurrentRouting()->servers) {
      std::shared_ptr<client_internal::SharedRegion> region;
      {
        absl::MutexLock lock(&conn->region_mu);
        region = std::move(conn->region);
      }
      if (region != nullptr) CloseSharedRegion(conn.get(), region->id(), region->secret());
    }
    // A worker that closes its client is done; one that falls silent without this has failed.
    if (options_.role == rpc::WORKER) {
      coordinator_->StopHeartbeats();
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
      StartPull(table, keys, values, std::move(done), /*caller_waits=*/true);
    });
  }

  absl::Status Push(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads) override {
    return Wait([&](Callback done) {
      StartPush(table, keys, grads, std::move(done), /*caller_waits=*/true);
    });
  }

  void PullAsync(absl::string_view table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                 Callback done) override {
    StartPull(table, keys, values, std::move(done), /*caller_waits=*/false);
  }

  void PushAsync(absl::string_view table, absl::Span<const uint64_t> keys,
                 absl::Span<const float> grads, Callback done) override {
    StartPush(table, keys, grads, std::move(done), /*caller_waits=*/false);
  }

  absl::Status PullDense(absl::string_view name, absl::Span<float> values) override;
  absl::StatusOr<int64_t> EndStep(int64_t step) override;
  absl::Status PushDense(absl::string_view name, absl::Span<const float> values,
                         DenseUpdate update) override;

 private:
  // PullAsync; with `caller_waits`, the calling thread blocks until `done` has run anyway, so it
  // may wait for a call made in shared memory itself (SparseCall::caller_waits).
  void StartPull(absl::string_view table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                 Callback done, bool caller_waits) {
    absl::StatusOr<const TableInfo*> info = FindTable(table);
    if (!info.ok()) return done(info.status());
    if (values.size() != keys.size() * (*info)->dim) {
      return done(absl::InvalidArgumentError(
          absl::StrFormat("pull of %d keys of dim %d needs %d values, got %d", keys.size(),
                          (*info)->dim, keys.size() * (*info)->dim, values.size())));
    }
    auto call = std::make_shared<SparseCall>();
    call->kind = SparseCall::Kind::kPull;
    call->table = *info;
    call->keys = keys;
    call->values = values;
    call->done = std::move(done);
    call->caller_waits = caller_waits;
    StartCall(std::move(call));
  }

  // PushAsync; `caller_waits` as for StartPull.
  void StartPush(absl::string_view table, absl::Span<const uint64_t> keys,
                 absl::Span<const float> grads, Callback done, bool caller_waits) {
    absl::StatusOr<const TableInfo*> info = FindTable(table);
    if (!info.ok()) return done(info.status());
    if (grads.size() != keys.size() * (*info)->dim) {
      return done(absl::InvalidArgumentError(
          absl::StrFormat("push of %d keys of dim %d needs %d gradients, got %d", keys.size(),
                          (*info)->dim, keys.size() * (*info)->dim, grads.size())));
    }
    // Gradients are checked for NaN and Inf while the keys are planned (StartCall).
    auto call = std::make_shared<SparseCall>();
    call->kind = SparseCall::Kind::kPush;
    call->table = *info;
    call->keys = keys;
    call->grads = grads;
    call->done = std::move(done);
    call->caller_waits = caller_waits;
    StartCall(std::move(call));
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

  std::shared_ptr<const Routing> CurrentRouting() const {
    absl::MutexLock lock(&routing_mu_);
    return routing_;
  }

  absl::Status InstallMap(const rpc::ShardMap& map) {
    auto routing = std::make_shared<Routing>();
    routing->version = map.version();
    routing->map = map;
    routing->shard_to_server.resize(map.num_shards());
    if (map.shards_size() != static_cast<int>(map.num_shards())) {
      return absl::InternalError("coordinator sent an incomplete shard map");
    }
    for (const rpc::ShardAssignment& a : map.shards()) {
      if (a.shard() >= map.num_shards()) return absl::InternalError("shard out of range in map");
      routing->shard_to_server[a.shard()] = a.primary();
    }
    if (job_.cluster().read_from_replicas()) {
      routing->readers.resize(map.num_shards());
      for (const rpc::ShardAssignment& a : map.shards()) {
        std::vector<uint32_t>& readers = routing->readers[a.shard()];
        readers.push_back(a.primary());
        readers.insert(readers.end(), a.replicas().begin(), a.replicas().end());
      }
    }
    absl::MutexLock lock(&routing_mu_);
    if (routing_ != nullptr && routing_->version >= map.version()) return absl::OkStatus();
    for (const rpc::ServerInfo& server : map.servers()) {
      std::shared_ptr<ServerConnection>& conn = connections_[server.address()];
      if (conn == nullptr) conn = Connect(server.address());
      routing->servers[server.server_id()] = conn;
    }
    for (const uint32_t s : routing->shard_to_server) {
      if (!routing->servers.contains(s)) {
        return absl::InternalError(absl::StrFormat("shard map names unknown server %d", s));
      }
    }
    routing_ = std::move(routing);
    return absl::OkStatus();
  }

  std::shared_ptr<ServerConnection> Connect(const std::string& address) {
    auto conn = std::make_shared<ServerConnection>();
    conn->address = address;
    for (int i = 0; i < std::max(1, options_.channels_per_server); ++i) {
      // A connection of its own per channel, not one shared subchannel.
      grpc_util::ChannelOptions options = grpc_util::ClientDataChannelOptions();
      options.int_args.emplace_back("ps.channel_index", i);
      options.credentials = options_.credentials;
      std::shared_ptr<grpc::Channel> channel = grpc_util::NewChannel(address, options);
      conn->stubs.push_back(rpc::ParameterServer::NewStub(channel));
      conn->generic_stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    return conn;
  }

  // Fetches a newer map if there is one; returns whether the routing changed.
  bool RefreshMap(uint64_t routed_version) {
    absl::StatusOr<rpc::ShardMap> map =
        coordinator_->GetShardMap(routed_version + 1, absl::Milliseconds(200));
    if (!map.ok()) return false;
    return InstallMap(*map).ok() && CurrentRouting()->version > routed_version;
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
    call->clock = clock_.load(std::memory_order_relaxed);
    call->deadline = absl::Now() + options_.retry_timeout;
    const std::shared_ptr<const Routing> routing = CurrentRouting();
    const uint32_t dim = call->table->dim;
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
    const bool push = call->kind == SparseCall::Kind::kPush;
    call->plan = client_internal::PlanKeys(
        call->keys, call->table->name_hash, *owners, MaxKeysPerRequest(dim),
        push ? call->grads : absl::Span<const float>(), push ? dim : 0);
    if (!call->plan.rows_finite) {
      // Before any request is sent: nothing is applied anywhere.
      return Finish(call, absl::InvalidArgumentError(absl::StrFormat(
                              "push to table \"%s\" has a NaN or Inf gradient; nothing was applied",
                              call->table->name)));
    }
    if (call->kind == SparseCall::Kind::kPush && call->plan.unique.size() < call->keys.size()) {
      // Repeated keys: sum their gradients first. Without repeats, unique[j] is
      // keys[plan.order[j]] and Send gathers the caller's gradients directly.
      std::vector<float> sums(call->plan.unique.size() * dim, 0.0f);
      const float* grads = call->grads.data();
      for (size_t p = 0; p < call->keys.size(); ++p) {
        float* dst = sums.data() + size_t{call->plan.unique_of[p]} * dim;
        const float* src = grads + size_t{call->plan.order[p]} * dim;
        for (uint32_t j = 0; j < dim; ++j) dst[j] += src[j];
      }
      call->grad_sums = std::move(sums);
    }
    std::vector<std::unique_ptr<SparseCall::Request>> requests;
    for (Part& part : call->plan.parts) {
      auto request = std::make_unique<SparseCall::Request>();
      request->part = std::move(part);
      if (call->kind == SparseCall::Kind::kPush) {
        request->sequence = next_sequence_.fetch_add(1, std::memory_order_relaxed);
      }
      requests.push_back(std::move(request));
    }
    call->plan.parts.clear();
    if (requests.empty()) return Finish(call, absl::OkStatus());
    Send(call, routing, std::move(requests), /*on_caller=*/true);
  }

  // Writes the keys of `request` at `keys_out` and, for a push, its gradients at `grads_out`.
  static void WritePayload(const SparseCall& call, const SparseCall::Request& request,
                           char* keys_out, char* grads_out) {
    const uint32_t dim = call.table->dim;
    const size_t row_bytes = size_t{dim} * sizeof(float);
    for (const Segment& seg : request.part.segments) {
      std::memcpy(keys_out, call.plan.unique.data() + seg.begin, seg.count * sizeof(uint64_t));
      keys_out += seg.count * sizeof(uint64_t);
    }
    if (call.kind != SparseCall::Kind::kPush) return;
    char* g = grads_out;
    for (const Segment& seg : request.part.segments) {
      if (call.grad_sums.empty()) {
        const uint32_t end = seg.begin + seg.count;
        for (uint32_t j = seg.begin; j < end; ++j) {
          if (j + kPrefetchRows < end) {
            PrefetchRow<false>(call.grads.data() + size_t{call.plan.order[j + kPrefetchRows]} * dim,
                               row_bytes);
          }
          std::memcpy(g, call.grads.data() + size_t{call.plan.order[j]} * dim, row_bytes);
          g += row_bytes;
        }
      } else {
        const size_t bytes = size_t{seg.count} * row_bytes;
        std::memcpy(g, call.grad_sums.data() + size_t{seg.begin} * dim, bytes);
        g += bytes;
      }
    }
  }

  // Writes the message of `request`, routed with `routing`, to go to `conn`: its keys and
  // gradients in a slot of the region `conn` lent when there is one free, else in the message.
  void Encode(const SparseCall& call, const Routing& routing,
              const std::shared_ptr<ServerConnection>& conn, SparseCall::Request* request) {
    const uint32_t dim = call.table->dim;
    // The small fields through protobuf; keys and gradients written in place after them.
    rpc::PushRequest fields;  // a PullRequest's fields are a prefix of a PushRequest's
    rpc::RequestHeader* header = fields.mutable_header();
    header->set_map_version(routing.version);
    header->set_worker_id(worker_id_);
    header->set_sequence(request->sequence);
    header->set_clock(call.clock);
    fields.set_table(call.table->name);
    for (const Segment& seg : request->part.segments) {
      rpc::ShardRun* run = fields.add_runs();
      run->set_shard(seg.shard);
      run->set_count(seg.count);
    }
    const bool push = call.kind == SparseCall::Kind::kPush;
    const size_t num_keys = request->part.num_keys;
    const size_t row_bytes = size_t{dim} * sizeof(float);
    const size_t key_bytes = num_keys * sizeof(uint64_t);
    const size_t grad_bytes = push ? num_keys * row_bytes : 0;
    request->conn = conn;
    if (std::shared_ptr<client_internal::SharedRegion> region = SharedRegionOf(conn.get());
        region != nullptr && key_bytes + grad_bytes <= region->slot_bytes() &&
        num_keys * row_bytes <= region->slot_bytes()) {
      const int slot = region->Acquire();
      if (slot >= 0) {
        char* at = reinterpret_cast<char*>(region->slot(static_cast<uint32_t>(slot)));
        WritePayload(call, *request, at, at + key_bytes);
        rpc::SharedSlot* shared = fields.mutable_shared();
        shared->set_region(region->id());
        shared->set_secret(region->secret());
        shared->set_slot(static_cast<uint32_t>(slot));
        shared->set_keys_bytes(key_bytes);
        shared->set_grads_bytes(grad_bytes);
        request->slot = slot;
        request->region = std::move(region);
        if (request->region->calls()) {
          request->in_region = true;
          request->region_message = std::move(fields);
          return;
        }
        MessageWriter writer(fields.ByteSizeLong());
        writer.AppendMessage(fields);
        request->request_bytes = writer.Finish();
        return;
      }
    }
    MessageWriter writer(fields.ByteSizeLong() + 2 * MessageWriter::kFieldOverheadBytes +
                         key_bytes + grad_bytes);
    writer.AppendMessage(fields);
    char* keys_out = writer.AppendBytesField(kKeysField, key_bytes);
    char* grads_out = push ? writer.AppendBytesField(kGradsField, grad_bytes) : nullptr;
    WritePayload(call, *request, keys_out, grads_out);
    request->request_bytes = writer.Finish();
  }

  // The region `conn`'s server lent this client, opened on first use; null when shared memory is
  // off, or the server is on another host or lends none (then never asked again), or it could
  // not be asked just now.
  std::shared_ptr<client_internal::SharedRegion> SharedRegionOf(ServerConnection* conn) {
    if (!options_.shared_memory) return nullptr;
    absl::MutexLock lock(&conn->region_mu);
    if (conn->region != nullptr || conn->region_off) return conn->region;
    if (++conn->region_opens > kMaxRegionOpens) {
      conn->region_off = true;
      return nullptr;
    }
    // Slots for the requests a few calls may have in flight, each for a whole request of the
    // job's widest table; fewer for wide tables, so that a region stays near 64 MiB.
    uint32_t max_dim = 1;
    for (const TableInfo& table : tables_) max_dim = std::max(max_dim, table.dim);
    const uint64_t slot_bytes = std::min<uint64_t>(
        uint64_t{MaxKeysPerRequest(max_dim)} * (sizeof(uint64_t) + max_dim * sizeof(float)),
        kMaxSharedSlotBytes);
    const uint32_t slots = static_cast<uint32_t>(
        std::clamp<uint64_t>((uint64_t{64} << 20) / slot_bytes, 2,
                             4 * static_cast<uint64_t>(options_.channels_per_server)));
    rpc::OpenSharedRegionRequest open;
    open.set_slots(std::min<uint32_t>(slots, kMaxSharedSlots));
    open.set_slot_bytes(slot_bytes);
    rpc::OpenSharedRegionResponse lent;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kRegionOpenTimeout));
    const absl::Status opened =
        FromGrpcStatus(conn->Stub()->OpenSharedRegion(&context, open, &lent));
    if (!opened.ok()) {
      // Unreachable for now: asked again by a later request. Otherwise it lends none to us.
      if (!absl::IsUnavailable(opened) && !absl::IsDeadlineExceeded(opened)) {
        conn->region_off = true;
      }
      return nullptr;
    }
    absl::StatusOr<std::unique_ptr<client_internal::SharedRegion>> mapped =
        client_internal::SharedRegion::Map(lent, options_.shared_memory_calls);
    if (!mapped.ok()) {
      // Another host (or user, or pid namespace): give the memory back and use the channel.
      conn->region_off = true;
      CloseSharedRegion(conn, lent.region(), lent.secret());
      return nullptr;
    }
    conn->region = std::move(*mapped);
    return conn->region;
  }

  // Whether `status` is a server's refusal of a request's shared slot (SharedRegions::Find: its
  // messages name the "shared region") rather than of the request itself, or says that the
  // server that lent the region exited (SharedRegion::Call).
  static bool IsSharedRegionRefusal(const absl::Status& status) {
    return (absl::IsFailedPrecondition(status) || absl::IsPermissionDenied(status) ||
            absl::IsUnavailable(status)) &&
           absl::StrContains(status.message(), "shared region");
  }

  // Forgets `region` as `conn`'s (if it still is), so that the next request opens another.
  static void DropSharedRegion(ServerConnection* conn,
                               const client_internal::SharedRegion* region) {
    absl::MutexLock lock(&conn->region_mu);
    if (conn->region.get() == region) conn->region.reset();
  }

  // Gives a lent region back to its server (best effort: an unused one expires there anyway).
  static void CloseSharedRegion(ServerConnection* conn, uint64_t region,
                                const std::string& secret) {
    rpc::CloseSharedRegionRequest close;
    close.set_region(region);
    close.set_secret(secret);
    rpc::CloseSharedRegionResponse closed;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kRegionCloseTimeout));
    conn->Stub()->CloseSharedRegion(&context, close, &closed).ok();
  }

  // Encodes and sends `requests` with `routing`; their completions drive the call on.
  // `on_caller`: this is the thread that started the call (not a retry's).
  void Send(const std::shared_ptr<SparseCall>& call, const std::shared_ptr<const Routing>& routing,
            std::vector<std::unique_ptr<SparseCall::Request>> requests, bool on_caller = false) {
    const bool wait_here = on_caller && call->caller_waits && requests.size() == 1;
    {
      absl::MutexLock lock(&call->mu);
      call->outstanding += static_cast<int>(requests.size());
    }
    const char* method = call->kind == SparseCall::Kind::kPush ? kPushMethod : kPullMethod;
    bool first = true;
    for (auto& owned : requests) {
      SparseCall::Request* request = owned.release();
      request->routed_version = routing->version;
      // A shard without a live copy: its rows are gone, and no server may make them up.
      const auto lost =
          std::find_if(request->part.segments.begin(), request->part.segments.end(),
                       [&](const Segment& seg) { return routing->map.shards(seg.shard).lost(); });
      if (lost != request->part.segments.end()) {
        OnDone(call, request,
               ToGrpcStatus(absl::DataLossError(absl::StrFormat(
                   "shard %d of table \"%s\" lost every copy (shard map version %d); its rows "
                   "come back only from a checkpoint",
                   lost->shard, call->table->name, routing->version))));
        continue;
      }
      // The first request is started here, the others by the send pool if there is one.
      auto start = [this, call, routing, request, method, wait_here] {
        const std::shared_ptr<ServerConnection>& conn = routing->servers.at(request->part.server);
        Encode(*call, *routing, conn, request);
        if (request->in_region) {
          const uint32_t region_method =
              call->kind == SparseCall::Kind::kPush ? kSharedCallPush : kSharedCallPull;
          if (request->region->Call(
                  request->slot, region_method, request->region_message, request->part.num_keys,
                  absl::Now() + options_.request_timeout,
                  [this, call, request](const absl::Status& status, std::string response,
                                        bool answered) {
                    request->region_answered = answered;
                    grpc::Slice slice(response);
                    request->response_bytes = grpc::ByteBuffer(&slice, 1);
                    OnDone(call, request, ToGrpcStatus(status));
                  },
                  wait_here)) {
            return;
          }
          // Not made in the region (too large for a call page, or the region closed): an RPC,
          // its payload in the slot.
          request->in_region = false;
          MessageWriter writer(request->region_message.ByteSizeLong());
          writer.AppendMessage(request->region_message);
          request->request_bytes = writer.Finish();
        }
        // A context only for an RPC: a call made in the region has its deadline in the call.
        request->context = std::make_unique<grpc::ClientContext>();
        request->context->set_deadline(absl::ToChronoTime(absl::Now() + options_.request_timeout));
        conn->GenericStub()->UnaryCall(
            request->context.get(), method, grpc::StubOptions(), &request->request_bytes,
            &request->response_bytes,
            [this, call, request](grpc::Status status) { OnDone(call, request, status); });
      };
      if (send_pool_ != nullptr && !first) {
        send_pool_->Run(std::move(start));
      } else {
        start();
      }
      first = false;
    }
  }

  // The server a request went to, for messages.
  static std::string PeerOf(const SparseCall::Request& request) {
    if (request.in_region) return absl::StrCat(request.conn->address, " (in shared memory)");
    return request.context->peer();
  }

  void OnDone(const std::shared_ptr<SparseCall>& call, SparseCall::Request* raw,
              const grpc::Status& grpc_status) {
    std::unique_ptr<SparseCall::Request> request(raw);
    absl::Status status = FromGrpcStatus(grpc_status);
    const uint32_t dim = call->table->dim;
    if (status.ok() && call->kind == SparseCall::Kind::kPush) {
      rpc::PushResponse response;
      status = FromGrpcStatus(grpc::SerializationTraits<rpc::PushResponse>::Deserialize(
          &request->response_bytes, &response));
    } else if (status.ok()) {
      PullResponseReader values;
      status = values.Parse(request->response_bytes);
      if (status.ok() && values.values_in_slot()) {
        if (request->slot < 0) {
          status = absl::InternalError(absl::StrFormat(
              "server %s answered rows in a shared slot to a request that named none",
              PeerOf(*request)));
        } else {
          values.ReadFromSlot(request->region->slot(static_cast<uint32_t>(request->slot)),
                              size_t{request->part.num_keys} * dim * sizeof(float));
        }
      }
      if (status.ok() &&
          values.values_size() != size_t{request->part.num_keys} * dim * sizeof(float)) {
        status = absl::InternalError(
            absl::StrFormat("server %s answered %d bytes for %d keys of dim %d", PeerOf(*request),
                            values.values_size(), request->part.num_keys, dim));
      }
      if (status.ok()) {
        // Scatter this response's rows, straight from gRPC's slices, to every position of their
        // keys, here on the gRPC thread that received it, while other responses are still on
        // their way.
        const KeyPlan& plan = call->plan;
        float* out = call->values.data();
        const size_t row_bytes = size_t{dim} * sizeof(float);
        size_t rows = 0;  // byte offset in the values of the segment's first row
        for (const Segment& seg : request->part.segments) {
          const uint32_t end = seg.begin + seg.count;
          const uint32_t shard_end = plan.shard_end[seg.shard];
          for (uint32_t p = plan.shard_begin[seg.shard]; p < shard_end; ++p) {
            if (p + kPrefetchRows < shard_end) {
              PrefetchRow<true>(out + size_t{plan.order[p + kPrefetchRows]} * dim, row_bytes);
            }
            const uint32_t u = plan.unique_of[p];
            if (u < seg.begin || u >= end) continue;  // in another part of a split shard
            values.Copy(rows + size_t{u - seg.begin} * row_bytes, row_bytes,
                        out + size_t{plan.order[p]} * dim);
          }
          rows += size_t{seg.count} * row_bytes;
        }
      }
    }
    if (request->slot >= 0) {
      // The server answered: the slot is free again. Otherwise it may still read or write it.
      if (grpc_status.ok() || request->region_answered) {
        request->region->Release(request->slot);
      } else {
        request->region->Retire(request->slot);
      }
      if (!grpc_status.ok() && IsSharedRegionRefusal(status)) {
        // The region is gone (the server restarted or expired it): open another, and resend.
        DropSharedRegion(request->conn.get(), request->region.get());
        status = absl::UnavailableError(absl::StrCat(status.message(), "; resent"));
      }
      request->slot = -1;
      request->region.reset();
      request->in_region = false;
      request->region_answered = false;
    }
    // A request that is done with (rows scattered, push applied, or failed for good) is freed
    // here, before the call can finish: once it has, the caller may destroy this client, and
    // with it the channels that the request's ClientContext refers to.
    const bool retry = !status.ok() && IsRetryable(status);
    if (absl::IsUnavailable(status)) {
      // Perhaps the server is gone: the coordinator checks at once and fails it over.
      coordinator_->ReportFailureAsync(worker_id_, request->part.server,
                                       std::string(status.message()));
    }
    if (!retry) request.reset();
    bool round_over = false;
    {
      absl::MutexLock lock(&call->mu);
      if (retry) {
        call->last_retryable = status;
        call->to_retry.push_back(std::move(request));
      } else if (!status.ok() && call->error.ok()) {
        call->error = status;
      }
      round_over = --call->outstanding == 0;
    }
    if (round_over) EndRound(call);
  }

  // Called when no request of the call is in flight: finish, or retry what failed.
  void EndRound(const std::shared_ptr<SparseCall>& call) {
    std::vector<std::unique_ptr<SparseCall::Request>> retry;
    absl::Status error;
    absl::Status last_retryable;
    {
      absl::MutexLock lock(&call->mu);
      retry = std::move(call->to_retry);
      call->to_retry.clear();
      error = call->error;
      last_retryable = call->last_retryable;
    }
    // Requests are freed before Finish (see OnDone).
    if (!error.ok()) {
      retry.clear();
      return Finish(call, error);
    }
    if (retry.empty()) return Finish(call, absl::OkStatus());
    if (absl::Now() + call->backoff > call->deadline) {
      retry.clear();
      return Finish(call, last_retryable);
    }
    const absl::Time when = absl::Now() + call->backoff;
    call->backoff = std::min(call->backoff * 2, absl::Seconds(1));
    auto shared_retry =
        std::make_shared<std::vector<std::unique_ptr<SparseCall::Request>>>(std::move(retry));
    scheduler_.At(when, [this, call, shared_retry, last_retryable] {
      uint64_t routed = std::numeric_limits<uint64_t>::max();
      for (const auto& r : *shared_retry) routed = std::min(routed, r->routed_version);
      const bool changed = RefreshMap(routed);
      if (!changed && last_retryable.code() == absl::StatusCode::kFailedPrecondition) {
        // The server refuses a shard and no newer map exists: not a stale map.
        shared_retry->clear();
        return Finish(call, last_retryable);
      }
      const std::shared_ptr<const Routing> routing = CurrentRouting();
      std::vector<std::unique_ptr<SparseCall::Request>> resend;
      for (auto& old : *shared_retry) {
        for (Part& part : client_internal::Reroute(old->part, routing->shard_to_server)) {
          auto request = std::make_unique<SparseCall::Request>();
          request->part = std::move(part);
          request->sequence = old->sequence;
          resend.push_back(std::move(request));
        }
      }
      shared_retry->clear();
      Send(call, routing, std::move(resend));
    });
  }

  void Finish(const std::shared_ptr<SparseCall>& call, absl::Status status) {
    Callback done = std::move(call->done);
    done(std::move(status));
    absl::MutexLock lock(&calls_mu_);
    --calls_in_flight_;
  }

  // Dense tensors: chunks of chunk_floats floats, each on the shard of (name, chunk).
  struct DenseRoute {
    uint32_t server;
    std::vector<uint32_t> chunks;
  };
  std::vector<DenseRoute> RouteDense(absl::string_view name, uint64_t total_floats,
                                     const Routing& routing) const {
    const uint64_t chunk_floats = job_.cluster().dense_chunk_floats();
    const uint64_t num_chunks = (total_floats + chunk_floats - 1) / chunk_floats;
    const uint64_t per_request =
        std::max<uint64_t>(1, (max_message_bytes_ / 2) / (chunk_floats * sizeof(float)));
    const uint64_t name_hash = NameHash(name);
    std::vector<DenseRoute> routes;
    absl::flat_hash_map<uint32_t, size_t> open;  // server -> index of its unfilled route
    for (uint64_t c = 0; c < num_chunks; ++c) {
      const uint32_t shard =
          ShardOf(name_hash, c, static_cast<uint32_t>(routing.shard_to_server.size()));
      const uint32_t server = routing.shard_to_server[shard];
      auto it = open.find(server);
      if (it == open.end() || routes[it->second].chunks.size() >= per_request) {
        routes.push_back(DenseRoute{server, {}});
        open[server] = routes.size() - 1;
        it = open.find(server);
      }
      routes[it->second].chunks.push_back(static_cast<uint32_t>(c));
    }
    return routes;
  }

  // Runs `attempt` until it succeeds, fails for good, or retry_timeout passes.
  absl::Status RetryDense(const std::function<absl::Status(const Routing&)>& attempt) {
    const absl::Time deadline = absl::Now() + options_.retry_timeout;
    absl::Duration backoff = absl::Milliseconds(5);
    while (true) {
      const std::shared_ptr<const Routing> routing = CurrentRouting();
      absl::Status status = attempt(*routing);
      if (status.ok() || !IsRetryable(status)) return status;
      if (absl::Now() + backoff > deadline) return status;
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(1));
      const bool changed = RefreshMap(routing->version);
      if (!changed && status.code() == absl::StatusCode::kFailedPrecondition) return status;
    }
  }

  // Returns `status`; an UNAVAILABLE one is first reported to the coordinator, which checks
  // whether server `server_id` is gone and fails it over at once.
  absl::Status Reported(uint32_t server_id, absl::Status status) {
    if (absl::IsUnavailable(status)) {
      coordinator_->ReportFailureAsync(worker_id_, server_id, std::string(status.message()));
    }
    return status;
  }

  void FillHeader(const Routing& routing, rpc::RequestHeader* header) {
    header->set_map_version(routing.version);
    header->set_worker_id(worker_id_);
    header->set_clock(clock_.load(std::memory_order_relaxed));
  }

  const ClientOptions options_;
  const std::unique_ptr<CoordinatorClient> coordinator_;
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

  mutable absl::Mutex routing_mu_;
  std::shared_ptr<const Routing> routing_ ABSL_GUARDED_BY(routing_mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<ServerConnection>> connections_
      ABSL_GUARDED_BY(routing_mu_);

  absl::Mutex calls_mu_;
  int calls_in_flight_ ABSL_GUARDED_BY(calls_mu_) = 0;

  Scheduler scheduler_;
  // Null without send threads. Last, so that it goes first: the destructor has waited for every
  // call, so none of its tasks is left by then.
  std::unique_ptr<client_internal::SendPool> send_pool_;
};

absl::StatusOr<int64_t> ClientImpl::EndStep(int64_t step) {
  if (job_.training().mode() != config::Training::SYNC) return int64_t{-1};
  int64_t applied = -1;
  PS_RETURN_IF_ERROR(RetryDense([&](const Routing& routing) -> absl::Status {
    for (const auto& [server_id, connection] : routing.servers) {
      // A dead server's shards have moved to the others, which count the steps it would have.
      const auto& servers = routing.map.servers();
      // A copy: C++17 lambdas cannot capture a structured binding (clang refuses it).
      const auto id = server_id;
      const bool dead = std::any_of(servers.begin(), servers.end(), [&](const rpc::ServerInfo& s) {
        return s.server_id() == id && !s.alive();
      });
      if (dead) continue;
      rpc::EndStepRequest request;
      FillHeader(routing, request.mutable_header());
      request.mutable_header()->set_clock(step);
      rpc::EndStepResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + options_.request_timeout));
      PS_RETURN_IF_ERROR(Reported(
          server_id, FromGrpcStatus(connection->Stub()->EndStep(&context, request, &response))));
      applied = std::max(applied, response.applied_step());
    }
    return absl::OkStatus();
  }));
  return applied;
}

absl::Status ClientImpl::PullDense(absl::string_view name, absl::Span<float> values) {
  const uint64_t chunk_floats = job_.cluster().dense_chunk_floats();
  return RetryDense([&](const Routing& routing) -> absl::Status {
    for (const DenseRoute& route : RouteDense(name, values.size(), routing)) {
      rpc::PullDenseRequest request;
      FillHeader(routing, request.mutable_header());
      request.set_name(std::string(name));
      for (uint32_t c : route.chunks) request.add_chunks(c);
      rpc::PullDenseResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + options_.request_timeout));
      PS_RETURN_IF_ERROR(Reported(
          route.server,
          FromGrpcStatus(
              routing.servers.at(route.server)->Stub()->PullDense(&context, request, &response))));
      PS_RETURN_IF_ERROR(client_internal::CopyDenseChunks(name, response, chunk_floats, values));
    }
    return absl::OkStatus();
  });
}

absl::Status ClientImpl::PushDense(absl::string_view name, absl::Span<const float> values,
                                   DenseUpdate update) {
  if (name.empty()) return absl::InvalidArgumentError("dense tensor without a name");
  if (!AllFinite(values.data(), values.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense tensor \"%s\" has a NaN or Inf value; nothing was applied", name));
  }
  const uint64_t chunk_floats = job_.cluster().dense_chunk_floats();
  // Each server's chunks go in one request (or a few); a retry resends all of them. Assign is
  // idempotent; a gradient retried after a lost acknowledgement must not apply twice, so chunk c
  // carries the sequence `sequence + c`, which its shard admits once (like sparse pushes).
  const uint64_t num_chunks = (values.size() + chunk_floats - 1) / chunk_floats;
  const uint64_t sequence =
      next_sequence_.fetch_add(std::max<uint64_t>(1, num_chunks), std::memory_order_relaxed);
  return RetryDense([&](const Routing& routing) -> absl::Status {
    for (const DenseRoute& route : RouteDense(name, values.size(), routing)) {
      rpc::PushDenseRequest request;
      FillHeader(routing, request.mutable_header());
      request.mutable_header()->set_sequence(sequence);
      client_internal::SetPushDenseBody(name, values, chunk_floats, route.chunks,
                                        update == DenseUpdate::kAssign
                                            ? rpc::PushDenseRequest::ASSIGN
                                            : rpc::PushDenseRequest::GRADIENT,
                                        &request);
      rpc::PushDenseResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + options_.request_timeout));
      PS_RETURN_IF_ERROR(Reported(
          route.server,
          FromGrpcStatus(
              routing.servers.at(route.server)->Stub()->PushDense(&context, request, &response))));
    }
    return absl::OkStatus();
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError("ClientOptions.coordinator is empty");
  }
  if (options.channels_per_server < 1 || options.max_keys_per_request < 1) {
    return absl::InvalidArgumentError("channels_per_server and max_keys_per_request must be >= 1");
  }
  if (options.send_threads < -1 || options.send_threads > 64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "send_threads must be -1 (automatic) or in [0, 64], got %d", options.send_threads));
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> coordinator,
                      CoordinatorClient::Connect(options.coordinator, options.connect_timeout,
                                                 options.credentials));
  PS_ASSIGN_OR_RETURN(rpc::RegisterResponse registration,
                      coordinator->Register(options.role, "", options.rank));
  if (options.on_coordinator_lost) {
    coordinator->SetOnCoordinatorLost(options.coordinator_lost_after, options.on_coordinator_lost);
  }
  if (options.on_job_failed) coordinator->SetOnJobFailed(options.on_job_failed);
  PS_RETURN_IF_ERROR(coordinator->StartHeartbeats(
      registration.member_id(), absl::Milliseconds(registration.heartbeat_interval_ms())));
  auto client = std::make_unique<ClientImpl>(options, std::move(coordinator), registration);
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

std::future<absl::Status> Client::PushAsync(absl::string_view table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<const float> grads) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> future = promise->get_future();
  PushAsync(table, keys, grads, [promise](absl::Status s) { promise->set_value(std::move(s)); });
  return future;
}

}  // namespace ps

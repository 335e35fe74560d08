#include "server/ps_service.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/grpc/wire.h"
#include "common/grpc_status.h"
#include "common/shared_region_layout.h"
#include "common/status_macros.h"
#include "server/checkpoint/server_checkpoint.h"
#include "server/replication/replicate_wire.h"

namespace ps {
namespace server {
namespace {

// Wire bytes of a PullResponse's fields (proto/ps.proto): values = 1 (length-delimited), dim = 2
// (varint).
constexpr uint8_t kValuesTag = (1 << 3) | 2;
constexpr uint8_t kDimTag = (2 << 3) | 0;
// Room before the rows for the values field's tag and length (at most 1 + 10 bytes); a multiple
// of 16 keeps the rows as aligned as malloc's memory.
constexpr size_t kPrefixBytes = 16;
// Room after the rows for the dim field (tag and a uint32 varint).
constexpr size_t kSuffixBytes = 1 + 5;

// A PullResponse being built in one malloc'ed buffer that becomes the slice gRPC sends:
// [values tag, length][rows][dim tag, dim], with the rows aligned.
class PullResponseFrame {
 public:
  PullResponseFrame() = default;
  PullResponseFrame(const PullResponseFrame&) = delete;
  PullResponseFrame& operator=(const PullResponseFrame&) = delete;
  ~PullResponseFrame() { std::free(buffer_); }

  // Where to write num_keys * dim floats (uninitialised). Called at most once.
  float* Allocate(size_t num_keys, uint32_t dim) {
    rows_bytes_ = num_keys * dim * sizeof(float);
    dim_ = dim;
    buffer_ = static_cast<uint8_t*>(std::malloc(kPrefixBytes + rows_bytes_ + kSuffixBytes));
    if (buffer_ == nullptr) std::abort();  // as operator new would
    return reinterpret_cast<float*>(buffer_ + kPrefixBytes);
  }

  // Frames the rows and hands the buffer to `response`; an empty response if Allocate was not
  // called.
  void Finish(grpc::ByteBuffer* response) {
    if (buffer_ == nullptr) return;
    const size_t header_bytes = 1 + grpc_util::VarintSize(rows_bytes_);
    uint8_t* begin = buffer_ + kPrefixBytes - header_bytes;
    begin[0] = kValuesTag;
    grpc_util::PutVarint(rows_bytes_, reinterpret_cast<char*>(begin + 1));
    uint8_t* end = buffer_ + kPrefixBytes + rows_bytes_;
    *end++ = kDimTag;
    end = reinterpret_cast<uint8_t*>(grpc_util::PutVarint(dim_, reinterpret_cast<char*>(end)));
    grpc::Slice slice(
        begin, static_cast<size_t>(end - begin), [](void* buffer) { std::free(buffer); }, buffer_);
    buffer_ = nullptr;  // owned by the slice
    grpc::ByteBuffer framed(&slice, 1);
    response->Swap(&framed);
  }

 private:
  uint8_t* buffer_ = nullptr;
  size_t rows_bytes_ = 0;
  uint32_t dim_ = 0;
};

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// INVALID_ARGUMENT: a request of `bytes` bytes does not parse as a `Message`.
template <typename Message>
absl::Status NotParsed(size_t bytes) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "the request (%d bytes) does not parse as a %s: a field of the wrong wire type, a length "
      "past the end of the message, or a string field that is not UTF-8",
      bytes, Message::descriptor()->full_name()));
}

// Parses the bytes of a request into `message`; INVALID_ARGUMENT naming the message type when
// they are not one.
template <typename Message>
absl::Status ParseRequest(const grpc::ByteBuffer& bytes, Message* message) {
  grpc::ByteBuffer copy(bytes);  // Deserialize consumes its buffer; the copy shares the slices
  if (grpc::SerializationTraits<Message>::Deserialize(&copy, message).ok()) {
    return absl::OkStatus();
  }
  return NotParsed<Message>(bytes.Length());
}

// The same for a request made in a shared region: its bytes were copied out of the call page.
template <typename Message>
absl::Status ParseRequest(const std::string& bytes, Message* message) {
  if (message->ParseFromString(bytes)) return absl::OkStatus();
  return NotParsed<Message>(bytes.size());
}

// A request made in a shared region carries its payload in the call's own slot.
template <typename Request>
absl::Status CheckCallSlot(const Request& request, const SharedRegions::Call& call) {
  if (!request.has_shared() || request.shared().region() != call.region() ||
      request.shared().slot() != call.slot()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a call made in slot %d of shared region %d must name that slot for its payload",
        call.slot(), call.region()));
  }
  return absl::OkStatus();
}

// The bytes of a small response, in one string.
std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// A call of a raw method: the parsed request, the response to serialise, and the reactor, which
// deletes itself once gRPC is done with the call.
template <typename Request, typename Response>
class ParsedCall final : public grpc::ServerUnaryReactor {
 public:
  explicit ParsedCall(grpc::ByteBuffer* out) : out_(out) {}

  // Finishes the call: with the response when `status` is OK, with `status` alone otherwise.
  void Reply(const absl::Status& status) {
    if (status.ok()) {
      bool own_buffer = false;
      const grpc::Status serialized =
          grpc::SerializationTraits<Response>::Serialize(response, out_, &own_buffer);
      if (!serialized.ok()) {
        Finish(serialized);
        return;
      }
    }
    Finish(ToGrpcStatus(status));
  }

  void OnDone() override { delete this; }

  Request request;
  Response response;
  // The call's share of the admission counts, given back once gRPC is done with it.
  Admission::Ticket ticket;

 private:
  grpc::ByteBuffer* const out_;
};

// A Pull or Push made in a shared region, parsed: as ParsedCall, answered in the call page.
template <typename Request, typename Response>
class SharedParsedCall {
 public:
  explicit SharedParsedCall(SharedRegions::Call call) : call_(std::move(call)) {}

  // Answers the call and deletes this: with the response when `status` is OK.
  void Reply(const absl::Status& status) {
    call_.Answer(status, status.ok() ? response.SerializeAsString() : std::string());
    delete this;
  }

  const SharedRegions::Call& call() const { return call_; }

  Request request;
  Response response;
  Admission::Ticket ticket;

 private:
  SharedRegions::Call call_;
};

// Starts a call of a raw method admitted as `admitted` says: the call, which has already answered
// the admission's refusal (RESOURCE_EXHAUSTED), or INVALID_ARGUMENT when the request does not
// parse (then *parsed is false). The call holds the ticket until gRPC is done with it.
template <typename Request, typename Response>
ParsedCall<Request, Response>* StartCall(const grpc::ByteBuffer* bytes, grpc::ByteBuffer* out,
                                         absl::StatusOr<Admission::Ticket> admitted, bool* parsed) {
  auto* call = new ParsedCall<Request, Response>(out);
  if (!admitted.ok()) {
    *parsed = false;
    call->Reply(admitted.status());
    return call;
  }
  call->ticket = *std::move(admitted);
  const absl::Status status = ParseRequest(*bytes, &call->request);
  *parsed = status.ok();
  if (!status.ok()) call->Reply(status);
  return call;
}

// Copies the keys and gradients of a request that names a shared slot (rule 9 of
// proto/ps.proto) out of the slot into the request's fields, so that everything after reads a
// private copy; `slot` gets the slot (for a pull's rows). INVALID_ARGUMENT when the request also
// carries them in the message, and the errors of SharedRegions::Find; FAILED_PRECONDITION
// when this server lends no shared memory.
template <typename Request>
absl::Status TakeFromSlot(SharedRegions* regions, Request* request, SharedRegions::Slot* slot) {
  if (regions == nullptr) {
    return absl::FailedPreconditionError(
        "the request names a slot of a shared region, and this server lends no shared memory");
  }
  const rpc::SharedSlot& shared = request->shared();
  if (!request->keys().empty()) {
    return absl::InvalidArgumentError(
        "the request carries keys both in the message and in a shared slot");
  }
  PS_ASSIGN_OR_RETURN(*slot, regions->Find(shared));
  const char* bytes = reinterpret_cast<const char*>(slot->data());
  request->mutable_keys()->assign(bytes, shared.keys_bytes());
  if constexpr (std::is_same_v<Request, rpc::PushRequest>) {
    if (!request->grads().empty()) {
      return absl::InvalidArgumentError(
          "the request carries gradients both in the message and in a shared slot");
    }
    request->mutable_grads()->assign(bytes + shared.keys_bytes(), shared.grads_bytes());
  } else if (shared.grads_bytes() != 0) {
    return absl::InvalidArgumentError("a pull's shared slot names gradients");
  }
  return absl::OkStatus();
}

// Reads the rows of `pull` into `response`: into `slot` when the request named one (the
// response then says so), else into a frame of their own.
absl::Status AnswerPull(ShardedStore* store, const rpc::PullRequest& pull,
                        const SharedRegions::Slot& slot, grpc::ByteBuffer* response) {
  if (slot.data() == nullptr) {
    PullResponseFrame frame;
    PS_RETURN_IF_ERROR(store->Pull(
        pull, [&frame](size_t num_keys, uint32_t dim) { return frame.Allocate(num_keys, dim); }));
    frame.Finish(response);
    return absl::OkStatus();
  }
  PullResponseFrame unused;  // for rows that do not fit the slot: refused below
  size_t rows_bytes = 0;
  uint32_t rows_dim = 0;
  PS_RETURN_IF_ERROR(store->Pull(pull, [&](size_t num_keys, uint32_t dim) {
    rows_bytes = num_keys * dim * sizeof(float);
    rows_dim = dim;
    return rows_bytes <= slot.size() ? reinterpret_cast<float*>(slot.data())
                                     : unused.Allocate(num_keys, dim);
  }));
  if (rows_bytes > slot.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the rows (%d bytes) do not fit the request's shared slot of %d bytes",
                        rows_bytes, slot.size()));
  }
  rpc::PullResponse in_slot;
  in_slot.set_dim(rows_dim);
  in_slot.set_values_in_slot(true);
  bool own_buffer = false;
  return FromGrpcStatus(
      grpc::SerializationTraits<rpc::PullResponse>::Serialize(in_slot, response, &own_buffer));
}

}  // namespace

ParameterServerService::ParameterServerService(std::function<void(uint64_t)> on_newer_map)
    : on_newer_map_(std::move(on_newer_map)) {}

absl::StatusOr<Admission::Ticket> ParameterServerService::Admit(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer& request) {
  if (admission_ == nullptr) return Admission::Ticket();
  return admission_->Admit(context->peer(), static_cast<int64_t>(request.Length()));
}

ShardedStore* ParameterServerService::Ready(const rpc::RequestHeader& header,
                                            absl::Status* status) {
  ShardedStore* store = store_.load(std::memory_order_acquire);
  if (store == nullptr) {
    *status = absl::UnavailableError("the server is starting");
    return nullptr;
  }
  const uint64_t mine = store->map_version();
  if (header.map_version() > mine) {
    on_newer_map_(header.map_version());
    *status = absl::UnavailableError(absl::StrFormat(
        "this server has shard map version %d, the request was routed with %d; retry", mine,
        header.map_version()));
    return nullptr;
  }
  return store;
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request_bytes,
                                                       grpc::ByteBuffer* response) {
  absl::StatusOr<Admission::Ticket> admitted = Admit(context, *request_bytes);
  if (!admitted.ok()) return Done(context, admitted.status());
  rpc::PullRequest request;
  const absl::Status status = ParseRequest(*request_bytes, &request);
  if (!status.ok()) return Done(context, status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  ServePull(std::move(request), *std::move(admitted), response,
            [reactor](const absl::Status& done) { reactor->Finish(ToGrpcStatus(done)); });
  return reactor;
}

void ParameterServerService::ServePull(rpc::PullRequest request, Admission::Ticket admitted,
                                       grpc::ByteBuffer* response,
                                       std::function<void(absl::Status)> finish) {
  absl::Status status;
  SharedRegions::Slot slot;  // empty unless the request names one
  if (request.has_shared()) {
    status = TakeFromSlot(shared_regions_, &request, &slot);
    if (!status.ok()) return finish(status);
  }
  ShardedStore* store = Ready(request.header(), &status);
  if (store == nullptr) return finish(status);
  // A pull for step t is answered once step t - 1 is applied (sync mode; at once otherwise).
  status = store->CheckPullStep(request.header().clock());
  if (!status.ok()) return finish(status);
  auto pull = std::make_shared<rpc::PullRequest>(std::move(request));
  // Held until the answer is written (a sync-mode pull may wait for its step).
  auto ticket = std::make_shared<Admission::Ticket>(std::move(admitted));
  store->RunWhenApplied(
      pull->header().clock() - 1,
      [store, pull, slot, ticket, response, finish = std::move(finish)](absl::Status ready) {
        if (ready.ok()) ready = AnswerPull(store, *pull, slot, response);
        ticket->Release();
        finish(ready);
      });
}

void ParameterServerService::ServeSharedCall(SharedRegions::Call call) {
  absl::StatusOr<Admission::Ticket> admitted =
      admission_ == nullptr
          ? Admission::Ticket()
          : admission_->Admit(call.peer(), static_cast<int64_t>(call.request().size()));
  if (!admitted.ok()) return call.Answer(admitted.status(), "");
  if (call.method() == kSharedCallPull) {
    rpc::PullRequest request;
    absl::Status status = ParseRequest(call.request(), &request);
    if (status.ok()) status = CheckCallSlot(request, call);
    if (!status.ok()) return call.Answer(status, "");
    // The response (a PullResponse saying the rows are in the slot) outlives this frame when the
    // pull waits for its step.
    auto answered = std::make_shared<std::pair<SharedRegions::Call, grpc::ByteBuffer>>();
    answered->first = std::move(call);
    ServePull(std::move(request), *std::move(admitted), &answered->second,
              [answered](const absl::Status& done) {
                answered->first.Answer(done, done.ok() ? Flatten(answered->second) : "");
              });
    return;
  }
  if (call.method() != kSharedCallPush) {
    return call.Answer(absl::InvalidArgumentError(absl::StrFormat(
                           "a call page names method %d, neither a pull (%d) nor a push (%d)",
                           call.method(), kSharedCallPull, kSharedCallPush)),
                       "");
  }
  auto* push = new SharedParsedCall<rpc::PushRequest, rpc::PushResponse>(std::move(call));
  push->ticket = *std::move(admitted);
  absl::Status status = ParseRequest(push->call().request(), &push->request);
  if (status.ok()) status = CheckCallSlot(push->request, push->call());
  SharedRegions::Slot slot;  // the payload is copied out; the slot is not needed after
  if (status.ok()) status = TakeFromSlot(shared_regions_, &push->request, &slot);
  if (!status.ok()) return push->Reply(status);
  ServeIfWorkerMayWrite(push, /*required=*/true,
                        [this](auto* checked_call) { ServePush(checked_call); });
}

void ParameterServerService::ReportLatePush(const rpc::RequestHeader& header, uint32_t keys) {
  // A progress line at most every 5 seconds, with the count since the last one.
  absl::MutexLock lock(&late_mu_);
  ++late_pushes_;
  late_keys_ += keys;
  const absl::Time now = absl::Now();
  if (now - last_late_report_ < absl::Seconds(5)) return;
  std::fprintf(stderr,
               "server %u: dropped %llu late pushes (%llu keys) for steps applied without them "
               "(sync quorum); latest: worker %u, step %lld\n",
               server_id_.load(), static_cast<unsigned long long>(late_pushes_),
               static_cast<unsigned long long>(late_keys_), header.worker_id(),
               static_cast<long long>(header.clock()));
  late_pushes_ = 0;
  late_keys_ = 0;
  last_late_report_ = now;
}

template <typename Call, typename Serve>
void ParameterServerService::ServeIfWorkerMayWrite(Call* call, bool required, Serve serve) {
  const uint32_t worker_id = call->request.header().worker_id();
  RegisteredWorkers* workers = workers_.load(std::memory_order_acquire);
  if (workers == nullptr || (worker_id == 0 && !required) || workers->Known(worker_id)) {
    serve(call);
    return;
  }
  workers->Check(worker_id, [call, serve](const absl::Status& checked) {
    if (checked.ok()) {
      serve(call);
    } else {
      call->Reply(checked);
    }
  });
}

grpc::ServerUnaryReactor* ParameterServerService::EndStep(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  bool parsed = false;
  auto* call = StartCall<rpc::EndStepRequest, rpc::EndStepResponse>(
      request, response, Admission::Ticket(), &parsed);  // exempt: see the class comment
  if (!parsed) return call;
  ServeIfWorkerMayWrite(call, /*required=*/false,
                        [this](auto* checked_call) { ServeEndStep(checked_call); });
  return call;
}

template <typename Call>
void ParameterServerService::ServeEndStep(Call* call) {
  const rpc::RequestHeader& header = call->request.header();
  absl::Status status;
  ShardedStore* store = Ready(header, &status);
  if (store == nullptr) return call->Reply(status);
  absl::StatusOr<int64_t> applied = store->EndStep(header.worker_id(), header.clock());
  if (applied.ok()) call->response.set_applied_step(*applied);
  call->Reply(applied.status());
}

grpc::ServerUnaryReactor* ParameterServerService::Push(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  bool parsed = false;
  auto* call = StartCall<rpc::PushRequest, rpc::PushResponse>(request, response,
                                                              Admit(context, *request), &parsed);
  if (!parsed) return call;
  if (call->request.has_shared()) {
    SharedRegions::Slot slot;  // the payload is copied out; the slot is not needed after
    const absl::Status taken = TakeFromSlot(shared_regions_, &call->request, &slot);
    if (!taken.ok()) {
      call->Reply(taken);
      return call;
    }
  }
  ServeIfWorkerMayWrite(call, /*required=*/true,
                        [this](auto* checked_call) { ServePush(checked_call); });
  return call;
}

template <typename Call>
void ParameterServerService::ServePush(Call* call) {
  absl::Status status;
  ShardedStore* store = Ready(call->request.header(), &status);
  if (store == nullptr) return call->Reply(status);
  uint32_t duplicates = 0;
  uint32_t late = 0;
  std::vector<std::pair<uint32_t, uint64_t>> replicated_at;
  status = store->Push(call->request, &duplicates, &late, &replicated_at);
  call->response.set_duplicate_keys(duplicates);
  call->response.set_late_keys(late);
  if (late > 0) ReportLatePush(call->request.header(), late);
  if (!status.ok() || replicated_at.empty()) return call->Reply(status);
  // Acknowledged once the shards' copies hold it (SYNC replication; at once otherwise).
  store->WhenReplicated(std::move(replicated_at),
                        [call](absl::Status replicated) { call->Reply(replicated); });
}

grpc::ServerUnaryReactor* ParameterServerService::PullDense(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  bool parsed = false;
  auto* call = StartCall<rpc::PullDenseRequest, rpc::PullDenseResponse>(
      request, response, Admit(context, *request), &parsed);
  if (!parsed) return call;
  absl::Status status;
  ShardedStore* store = Ready(call->request.header(), &status);
  if (store != nullptr) status = store->PullDense(call->request, &call->response);
  call->Reply(status);
  return call;
}

grpc::ServerUnaryReactor* ParameterServerService::PushDense(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  bool parsed = false;
  auto* call = StartCall<rpc::PushDenseRequest, rpc::PushDenseResponse>(
      request, response, Admit(context, *request), &parsed);
  if (!parsed) return call;
  // A gradient is admitted once per (worker_id, sequence): it needs a registered worker.
  const bool gradient = call->request.kind() == rpc::PushDenseRequest::GRADIENT;
  ServeIfWorkerMayWrite(call, /*required=*/gradient,
                        [this](auto* checked_call) { ServePushDense(checked_call); });
  return call;
}

template <typename Call>
void ParameterServerService::ServePushDense(Call* call) {
  absl::Status status;
  ShardedStore* store = Ready(call->request.header(), &status);
  if (store == nullptr) return call->Reply(status);
  std::vector<std::pair<uint32_t, uint64_t>> replicated_at;
  status = store->PushDense(call->request, &replicated_at);
  if (!status.ok() || replicated_at.empty()) return call->Reply(status);
  store->WhenReplicated(std::move(replicated_at),
                        [call](absl::Status replicated) { call->Reply(replicated); });
}

grpc::ServerUnaryReactor* ParameterServerService::Replicate(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  ShardedStore* store = store_.load(std::memory_order_acquire);
  if (store == nullptr) return Done(context, absl::UnavailableError("the server is starting"));
  // The records are read here, their rows left in gRPC's slices, and applied by the store.
  ReplicateRequestReader reader;
  absl::Status status = reader.Parse(*request);
  if (!status.ok()) return Done(context, status);
  rpc::ReplicateResponse acks;
  store->ApplyReplicated(reader.records(), &acks);
  // A copy this server does not know of yet is in a newer map: fetch it.
  for (const rpc::ShardAck& ack : acks.acks()) {
    if (ack.result() == rpc::ShardAck::NOT_HELD) {
      on_newer_map_(store->map_version() + 1);
      break;
    }
  }
  bool own_buffer = false;
  return Done(context, FromGrpcStatus(grpc::SerializationTraits<rpc::ReplicateResponse>::Serialize(
                           acks, response, &own_buffer)));
}

ParameterServerService::~ParameterServerService() {
  std::thread writer;
  {
    // Not joined under the lock: the writer takes it to say it is done.
    absl::MutexLock lock(&checkpoint_mu_);
    writer = std::move(checkpoint_writer_);
  }
  if (writer.joinable()) writer.join();
}

grpc::ServerUnaryReactor* ParameterServerService::RunOnCheckpointThread(
    grpc::CallbackServerContext* context, std::function<absl::Status()> work) {
  absl::MutexLock lock(&checkpoint_mu_);
  if (writing_checkpoint_) {
    return Done(context, absl::FailedPreconditionError("a checkpoint is being written"));
  }
  if (checkpoint_writer_.joinable()) checkpoint_writer_.join();
  writing_checkpoint_ = true;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  checkpoint_writer_ = std::thread([this, reactor, work = std::move(work)] {
    const absl::Status status = work();
    {
      absl::MutexLock lock(&checkpoint_mu_);
      writing_checkpoint_ = false;
    }
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::WriteCheckpoint(
    grpc::CallbackServerContext* context, const rpc::WriteCheckpointRequest* request,
    rpc::WriteCheckpointResponse* response) {
  absl::Status status;
  ShardedStore* store = Ready(request->header(), &status);
  if (store == nullptr) return Done(context, status);
  // No deadline reads as the end of time, which absl::FromChrono would overflow.
  absl::Time deadline = absl::InfiniteFuture();
  if (context->deadline() < std::chrono::system_clock::now() + std::chrono::hours(24 * 365)) {
    deadline = absl::FromChrono(context->deadline());
  }
  // Minutes of disk writes hold no gRPC thread.
  return RunOnCheckpointThread(context, [this, store, request, response, deadline] {
    const absl::Time start = absl::Now();
    absl::StatusOr<rpc::WriteCheckpointResponse> written =
        WriteServerCheckpoint(store, *request, deadline);
    if (checkpoint_durations_ != nullptr && written.ok()) {
      checkpoint_durations_->Observe(absl::ToDoubleSeconds(absl::Now() - start));
    }
    if (written.ok()) *response = *std::move(written);
    return written.status();
  });
}

grpc::ServerUnaryReactor* ParameterServerService::RestoreShards(
    grpc::CallbackServerContext* context, const rpc::RestoreShardsRequest* request,
    rpc::RestoreShardsResponse* response) {
  absl::Status status;
  ShardedStore* store = Ready(request->header(), &status);
  if (store == nullptr) return Done(context, status);
  // Reading the files holds no gRPC thread.
  return RunOnCheckpointThread(context, [this, store, request, response] {
    const absl::Time start = absl::Now();
    absl::StatusOr<rpc::RestoreShardsResponse> restored =
        RestoreServerShards(store, *request, CheckpointWriterThreads());
    if (restored.ok()) {
      *response = *std::move(restored);
      std::fprintf(stderr, "ps_server %u: restored %d shards (%llu rows) from %s in %.2f s\n",
                   server_id_.load(), request->shards_size(),
                   static_cast<unsigned long long>(response->rows()), request->path().c_str(),
                   absl::ToDoubleSeconds(absl::Now() - start));
    }
    return restored.status();
  });
}

grpc::ServerUnaryReactor* ParameterServerService::OpenSharedRegion(
    grpc::CallbackServerContext* context, const rpc::OpenSharedRegionRequest* request,
    rpc::OpenSharedRegionResponse* response) {
  if (shared_regions_ == nullptr) {
    return Done(context,
                absl::FailedPreconditionError(
                    "this server lends no shared memory (ps_server --shared_memory_mb=0)"));
  }
  absl::StatusOr<rpc::OpenSharedRegionResponse> opened =
      shared_regions_->Open(request->slots(), request->slot_bytes(), context->peer());
  if (opened.ok()) *response = *std::move(opened);
  return Done(context, opened.status());
}

grpc::ServerUnaryReactor* ParameterServerService::CloseSharedRegion(
    grpc::CallbackServerContext* context, const rpc::CloseSharedRegionRequest* request,
    rpc::CloseSharedRegionResponse* /*response*/) {
  if (shared_regions_ == nullptr) {
    return Done(context, absl::FailedPreconditionError("this server lends no shared memory"));
  }
  return Done(context, shared_regions_->Close(request->region(), request->secret()));
}

grpc::ServerUnaryReactor* ParameterServerService::GetStatus(grpc::CallbackServerContext* context,
                                                            const rpc::ServerStatusRequest* request,
                                                            rpc::ServerStatus* response) {
  ShardedStore* store = store_.load(std::memory_order_acquire);
  if (store == nullptr) return Done(context, absl::UnavailableError("the server is starting"));
  response->set_server_id(server_id_.load());
  const absl::Status filled = store->FillStatus(*request, response);
  if (filled.ok() && shared_regions_ != nullptr) shared_regions_->FillStatus(response);
  return Done(context, filled);
}

}  // namespace server
}  // namespace ps

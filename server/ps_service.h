// The gRPC face of a parameter server: decodes requests, checks that writes come from registered
// workers, hands them to the ShardedStore, encodes the answers. Thin by design; everything that
// can be tested without gRPC lives in the store.
#ifndef PS_SERVER_PS_SERVICE_H_
#define PS_SERVER_PS_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/registry.h"
#include "proto/ps.grpc.pb.h"
#include "server/admission.h"
#include "server/registered_workers.h"
#include "server/sharded_store.h"
#include "server/shared_regions.h"

namespace ps {
namespace server {

// The ParameterServer methods that clients and other servers call with large requests, parsed by
// the service itself (raw methods), so that a request that does not parse gets INVALID_ARGUMENT
// naming its message type, where gRPC's generated callback handler answers UNIMPLEMENTED with no
// message.
using ParameterServerBase = rpc::ParameterServer::WithRawCallbackMethod_Pull<
    rpc::ParameterServer::WithRawCallbackMethod_Push<
        rpc::ParameterServer::WithRawCallbackMethod_PullDense<
            rpc::ParameterServer::WithRawCallbackMethod_PushDense<
                rpc::ParameterServer::WithRawCallbackMethod_EndStep<
                    rpc::ParameterServer::WithRawCallbackMethod_Replicate<
                        rpc::ParameterServer::CallbackService>>>>>>;

// ParameterServerService serves the ParameterServer RPCs on gRPC's callback API. Thread-safe.
//
// Pull, Push, PullDense, PushDense and EndStep are raw methods: the service parses their requests
// (INVALID_ARGUMENT, naming the message type, for bytes that are not one). Pull's response is a
// PullResponse framed by hand around rows the store writes straight into the buffer gRPC sends,
// so the megabytes of a pull are neither zero-filled, nor serialised, nor copied into gRPC's
// slices. Replicate is raw too: a primary's records are read in place from gRPC's slices
// (ReplicateRequestReader), their rows written straight into the copies' tables.
//
// With SharedRegions set, a Pull or Push may carry its payload in a slot of a region lent to a
// client on this host (proto/ps.proto rule 9): its keys and gradients are copied out of the slot
// before anything else reads them, and a pull's rows are written into the slot.
//
// The writes that carry a worker id (Push, PushDense GRADIENT, and EndStep or PushDense ASSIGN
// when their worker_id is not 0) are refused with PERMISSION_DENIED when the worker id was never
// issued by the coordinator (RegisteredWorkers, once set); Push and PushDense GRADIENT also when
// it is 0. Replicate, between servers, carries none.
//
// With an Admission set, Pull, Push, PullDense and PushDense are admitted (by the gRPC peer and the
// request's size) before they are parsed, and refused RESOURCE_EXHAUSTED at once over a limit; a
// request holds its share until its answer is sent (a sync-mode pull waiting for its step
// included). EndStep, Replicate, GetStatus and WriteCheckpoint are exempt: they are small and few
// (one EndStep per worker and step, one Replicate stream per primary and copy, each bounded by its
// sender's window), and refusing them under a flood of pulls could stall a sync step or the
// replication that acknowledges pushes, which would hold the admitted requests longer still.
class ParameterServerService final : public ParameterServerBase {
 public:
  // `on_newer_map` is called (from a gRPC thread; it must not block) when a request was routed
  // with a newer shard map than the store has, so the owner can fetch it.
  explicit ParameterServerService(std::function<void(uint64_t)> on_newer_map);
  // Waits for a checkpoint being written.
  ~ParameterServerService() override;

  // Starts serving with `store` (not owned, outlives the service). Before this, every call answers
  // UNAVAILABLE: the server binds its port before it knows its job.
  void SetStore(ShardedStore* store) { store_.store(store, std::memory_order_release); }

  // Checks the worker ids of writes against `workers` (not owned, outlives the service; set it
  // before SetStore). Until it is set, worker ids are not checked (tests of the service alone).
  void SetRegisteredWorkers(RegisteredWorkers* workers) {
    workers_.store(workers, std::memory_order_release);
  }

  // Admits the data-path requests with `admission` (not owned, outlives the service; set it before
  // the server starts). None by default: no limit.
  void SetAdmission(Admission* admission) { admission_ = admission; }

  // Serves requests whose payload is in a slot of `regions` (not owned, outlives the service;
  // set it before the server starts), and lends them through OpenSharedRegion. None by default:
  // OpenSharedRegion and requests naming a slot are FAILED_PRECONDITION.
  void SetSharedRegions(SharedRegions* regions) { shared_regions_ = regions; }

  void SetServerId(uint32_t id) { server_id_.store(id); }

  // Observes the time each WriteCheckpoint takes, from its start to its shards being written
  // (not owned; outlives the service). Set it before the server starts; none by default.
  void SetCheckpointDurations(metrics::Histogram* durations) { checkpoint_durations_ = durations; }

  // `request` holds a PullRequest; `response` gets a PullResponse (nothing on error).
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  // `request` holds a PushRequest; `response` gets a PushResponse.
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  // PullDenseRequest, PullDenseResponse.
  grpc::ServerUnaryReactor* PullDense(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // PushDenseRequest, PushDenseResponse.
  grpc::ServerUnaryReactor* PushDense(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // EndStepRequest, EndStepResponse.
  grpc::ServerUnaryReactor* EndStep(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const rpc::ServerStatusRequest* request,
                                      rpc::ServerStatus* response) override;
  // Writes this server's shards of a checkpoint (WriteServerCheckpoint) on a thread of the
  // service's, one checkpoint at a time (FAILED_PRECONDITION while one is being written).
  grpc::ServerUnaryReactor* WriteCheckpoint(grpc::CallbackServerContext* context,
                                            const rpc::WriteCheckpointRequest* request,
                                            rpc::WriteCheckpointResponse* response) override;
  // Replaces this server's primary shards with a checkpoint's (RestoreServerShards) on the
  // thread that writes checkpoints: one checkpoint written or restored at a time
  // (FAILED_PRECONDITION while one is).
  grpc::ServerUnaryReactor* RestoreShards(grpc::CallbackServerContext* context,
                                          const rpc::RestoreShardsRequest* request,
                                          rpc::RestoreShardsResponse* response) override;
  // Rule 9 of proto/ps.proto: lends and takes back regions of shared memory (SharedRegions).
  grpc::ServerUnaryReactor* OpenSharedRegion(grpc::CallbackServerContext* context,
                                             const rpc::OpenSharedRegionRequest* request,
                                             rpc::OpenSharedRegionResponse* response) override;
  grpc::ServerUnaryReactor* CloseSharedRegion(grpc::CallbackServerContext* context,
                                              const rpc::CloseSharedRegionRequest* request,
                                              rpc::CloseSharedRegionResponse* response) override;
  // Serves a Pull or Push made in a shared region (rule 10 of proto/ps.proto; wired as
  // SharedRegions::Options::serve_call): admitted as the region's peer, then served as the RPC
  // would be, its request naming the call's own slot. Answers the call from whichever thread the
  // request finishes on.
  void ServeSharedCall(SharedRegions::Call call);

  // A primary's records for the copies this server holds; answered per shard in the response.
  grpc::ServerUnaryReactor* Replicate(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;

 private:
  // The store if serving and the request's map is not newer than the store's; otherwise null and
  // `status` says why (UNAVAILABLE, retryable).
  ShardedStore* Ready(const rpc::RequestHeader& header, absl::Status* status);

  // Runs `work` on the checkpoint thread, which writes or restores one checkpoint at a time
  // without holding a gRPC thread, and finishes the call with its status. A call while one runs
  // is answered FAILED_PRECONDITION at once.
  grpc::ServerUnaryReactor* RunOnCheckpointThread(grpc::CallbackServerContext* context,
                                                  std::function<absl::Status()> work);

  // Admits a request of the data path: an empty ticket without an Admission; RESOURCE_EXHAUSTED
  // over a limit.
  absl::StatusOr<Admission::Ticket> Admit(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer& request);

  // Writes a progress line about pushes dropped as late (sync quorum), at most every 5 s.
  void ReportLatePush(const rpc::RequestHeader& header, uint32_t keys);

  // Calls serve(call) when the request's worker_id may write: at once when it is known to be
  // issued, no RegisteredWorkers is set, or it is 0 and not `required`; otherwise once
  // RegisteredWorkers::Check said so. When Check refuses it, replies with its status instead.
  template <typename Call, typename Serve>
  void ServeIfWorkerMayWrite(Call* call, bool required, Serve serve);

  // A Pull's work once it is admitted and parsed, for both transports: `finish` gets its status
  // once the rows are written (into the request's slot, or `response`).
  void ServePull(rpc::PullRequest request, Admission::Ticket ticket, grpc::ByteBuffer* response,
                 std::function<void(absl::Status)> finish);

  // The methods' work once the request is parsed and its worker checked.
  template <typename Call>
  void ServePush(Call* call);
  template <typename Call>
  void ServePushDense(Call* call);
  template <typename Call>
  void ServeEndStep(Call* call);

  const std::function<void(uint64_t)> on_newer_map_;
  absl::Mutex late_mu_;
  uint64_t late_pushes_ ABSL_GUARDED_BY(late_mu_) = 0;
  uint64_t late_keys_ ABSL_GUARDED_BY(late_mu_) = 0;
  absl::Time last_late_report_ ABSL_GUARDED_BY(late_mu_) = absl::InfinitePast();
  std::atomic<ShardedStore*> store_{nullptr};
  std::atomic<RegisteredWorkers*> workers_{nullptr};
  absl::Mutex checkpoint_mu_;
  std::thread checkpoint_writer_ ABSL_GUARDED_BY(checkpoint_mu_);
  bool writing_checkpoint_ ABSL_GUARDED_BY(checkpoint_mu_) = false;
  std::atomic<uint32_t> server_id_{0};
  metrics::Histogram* checkpoint_durations_ = nullptr;
  Admission* admission_ = nullptr;
  SharedRegions* shared_regions_ = nullptr;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_PS_SERVICE_H_

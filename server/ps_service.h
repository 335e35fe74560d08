// The gRPC face of a parameter server: decodes requests, hands them to the ShardedStore, encodes
// the answers. Thin by design; everything that can be tested without gRPC lives in the store.
#ifndef PS_SERVER_PS_SERVICE_H_
#define PS_SERVER_PS_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps.grpc.pb.h"
#include "server/sharded_store.h"

namespace ps {
namespace server {

// ParameterServerService serves the ParameterServer RPCs on gRPC's callback API. Thread-safe.
//
// Pull is a raw method: its response is a PullResponse framed by hand around rows the store
// writes straight into the buffer gRPC sends, so the megabytes of a pull are neither zero-filled,
// nor serialised, nor copied into gRPC's slices.
class ParameterServerService final : public rpc::ParameterServer::WithRawCallbackMethod_Pull<
                                         rpc::ParameterServer::CallbackService> {
 public:
  // `on_newer_map` is called (from a gRPC thread; it must not block) when a request was routed
  // with a newer shard map than the store has, so the owner can fetch it.
  explicit ParameterServerService(std::function<void(uint64_t)> on_newer_map);
  // Waits for a checkpoint being written.
  ~ParameterServerService() override;

  // Starts serving with `store` (not owned, outlives the service). Before this, every call answers
  // UNAVAILABLE: the server binds its port before it knows its job.
  void SetStore(ShardedStore* store) { store_.store(store, std::memory_order_release); }

  void SetServerId(uint32_t id) { server_id_.store(id); }

  // `request` holds a PullRequest; `response` gets a PullResponse (nothing on error).
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const rpc::PushRequest* request,
                                 rpc::PushResponse* response) override;
  grpc::ServerUnaryReactor* PullDense(grpc::CallbackServerContext* context,
                                      const rpc::PullDenseRequest* request,
                                      rpc::PullDenseResponse* response) override;
  grpc::ServerUnaryReactor* PushDense(grpc::CallbackServerContext* context,
                                      const rpc::PushDenseRequest* request,
                                      rpc::PushDenseResponse* response) override;
  grpc::ServerUnaryReactor* EndStep(grpc::CallbackServerContext* context,
                                    const rpc::EndStepRequest* request,
                                    rpc::EndStepResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const rpc::ServerStatusRequest* request,
                                      rpc::ServerStatus* response) override;
  // Writes this server's shards of a checkpoint (WriteServerCheckpoint) on a thread of the
  // service's, one checkpoint at a time (FAILED_PRECONDITION while one is being written).
  grpc::ServerUnaryReactor* WriteCheckpoint(grpc::CallbackServerContext* context,
                                            const rpc::WriteCheckpointRequest* request,
                                            rpc::WriteCheckpointResponse* response) override;
  // A primary's records for the copies this server holds; answered per shard in the response.
  grpc::ServerUnaryReactor* Replicate(grpc::CallbackServerContext* context,
                                      const rpc::ReplicateRequest* request,
                                      rpc::ReplicateResponse* response) override;

 private:
  // The store if serving and the request's map is not newer than the store's; otherwise null and
  // `status` says why (UNAVAILABLE, retryable).
  ShardedStore* Ready(const rpc::RequestHeader& header, absl::Status* status);

  // Writes a progress line about pushes dropped as late (sync quorum), at most every 5 s.
  void ReportLatePush(const rpc::RequestHeader& header, uint32_t keys);

  const std::function<void(uint64_t)> on_newer_map_;
  absl::Mutex late_mu_;
  uint64_t late_pushes_ ABSL_GUARDED_BY(late_mu_) = 0;
  uint64_t late_keys_ ABSL_GUARDED_BY(late_mu_) = 0;
  absl::Time last_late_report_ ABSL_GUARDED_BY(late_mu_) = absl::InfinitePast();
  std::atomic<ShardedStore*> store_{nullptr};
  absl::Mutex checkpoint_mu_;
  std::thread checkpoint_writer_ ABSL_GUARDED_BY(checkpoint_mu_);
  bool writing_checkpoint_ ABSL_GUARDED_BY(checkpoint_mu_) = false;
  std::atomic<uint32_t> server_id_{0};
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_PS_SERVICE_H_

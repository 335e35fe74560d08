// The gRPC channels to one server: Pull and Push as RPCs through the generic stub, their messages
// written in place (sparse_wire.h), and the typed stub for the other RPCs. Private to the client
// library.
#ifndef PS_CLIENT_INTERNAL_CHANNEL_TRANSPORT_H_
#define PS_CLIENT_INTERNAL_CHANNEL_TRANSPORT_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "client/internal/server_transport.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace client_internal {

// A ChannelTransport is `channels` gRPC channels (TCP connections) to one server, used in turn.
// Thread-safe.
class ChannelTransport final : public ServerTransport {
 public:
  // Opens (lazily, as gRPC does) `channels` (>= 1) channels to `address` with `credentials`
  // (null: plaintext).
  ChannelTransport(std::string address, int channels,
                   std::shared_ptr<grpc::ChannelCredentials> credentials);

  ChannelTransport(const ChannelTransport&) = delete;
  ChannelTransport& operator=(const ChannelTransport&) = delete;

  const std::string& address() const { return address_; }

  // The typed stub of the next channel, for the RPCs other than Pull and Push.
  rpc::ParameterServer::Stub* Stub() {
    return stubs_[next_.fetch_add(1, std::memory_order_relaxed) % stubs_.size()].get();
  }

  // Sends `exchange` as a Pull or Push RPC on the next channel: its fields, and its payload in the
  // message unless exchange->slot names the slot that holds it. As ServerTransport::Start.
  void Start(Exchange* exchange) override;

 private:
  const std::string address_;
  std::vector<std::unique_ptr<rpc::ParameterServer::Stub>> stubs_;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_stubs_;
  std::atomic<uint32_t> next_{0};
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_CHANNEL_TRANSPORT_H_

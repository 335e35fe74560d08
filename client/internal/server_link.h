// Everything a client holds of one server: its channels, and the region of shared memory it may
// lend a client on its host (proto/ps.proto rules 9 and 10), from asking for it to giving it back.
// Private to the client library.
#ifndef PS_CLIENT_INTERNAL_SERVER_LINK_H_
#define PS_CLIENT_INTERNAL_SERVER_LINK_H_

#include <grpcpp/security/credentials.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/internal/channel_transport.h"
#include "client/internal/server_transport.h"
#include "client/internal/shared_region.h"

namespace ps {
namespace client_internal {

struct ServerLinkOptions {
  // host:port of the server. Required.
  std::string address;
  // gRPC channels to it (ClientOptions.channels_per_server); >= 1. Default 2.
  int channels = 2;
  // How the channels authenticate; null (default): plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // ClientOptions.shared_memory: ask the server for a region. Default true.
  bool shared_memory = true;
  // ClientOptions.shared_memory_calls: make the calls in the region when the server serves them
  // there. Default true.
  bool shared_memory_calls = true;
  // The region to ask for: slots (1 to kMaxSharedSlots) of slot_bytes bytes (1 to
  // kMaxSharedSlotBytes). Defaults: 8 slots of 1 MiB.
  uint32_t slots = 8;
  uint64_t slot_bytes = uint64_t{1} << 20;
};

// A ServerLink is one server as the client reaches it. Its region is asked for by the first
// request that may use one, at most kMaxRegionOpens times over the link's life (a server that
// restarted lost the regions it lent, and is asked again); never again once the server lends none
// to this client (it is elsewhere, or lends no memory). Thread-safe.
class ServerLink {
 public:
  // How long asking a server for a region may take, and giving one back.
  static constexpr absl::Duration kRegionOpenTimeout = absl::Seconds(5);
  static constexpr absl::Duration kRegionCloseTimeout = absl::Seconds(1);
  static constexpr int kMaxRegionOpens = 4;

  // Opens the channels (lazily, as gRPC does); asks for nothing yet.
  explicit ServerLink(ServerLinkOptions options);
  // Does not give the region back (CloseRegion does): a region unused expires on its server.
  ~ServerLink() = default;

  ServerLink(const ServerLink&) = delete;
  ServerLink& operator=(const ServerLink&) = delete;

  const std::string& address() const { return options_.address; }
  // The server's channels: the transport of every RPC but Pull and Push.
  ChannelTransport* channel() { return &channel_; }

  // The transport for the next Pull or Push: calls in the region, or RPCs with their payload in
  // it, when the server lent one (asked for now if it was not yet); else the channels. Never
  // null; it stays valid for as long as the returned pointer is held. Blocks up to
  // kRegionOpenTimeout when it asks.
  std::shared_ptr<ServerTransport> Transport();

  // After exchange->OnDone(ended) for an exchange started on a transport of this link, with
  // `status` what the caller made of it (`ended`, or an error of its answer): frees its slot
  // (SettleSlot: released if the server answered, retired if not), and when the transport
  // failed because the server refused the region or its process exited
  // (IsSharedRegionRefusal), forgets the region, so that the next request asks for another, and
  // returns UNAVAILABLE ("...; resent": retry the request). Otherwise returns `status`; nothing
  // for an exchange without a slot.
  absl::Status Settle(Exchange* exchange, const grpc::Status& ended, absl::Status status);

  // Gives the region back to the server (best effort, up to kRegionCloseTimeout) if it holds
  // one (the client's end); a later Transport() would ask for another.
  void CloseRegion();

 private:
  // Gives region `region` back to the server (best effort).
  void GiveBack(uint64_t region, const std::string& secret);

  // Constant after construction.
  const ServerLinkOptions options_;
  ChannelTransport channel_;
  // The channel as a shared transport: aliases the link, owns nothing.
  const std::shared_ptr<ServerTransport> channel_transport_;

  absl::Mutex mu_;
  std::shared_ptr<SharedRegion> region_ ABSL_GUARDED_BY(mu_);
  // The transport over region_ (null without one).
  std::shared_ptr<ServerTransport> region_transport_ ABSL_GUARDED_BY(mu_);
  int region_opens_ ABSL_GUARDED_BY(mu_) = 0;
  bool region_off_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_SERVER_LINK_H_

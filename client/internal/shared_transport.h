// The two transports over a region of shared memory that a server on this host lent
// (shared_region.h): RPCs whose payload is in a slot of the region (proto/ps.proto rule 9), and
// calls made in the region itself (rule 10). Both fall back, request by request, to the
// transport below them (the server's channels) when no slot is free or a request does not fit.
// Private to the client library.
#ifndef PS_CLIENT_INTERNAL_SHARED_TRANSPORT_H_
#define PS_CLIENT_INTERNAL_SHARED_TRANSPORT_H_

#include <memory>

#include "absl/status/status.h"
#include "client/internal/server_transport.h"
#include "client/internal/shared_region.h"

namespace ps {
namespace client_internal {

// A SlotTransport sends each request through `channel` with its keys and gradients in a slot of
// `region` (and a pull's rows answered there), or, when the request does not fit a slot or none
// is free, in the message as `channel` alone would. Thread-safe.
class SlotTransport final : public ServerTransport {
 public:
  // `channel` (not owned) must outlive this transport.
  SlotTransport(std::shared_ptr<SharedRegion> region, ServerTransport* channel)
      : region_(std::move(region)), channel_(channel) {}

  // As ServerTransport::Start. With a slot, exchange->region and exchange->slot name it, and
  // it stays the exchange's until SettleSlot.
  void Start(Exchange* exchange) override;

 private:
  const std::shared_ptr<SharedRegion> region_;
  ServerTransport* const channel_;
};

// A RegionCallTransport makes each request as a call in `region` (the request message written
// to its slot's call page, the server woken through a futex), its payload in the slot; a request
// without a free slot goes through `channel` in its message, one too large for a call page
// through `channel` with its payload in the slot. Thread-safe.
class RegionCallTransport final : public ServerTransport {
 public:
  // `region` must serve calls (SharedRegion::calls()); `channel` (not owned) must outlive this
  // transport.
  RegionCallTransport(std::shared_ptr<SharedRegion> region, ServerTransport* channel)
      : region_(std::move(region)), channel_(channel) {}

  // As ServerTransport::Start; exchange->in_region says whether it was made in the region.
  // With exchange->wait_here, a call made in the region is waited for on the starting thread,
  // and OnDone has run when Start returns.
  void Start(Exchange* exchange) override;

 private:
  const std::shared_ptr<SharedRegion> region_;
  ServerTransport* const channel_;
};

// After exchange->OnDone: gives the exchange's slot back to its region when the server answered
// the request (`server_answered`: the RPC succeeded, or a call made in the region was answered,
// whatever the answer), else takes it out for good (the server may still read or write it), and
// clears the exchange's slot fields. Nothing when it holds no slot.
void SettleSlot(Exchange* exchange, bool server_answered);

// Whether `status` is a server's refusal of a request's shared slot (its messages name the
// "shared region": the region was closed, expired, or lent by a server that restarted) or says
// that the server that lent the region exited, rather than a refusal of the request itself: the
// region is gone, and the request may be resent without it.
bool IsSharedRegionRefusal(const absl::Status& status);

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_SHARED_TRANSPORT_H_

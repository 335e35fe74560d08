#include "client/internal/server_link.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/internal/shared_transport.h"
#include "common/grpc_status.h"

namespace ps {
namespace client_internal {

ServerLink::ServerLink(ServerLinkOptions options)
    : options_(std::move(options)),
      channel_(options_.address, options_.channels, options_.credentials),
      channel_transport_(std::shared_ptr<ServerTransport>(), &channel_) {}

std::shared_ptr<ServerTransport> ServerLink::Transport() {
  if (!options_.shared_memory) return channel_transport_;
  absl::MutexLock lock(&mu_);
  if (region_transport_ != nullptr) return region_transport_;
  if (region_off_) return channel_transport_;
  if (++region_opens_ > kMaxRegionOpens) {
    region_off_ = true;
    return channel_transport_;
  }
  rpc::OpenSharedRegionRequest open;
  open.set_slots(options_.slots);
  open.set_slot_bytes(options_.slot_bytes);
  rpc::OpenSharedRegionResponse lent;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kRegionOpenTimeout));
  const absl::Status opened =
      FromGrpcStatus(channel_.Stub()->OpenSharedRegion(&context, open, &lent));
  if (!opened.ok()) {
    // Unreachable for now: asked again by a later request. Otherwise it lends none to us.
    if (!absl::IsUnavailable(opened) && !absl::IsDeadlineExceeded(opened)) region_off_ = true;
    return channel_transport_;
  }
  absl::StatusOr<std::unique_ptr<SharedRegion>> mapped =
      SharedRegion::Map(lent, options_.shared_memory_calls);
  if (!mapped.ok()) {
    // Another host (or user, or pid namespace): give the memory back and use the channel.
    region_off_ = true;
    GiveBack(lent.region(), lent.secret());
    return channel_transport_;
  }
  region_ = std::move(*mapped);
  if (region_->calls()) {
    region_transport_ = std::make_shared<RegionCallTransport>(region_, &channel_);
  } else {
    region_transport_ = std::make_shared<SlotTransport>(region_, &channel_);
  }
  return region_transport_;
}

absl::Status ServerLink::Settle(Exchange* exchange, const grpc::Status& ended,
                                absl::Status status) {
  if (exchange->slot < 0) return status;
  const SharedRegion* region = exchange->region.get();
  // The server answered: the slot is free again. Otherwise it may still read or write it.
  SettleSlot(exchange, ended.ok() || exchange->region_answered);
  if (ended.ok() || !IsSharedRegionRefusal(status)) return status;
  // The region is gone (the server restarted or expired it): ask for another, and resend.
  {
    absl::MutexLock lock(&mu_);
    if (region_.get() == region) {
      region_.reset();
      region_transport_.reset();
    }
  }
  return absl::UnavailableError(absl::StrCat(status.message(), "; resent"));
}

void ServerLink::CloseRegion() {
  std::shared_ptr<SharedRegion> region;
  {
    absl::MutexLock lock(&mu_);
    region = std::move(region_);
    region_.reset();
    region_transport_.reset();
  }
  if (region != nullptr) GiveBack(region->id(), region->secret());
}

void ServerLink::GiveBack(uint64_t region, const std::string& secret) {
  rpc::CloseSharedRegionRequest close;
  close.set_region(region);
  close.set_secret(secret);
  rpc::CloseSharedRegionResponse closed;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kRegionCloseTimeout));
  channel_.Stub()->CloseSharedRegion(&context, close, &closed).ok();
}

}  // namespace client_internal
}  // namespace ps

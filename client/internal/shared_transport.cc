#include "client/internal/shared_transport.h"

#include <utility>

#include "absl/strings/match.h"
#include "common/grpc_status.h"
#include "common/shared_region_layout.h"

namespace ps {
namespace client_internal {
namespace {

// Takes a slot of `region` for `exchange` and writes its payload there, naming the slot in its
// fields; false, with nothing changed, when the payload or the answer does not fit a slot or no
// slot is free.
bool TakeSlot(const std::shared_ptr<SharedRegion>& region, Exchange* exchange) {
  if (exchange->key_bytes + exchange->grad_bytes > region->slot_bytes() ||
      exchange->answer_bytes > region->slot_bytes()) {
    return false;
  }
  const int slot = region->Acquire();
  if (slot < 0) return false;
  char* at = reinterpret_cast<char*>(region->slot(static_cast<uint32_t>(slot)));
  exchange->WritePayload(at, exchange->push ? at + exchange->key_bytes : nullptr);
  rpc::SharedSlot* shared = exchange->fields.mutable_shared();
  shared->set_region(region->id());
  shared->set_secret(region->secret());
  shared->set_slot(static_cast<uint32_t>(slot));
  shared->set_keys_bytes(exchange->key_bytes);
  shared->set_grads_bytes(exchange->grad_bytes);
  exchange->slot = slot;
  exchange->region = region;
  return true;
}

}  // namespace

void SlotTransport::Start(Exchange* exchange) {
  TakeSlot(region_, exchange);
  channel_->Start(exchange);
}

void RegionCallTransport::Start(Exchange* exchange) {
  if (!TakeSlot(region_, exchange)) return channel_->Start(exchange);
  exchange->in_region = true;
  if (region_->Call(
          exchange->slot, exchange->push ? kSharedCallPush : kSharedCallPull, exchange->fields,
          exchange->num_keys, exchange->deadline,
          [exchange](const absl::Status& status, std::string response, bool answered) {
            exchange->region_answered = answered;
            grpc::Slice slice(response);
            exchange->response_bytes = grpc::ByteBuffer(&slice, 1);
            exchange->OnDone(ToGrpcStatus(status));
          },
          exchange->wait_here)) {
    return;
  }
  // Not made in the region (too large for a call page, or the region closed): an RPC, its
  // payload in the slot.
  exchange->in_region = false;
  channel_->Start(exchange);
}

void SettleSlot(Exchange* exchange, bool server_answered) {
  if (exchange->slot < 0) return;
  if (server_answered) {
    exchange->region->Release(exchange->slot);
  } else {
    exchange->region->Retire(exchange->slot);
  }
  exchange->slot = -1;
  exchange->region.reset();
  exchange->in_region = false;
  exchange->region_answered = false;
}

bool IsSharedRegionRefusal(const absl::Status& status) {
  return (absl::IsFailedPrecondition(status) || absl::IsPermissionDenied(status) ||
          absl::IsUnavailable(status)) &&
         absl::StrContains(status.message(), "shared region");
}

}  // namespace client_internal
}  // namespace ps

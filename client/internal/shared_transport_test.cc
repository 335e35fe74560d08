#include "client/internal/shared_transport.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/internal/lent_region_for_test.h"
#include "common/futex.h"
#include "common/grpc_status.h"
#include "common/shared_region_layout.h"

namespace ps {
namespace client_internal {
namespace {

// The transport below: records what it was given, and answers OK at once.
class FakeChannel final : public ServerTransport {
 public:
  void Start(Exchange* exchange) override {
    started.push_back(exchange->slot);
    exchange->OnDone(grpc::Status::OK);
  }
  std::vector<int> started;  // the slot of each exchange started here
};

// A push of `keys` keys 10, 11, ... with gradients 0.5 each (dim 1).
class TestExchange final : public Exchange {
 public:
  explicit TestExchange(uint32_t keys) {
    push = true;
    num_keys = keys;
    key_bytes = keys * sizeof(uint64_t);
    grad_bytes = keys * sizeof(float);
    fields.set_table("user");
    deadline = absl::Now() + absl::Seconds(30);
  }
  void WritePayload(char* keys, char* grads) const override {
    for (uint32_t i = 0; i < num_keys; ++i) {
      const uint64_t k = 10 + i;
      const float g = 0.5f;
      std::memcpy(keys + i * sizeof(k), &k, sizeof(k));
      std::memcpy(grads + i * sizeof(g), &g, sizeof(g));
    }
  }
  void OnDone(const grpc::Status& status) override {
    ended = status;
    done.Notify();
  }
  grpc::Status ended;
  absl::Notification done;
};

TEST_CASE("an RPC with its payload in a slot, or in its message when none fits",
          "[client][transport][shared]") {
  Lent lent(2, /*slot_bytes=*/4096);
  auto region = SharedRegion::Map(lent.response, /*calls=*/false);
  REQUIRE(region.ok());
  std::shared_ptr<SharedRegion> shared(std::move(*region));
  FakeChannel channel;
  SlotTransport transport(shared, &channel);

  SECTION("in a slot, named in the message, given back once answered") {
    TestExchange exchange(3);
    transport.Start(&exchange);
    REQUIRE(channel.started.size() == 1);
    const int slot = channel.started[0];
    REQUIRE(slot >= 0);
    CHECK(exchange.slot == slot);
    CHECK(exchange.region == shared);
    CHECK_FALSE(exchange.in_region);
    CHECK(exchange.fields.shared().region() == shared->id());
    CHECK(exchange.fields.shared().secret() == shared->secret());
    CHECK(exchange.fields.shared().slot() == static_cast<uint32_t>(slot));
    CHECK(exchange.fields.shared().keys_bytes() == 24);
    CHECK(exchange.fields.shared().grads_bytes() == 12);
    uint64_t first_key = 0;
    std::memcpy(&first_key, lent.slot(static_cast<uint32_t>(slot)), sizeof(first_key));
    CHECK(first_key == 10);
    float first_grad = 0;
    std::memcpy(&first_grad, lent.slot(static_cast<uint32_t>(slot)) + 24, sizeof(first_grad));
    CHECK(first_grad == 0.5f);
    SettleSlot(&exchange, /*server_answered=*/true);
    CHECK(exchange.slot == -1);
    CHECK(exchange.region == nullptr);
    CHECK(shared->retired() == 0);
  }
  SECTION("a slot whose request failed is never lent again") {
    TestExchange exchange(1);
    transport.Start(&exchange);
    SettleSlot(&exchange, /*server_answered=*/false);
    CHECK(shared->retired() == 1);
  }
  SECTION("too large for a slot: in the message") {
    TestExchange exchange(1000);  // 12000 bytes
    transport.Start(&exchange);
    CHECK(channel.started == std::vector<int>{-1});
    CHECK_FALSE(exchange.fields.has_shared());
  }
  SECTION("a pull whose rows would not fit a slot: in the message") {
    TestExchange exchange(1);
    exchange.push = false;
    exchange.grad_bytes = 0;
    exchange.answer_bytes = 8192;
    transport.Start(&exchange);
    CHECK(channel.started == std::vector<int>{-1});
  }
  SECTION("no slot free: in the message") {
    const int a = shared->Acquire();
    const int b = shared->Acquire();
    TestExchange exchange(1);
    transport.Start(&exchange);
    CHECK(channel.started == std::vector<int>{-1});
    shared->Release(a);
    shared->Release(b);
  }
}

TEST_CASE("a call made in the region, and the ways it falls back to the channel",
          "[client][transport][shared]") {
  Lent lent(2, /*slot_bytes=*/4096);
  lent.response.set_calls(true);
  auto region = SharedRegion::Map(lent.response, /*calls=*/true);
  REQUIRE(region.ok());
  std::shared_ptr<SharedRegion> shared(std::move(*region));
  REQUIRE(shared->calls());
  FakeChannel channel;
  RegionCallTransport transport(shared, &channel);

  SECTION("made and answered in the region") {
    TestExchange exchange(2);
    transport.Start(&exchange);
    CHECK(channel.started.empty());
    REQUIRE(exchange.in_region);
    const uint32_t slot = static_cast<uint32_t>(exchange.slot);
    SharedCallPage* page = PageOf(lent, slot);
    CHECK(page->method == kSharedCallPush);
    CHECK(page->keys == 2);
    rpc::PushRequest written;
    REQUIRE(written.ParseFromArray(page->data, static_cast<int>(page->request_bytes)));
    CHECK(written.table() == "user");
    CHECK(written.shared().slot() == slot);
    Answer(lent, slot, absl::StatusCode::kOk, "pushed");
    REQUIRE(exchange.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    CHECK(exchange.ended.ok());
    CHECK(exchange.region_answered);
    CHECK(PeerOf(exchange).find("(in shared memory)") != std::string::npos);
    SettleSlot(&exchange, /*server_answered=*/true);
    CHECK(shared->retired() == 0);
  }
  SECTION("too large for a call page: an RPC with its payload in the slot") {
    TestExchange exchange(2);
    exchange.fields.set_table(std::string(kSharedPageBytes, 't'));
    transport.Start(&exchange);
    REQUIRE(channel.started.size() == 1);
    CHECK(channel.started[0] >= 0);
    CHECK_FALSE(exchange.in_region);
    SettleSlot(&exchange, true);
  }
  SECTION("no slot free: an RPC with its payload in the message") {
    const int a = shared->Acquire();
    const int b = shared->Acquire();
    TestExchange exchange(1);
    transport.Start(&exchange);
    CHECK(channel.started == std::vector<int>{-1});
    CHECK_FALSE(exchange.in_region);
    shared->Release(a);
    shared->Release(b);
  }
}

TEST_CASE("what says that a region is gone", "[client][transport][shared]") {
  CHECK(IsSharedRegionRefusal(absl::FailedPreconditionError("no shared region 7 here")));
  CHECK(IsSharedRegionRefusal(absl::PermissionDeniedError("wrong secret for shared region 7")));
  CHECK(IsSharedRegionRefusal(absl::UnavailableError("the server of the shared region exited")));
  CHECK_FALSE(IsSharedRegionRefusal(absl::FailedPreconditionError("not the primary of shard 3")));
  CHECK_FALSE(IsSharedRegionRefusal(absl::InvalidArgumentError("shared region slot 9 of 2")));
  CHECK_FALSE(IsSharedRegionRefusal(absl::OkStatus()));
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

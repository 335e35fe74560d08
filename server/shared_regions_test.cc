#include "server/shared_regions.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/futex.h"
#include "server/internal/test_fixtures.h"

namespace ps {
namespace server {
namespace {

SharedRegions::Options Lend(uint64_t max_bytes, absl::Time* now = nullptr) {
  SharedRegions::Options options;
  options.max_bytes = max_bytes;
  options.idle_timeout = absl::Minutes(1);
  if (now != nullptr) options.now = [now] { return *now; };
  return options;
}

rpc::SharedSlot Name(const rpc::OpenSharedRegionResponse& region, uint32_t slot,
                     uint64_t keys_bytes, uint64_t grads_bytes = 0) {
  rpc::SharedSlot shared;
  shared.set_region(region.region());
  shared.set_secret(region.secret());
  shared.set_slot(slot);
  shared.set_keys_bytes(keys_bytes);
  shared.set_grads_bytes(grads_bytes);
  return shared;
}

TEST_CASE("a lent region is mapped by another opener as the response says", "[shared]") {
  SharedRegions regions(Lend(64 << 20));
  const auto region = regions.Open(3, 10000);
  REQUIRE(region.ok());
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  CHECK(region->slots() == 3);
  CHECK(region->slot_bytes() % page == 0);
  CHECK(region->slot_bytes() >= 10000);
  CHECK(region->header_bytes() == SharedRegionHeaderBytes(3));
  CHECK_FALSE(region->calls());  // no serve_call
  CHECK(region->secret().size() == 16);
  CHECK(region->pid() == getpid());
  const uint64_t total = region->header_bytes() + region->slots() * region->slot_bytes();
  CHECK(regions.bytes() == total);

  // What a client on this host does: open the server's fd through /proc and map it.
  const std::string path = absl::StrFormat("/proc/%d/fd/%d", region->pid(), region->fd());
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  void* mapped = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  REQUIRE(mapped != MAP_FAILED);
  auto* base = static_cast<unsigned char*>(mapped);
  SharedRegionHeader header;
  std::memcpy(&header, base, sizeof(header));
  CHECK(std::memcmp(header.magic, SharedRegionHeader::kMagic, sizeof(header.magic)) == 0);
  CHECK(header.region == region->region());
  CHECK(std::memcmp(header.secret, region->secret().data(), 16) == 0);
  CHECK(header.slots == 3);
  CHECK(header.slot_bytes == region->slot_bytes());

  // The client's bytes in slot 2 are the server's, and back.
  unsigned char* client_slot = base + region->header_bytes() + 2 * region->slot_bytes();
  std::memset(client_slot, 0xAB, 100);
  const auto slot = regions.Find(Name(*region, 2, 100));
  REQUIRE(slot.ok());
  CHECK(slot->size() == region->slot_bytes());
  CHECK(slot->data()[0] == 0xAB);
  CHECK(slot->data()[99] == 0xAB);
  slot->data()[0] = 0x11;
  CHECK(client_slot[0] == 0x11);

  // Closed, the region is gone for requests; a slot found before keeps its mapping.
  REQUIRE(regions.Close(region->region(), region->secret()).ok());
  CHECK(regions.regions() == 0);
  CHECK(regions.bytes() == 0);
  CHECK(regions.opened() == 1);
  slot->data()[1] = 0x22;
  CHECK(client_slot[1] == 0x22);
  CHECK(regions.Find(Name(*region, 2, 100)).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  munmap(mapped, total);
}

TEST_CASE("requests naming a slot are checked", "[shared]") {
  SharedRegions regions(Lend(64 << 20));
  const auto region = regions.Open(2, 8192);
  REQUIRE(region.ok());
  const uint64_t slot_bytes = region->slot_bytes();

  CHECK(regions.Find(Name(*region, 1, slot_bytes)).ok());
  CHECK(regions.Find(Name(*region, 1, 8, slot_bytes - 8)).ok());
  auto code = [&](const rpc::SharedSlot& shared) { return regions.Find(shared).status().code(); };
  CHECK(code(Name(*region, 2, 8)) == absl::StatusCode::kInvalidArgument);
  CHECK(code(Name(*region, 0, slot_bytes + 1)) == absl::StatusCode::kInvalidArgument);
  CHECK(code(Name(*region, 0, 8, slot_bytes)) == absl::StatusCode::kInvalidArgument);
  CHECK(code(Name(*region, 0, ~uint64_t{0}, 16)) == absl::StatusCode::kInvalidArgument);
  rpc::SharedSlot wrong = Name(*region, 0, 8);
  wrong.mutable_secret()->back() ^= 1;
  CHECK(code(wrong) == absl::StatusCode::kPermissionDenied);
  wrong.set_secret("short");
  CHECK(code(wrong) == absl::StatusCode::kPermissionDenied);
  rpc::SharedSlot unknown = Name(*region, 0, 8);
  unknown.set_region(region->region() + 100);
  CHECK(code(unknown) == absl::StatusCode::kFailedPrecondition);
  CHECK(regions.Close(region->region(), "wrong").code() == absl::StatusCode::kPermissionDenied);
  CHECK(regions.Close(region->region() + 100, region->secret()).code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("regions are bounded in number, size and bytes", "[shared]") {
  SECTION("none lent") {
    SharedRegions regions(Lend(0));
    CHECK(regions.Open(1, 4096).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("sizes out of range") {
    SharedRegions regions(Lend(1 << 30));
    CHECK(regions.Open(0, 4096).status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(regions.Open(kMaxSharedSlots + 1, 4096).status().code() ==
          absl::StatusCode::kInvalidArgument);
    CHECK(regions.Open(1, 0).status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(regions.Open(1, kMaxSharedSlotBytes + 1).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
  SECTION("over the server's bytes") {
    const uint64_t one = SharedRegionHeaderBytes(4) + 4 * (uint64_t{1} << 20);
    SharedRegions regions(Lend(2 * one));
    REQUIRE(regions.Open(4, 1 << 20).ok());
    const auto second = regions.Open(4, 1 << 20);
    REQUIRE(second.ok());
    const auto third = regions.Open(4, 1 << 20);
    CHECK(third.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(third.status().message().find("--shared_memory_mb") != absl::string_view::npos);
    REQUIRE(regions.Close(second->region(), second->secret()).ok());
    CHECK(regions.Open(4, 1 << 20).ok());
  }
}

TEST_CASE("regions unused past the idle timeout are closed at the next open", "[shared]") {
  absl::Time now = absl::FromUnixSeconds(1000);
  SharedRegions regions(Lend(64 << 20, &now));
  const auto idle = regions.Open(1, 4096);
  const auto used = regions.Open(1, 4096);
  REQUIRE(idle.ok());
  REQUIRE(used.ok());
  now += absl::Seconds(50);
  REQUIRE(regions.Find(Name(*used, 0, 8)).ok());
  now += absl::Seconds(20);  // idle: 70 s unused; used: 20 s
  REQUIRE(regions.Open(1, 4096).ok());
  CHECK(regions.regions() == 2);
  CHECK(regions.Find(Name(*idle, 0, 8)).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(regions.Find(Name(*used, 0, 8)).ok());
}

// Calls handed to serve_call, for the test to take.
struct Served {
  absl::Mutex mu;
  std::deque<SharedRegions::Call> calls ABSL_GUARDED_BY(mu);
  // The name of the thread that handed each call over.
  std::deque<std::string> threads ABSL_GUARDED_BY(mu);

  std::string NextThread() {
    absl::MutexLock lock(&mu);
    REQUIRE(!threads.empty());
    std::string name = threads.front();
    threads.pop_front();
    return name;
  }

  SharedRegions::Call Next() {
    absl::MutexLock lock(&mu);
    auto some = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return !calls.empty(); };
    REQUIRE(mu.AwaitWithTimeout(absl::Condition(&some), absl::Seconds(30)));
    SharedRegions::Call call = std::move(calls.front());
    calls.pop_front();
    return call;
  }
};

TEST_CASE("calls written into a region's pages are served and answered there", "[shared]") {
  Served served;
  SharedRegions::Options options = Lend(64 << 20);
  struct Answered {
    uint32_t method;
    absl::StatusCode code;
  };
  absl::Mutex answered_mu;
  std::vector<Answered> answered;
  options.on_answered = [&](uint32_t method, absl::StatusCode code, absl::Duration took) {
    CHECK(took >= absl::ZeroDuration());
    absl::MutexLock lock(&answered_mu);
    answered.push_back({method, code});
  };
  options.serve_call = [&served](SharedRegions::Call call) {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    absl::MutexLock lock(&served.mu);
    served.calls.push_back(std::move(call));
    served.threads.push_back(name);
  };
  SharedRegions regions(options);
  const auto lent = regions.Open(2, 4096, "ipv4:127.0.0.1:5");
  REQUIRE(lent.ok());
  REQUIRE(lent->calls());
  CHECK(lent->header_bytes() == SharedRegionHeaderBytes(2));
  const absl::StatusOr<unsigned char*> mapped = testing::MapLentRegion(*lent);
  INFO(mapped.status().ToString());
  REQUIRE(mapped.ok());
  unsigned char* base = *mapped;
  auto* page = reinterpret_cast<SharedCallPage*>(base + kSharedPageBytes * 2);  // slot 1's
  auto* server_bell = reinterpret_cast<uint32_t*>(base + kServerBellOffset);
  auto* closed = reinterpret_cast<uint32_t*>(base + kClosedOffset);

  SECTION("a call: its message and slot, and the answer in its page") {
    const std::string message = "a pull's bytes";
    std::memcpy(page->data, message.data(), message.size());
    page->method = kSharedCallPull;
    page->request_bytes = static_cast<uint32_t>(message.size());
    StoreWord(&page->state, kSharedCallRequested);
    RingBell(server_bell);
    SharedRegions::Call call = served.Next();
    CHECK(call.method() == kSharedCallPull);
    CHECK(call.request() == message);
    CHECK(call.slot() == 1);
    CHECK(call.region() == lent->region());
    CHECK(call.peer() == "ipv4:127.0.0.1:5");
    CHECK(served.NextThread() == "ps-shm-calls");  // a small call: the region's thread
    CHECK(LoadWord(&page->state) == kSharedCallServing);
    call.Answer(absl::OkStatus(), "the response");
    CHECK(LoadWord(&page->state) == kSharedCallAnswered);
    {
      absl::MutexLock lock(&answered_mu);
      REQUIRE(answered.size() == 1);  // told, for the metrics
      CHECK(answered[0].method == kSharedCallPull);
      CHECK(answered[0].code == absl::StatusCode::kOk);
    }
    CHECK(page->code == 0);
    CHECK(std::string(page->data, page->answer_bytes) == "the response");

    // An error answers its code and text; a call dropped unanswered answers INTERNAL.
    StoreWord(&page->state, kSharedCallRequested);
    RingBell(server_bell);
    served.Next().Answer(absl::NotFoundError("no such table"), "");
    CHECK(page->code == static_cast<int32_t>(absl::StatusCode::kNotFound));
    CHECK(std::string(page->data, page->answer_bytes) == "no such table");
    StoreWord(&page->state, kSharedCallRequested);
    RingBell(server_bell);
    { SharedRegions::Call dropped = served.Next(); }
    CHECK(page->code == static_cast<int32_t>(absl::StatusCode::kInternal));
  }
  SECTION("a call of many keys is served by the pool") {
    page->method = kSharedCallPush;
    page->request_bytes = 0;
    page->keys = SharedRegions::kPoolKeys;
    StoreWord(&page->state, kSharedCallRequested);
    RingBell(server_bell);
    SharedRegions::Call call = served.Next();
    CHECK(call.slot() == 1);
    CHECK(served.NextThread() == "ps-shm-pool");
    call.Answer(absl::OkStatus(), "");
    CHECK(LoadWord(&page->state) == kSharedCallAnswered);
  }
  SECTION("a page claiming more request bytes than it holds is refused, not served") {
    page->method = kSharedCallPush;
    page->request_bytes = 1 << 20;
    StoreWord(&page->state, kSharedCallRequested);
    RingBell(server_bell);
    // The refusal is written by the region's thread itself: wait for its answer.
    while (LoadWord(&page->state) != kSharedCallAnswered) {
      FutexWait(&page->state, kSharedCallRequested, absl::Milliseconds(10));
      FutexWait(&page->state, kSharedCallServing, absl::Milliseconds(10));
    }
    CHECK(page->code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    absl::MutexLock lock(&served.mu);
    CHECK(served.calls.empty());
  }
  SECTION("closing the region says so in its header") {
    CHECK(LoadWord(closed) == 0);
    REQUIRE(regions.Close(lent->region(), lent->secret()).ok());
    CHECK(LoadWord(closed) == 1);
  }
  SECTION("after StopCalls, the regions say so, and new ones carry no calls") {
    regions.StopCalls();
    CHECK(LoadWord(closed) == 1);
    const auto later = regions.Open(1, 4096);
    REQUIRE(later.ok());
    CHECK_FALSE(later->calls());
  }
  munmap(base, testing::LentRegionBytes(*lent));
}

}  // namespace
}  // namespace server
}  // namespace ps

#include "client/internal/shared_region.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/notification.h"
#include "client/internal/lent_region_for_test.h"
#include "common/futex.h"
#include "common/shared_region_layout.h"

namespace ps {
namespace client_internal {
namespace {

TEST_CASE("a lent region maps onto the lender's memory", "[client][shared]") {
  Lent lent(3);
  auto region = SharedRegion::Map(lent.response);
  REQUIRE(region.ok());
  CHECK((*region)->id() == 7);
  CHECK((*region)->secret() == lent.response.secret());
  CHECK((*region)->slots() == 3);
  CHECK((*region)->slot_bytes() == 4096);
  (*region)->slot(2)[10] = 0x5A;
  CHECK(lent.slot(2)[10] == 0x5A);
  lent.slot(0)[0] = 0x33;
  CHECK((*region)->slot(0)[0] == 0x33);
}

TEST_CASE("what is not the lent region is refused", "[client][shared]") {
  Lent lent(2);
  SECTION("another region's header") {
    rpc::OpenSharedRegionResponse other = lent.response;
    other.set_region(8);
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kFailedPrecondition);
    other = lent.response;
    other.mutable_secret()->front() ^= 1;
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("another size") {
    rpc::OpenSharedRegionResponse other = lent.response;
    other.set_slots(3);
    other.set_header_bytes(SharedRegionHeaderBytes(3));
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("a file that is not there (another host's pid and fd)") {
    rpc::OpenSharedRegionResponse other = lent.response;
    other.set_fd(100000);
    const auto mapped = SharedRegion::Map(other);
    CHECK(mapped.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(mapped.status().message().find("another host") != absl::string_view::npos);
  }
  SECTION("an answer that describes no region") {
    rpc::OpenSharedRegionResponse other = lent.response;
    other.set_slot_bytes(1000);
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kInvalidArgument);
    other = lent.response;
    other.set_secret("x");
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kInvalidArgument);
    other = lent.response;
    other.set_slots(0);
    CHECK(SharedRegion::Map(other).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("slots are lent one request at a time, and retired ones never again",
          "[client][shared]") {
  Lent lent(3);
  auto region = SharedRegion::Map(lent.response);
  REQUIRE(region.ok());
  SharedRegion& r = **region;
  std::set<int> taken;
  for (int i = 0; i < 3; ++i) taken.insert(r.Acquire());
  CHECK(taken == std::set<int>{0, 1, 2});
  CHECK(r.Acquire() == -1);
  r.Release(1);
  CHECK(r.Acquire() == 1);
  r.Retire(1);
  r.Release(0);
  CHECK(r.Acquire() == 0);
  CHECK(r.Acquire() == -1);
  CHECK(r.retired() == 1);
}

// What a call's `done` was given.
struct Ended {
  absl::Notification notified;
  absl::Status status;
  std::string response;
  bool answered = false;

  SharedRegion::CallDone Done() {
    return [this](const absl::Status& s, std::string r, bool a) {
      status = s;
      response = std::move(r);
      answered = a;
      notified.Notify();
    };
  }
  void Wait() { REQUIRE(notified.WaitForNotificationWithTimeout(absl::Seconds(30))); }
};

TEST_CASE("a call made in a region is written to its page and ended by the answer",
          "[client][shared]") {
  Lent lent(2);
  lent.response.set_calls(true);
  auto region = SharedRegion::Map(lent.response);
  REQUIRE(region.ok());
  SharedRegion& r = **region;
  REQUIRE(r.calls());
  const int slot = r.Acquire();
  rpc::PullRequest request;
  request.set_table("emb");
  request.mutable_shared()->set_slot(static_cast<uint32_t>(slot));
  const uint32_t server_bell = LoadWord(WordAt(lent, kServerBellOffset));
  Ended ended;
  REQUIRE(
      r.Call(slot, kSharedCallPull, request, 1234, absl::Now() + absl::Seconds(30), ended.Done()));
  SharedCallPage* page = PageOf(lent, static_cast<uint32_t>(slot));
  CHECK(LoadWord(&page->state) == kSharedCallRequested);
  CHECK(LoadWord(WordAt(lent, kServerBellOffset)) == server_bell + 1);
  CHECK(page->method == kSharedCallPull);
  CHECK(page->keys == 1234);
  rpc::PullRequest written;
  REQUIRE(written.ParseFromArray(page->data, static_cast<int>(page->request_bytes)));
  CHECK(written.table() == "emb");

  SECTION("answered OK: the response message") {
    Answer(lent, static_cast<uint32_t>(slot), absl::StatusCode::kOk, "rows-said");
    ended.Wait();
    CHECK(ended.status.ok());
    CHECK(ended.response == "rows-said");
    CHECK(ended.answered);
    CHECK(LoadWord(&page->state) == kSharedCallIdle);
  }
  SECTION("answered with an error: its code and text") {
    Answer(lent, static_cast<uint32_t>(slot), absl::StatusCode::kUnavailable, "map is newer");
    ended.Wait();
    CHECK(ended.status == absl::UnavailableError("map is newer"));
    CHECK(ended.answered);
  }
  SECTION("an answer with a code that is none") {
    Answer(lent, static_cast<uint32_t>(slot), static_cast<absl::StatusCode>(99), "?");
    ended.Wait();
    CHECK(ended.status.code() == absl::StatusCode::kInternal);
  }
  SECTION("the region closed before the server took the call: withdrawn") {
    StoreWord(WordAt(lent, kClosedOffset), 1);
    RingBell(WordAt(lent, kClientBellOffset));
    ended.Wait();
    CHECK(ended.status.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(ended.status.message().find("shared region") != absl::string_view::npos);
    CHECK_FALSE(ended.answered);
    // The server can no longer take it.
    CHECK(LoadWord(&page->state) == kSharedCallIdle);
    // And no more calls are made in it.
    Ended other;
    CHECK_FALSE(r.Call(r.Acquire(), kSharedCallPull, request, 1, absl::Now() + absl::Seconds(30),
                       other.Done()));
  }
}

TEST_CASE("a call its caller waits for ends on that thread", "[client][shared]") {
  Lent lent(1);
  lent.response.set_calls(true);
  auto region = SharedRegion::Map(lent.response);
  REQUIRE(region.ok());
  SharedCallPage* page = PageOf(lent, 0);
  // The server's part, on a thread of its own: it answers once the call is written.
  std::thread server([&] {
    while (LoadWord(&page->state) != kSharedCallRequested) {
      FutexWait(WordAt(lent, kServerBellOffset), LoadWord(WordAt(lent, kServerBellOffset)),
                absl::Milliseconds(10));
    }
    Answer(lent, 0, absl::StatusCode::kOk, "answered");
  });
  Ended ended;
  std::thread::id ran_on;
  const bool made = (*region)->Call((*region)->Acquire(), kSharedCallPush, rpc::PushRequest(), 1,
                                    absl::Now() + absl::Seconds(30),
                                    [&](const absl::Status& s, std::string r, bool a) {
                                      ran_on = std::this_thread::get_id();
                                      ended.Done()(s, std::move(r), a);
                                    },
                                    /*wait_here=*/true);
  server.join();
  REQUIRE(made);
  CHECK(ended.notified.HasBeenNotified());  // before Call returned
  CHECK(ran_on == std::this_thread::get_id());
  CHECK(ended.status.ok());
  CHECK(ended.response == "answered");
  CHECK(LoadWord(&page->state) == kSharedCallIdle);

  // And its deadline, on the same thread.
  (*region)->Release(0);
  Ended late;
  REQUIRE((*region)->Call((*region)->Acquire(), kSharedCallPush, rpc::PushRequest(), 1,
                          absl::Now() + absl::Milliseconds(20), late.Done(), /*wait_here=*/true));
  CHECK(late.notified.HasBeenNotified());
  CHECK(late.status.code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("a call nobody answers ends at its deadline", "[client][shared]") {
  Lent lent(1);
  lent.response.set_calls(true);
  auto region = SharedRegion::Map(lent.response);
  REQUIRE(region.ok());
  Ended ended;
  REQUIRE((*region)->Call((*region)->Acquire(), kSharedCallPush, rpc::PushRequest(), 1,
                          absl::Now() + absl::Milliseconds(20), ended.Done()));
  ended.Wait();
  CHECK(ended.status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_FALSE(ended.answered);
}

TEST_CASE("calls fail UNAVAILABLE once the lending process exits", "[client][shared]") {
  Lent lent(1);
  lent.response.set_calls(true);
  // The lender is a child holding the region's fd, killed with the call in flight.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  // Killed and reaped however the test ends, so that a failure leaves no process behind.
  bool reaped = false;
  absl::Cleanup reap = [child, &reaped] {
    if (reaped) return;
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  };
  lent.response.set_pid(child);
  auto region = SharedRegion::Map(lent.response);
  REQUIRE(region.ok());
  Ended ended;
  REQUIRE((*region)->Call((*region)->Acquire(), kSharedCallPull, rpc::PullRequest(), 1,
                          absl::Now() + absl::Seconds(60), ended.Done()));
  REQUIRE(kill(child, SIGKILL) == 0);
  int wstatus = 0;
  REQUIRE(waitpid(child, &wstatus, 0) == child);
  reaped = true;
  ended.Wait();
  CHECK(ended.status.code() == absl::StatusCode::kUnavailable);
  CHECK(ended.status.message().find("shared region") != absl::string_view::npos);
  CHECK_FALSE(ended.answered);
}

TEST_CASE("a region lent without calls, or mapped without, makes none", "[client][shared]") {
  Lent lent(1);
  auto without = SharedRegion::Map(lent.response);
  REQUIRE(without.ok());
  CHECK_FALSE((*without)->calls());
  CHECK_FALSE((*without)->Call(0, kSharedCallPull, rpc::PullRequest(), 1, absl::Now(), nullptr));
  lent.response.set_calls(true);
  auto declined = SharedRegion::Map(lent.response, /*calls=*/false);
  REQUIRE(declined.ok());
  CHECK_FALSE((*declined)->calls());
}

TEST_CASE("a request larger than a call page is not made in the region", "[client][shared]") {
  Lent lent(1);
  lent.response.set_calls(true);
  auto region = SharedRegion::Map(lent.response);
  REQUIRE(region.ok());
  rpc::PullRequest request;
  request.set_table(std::string(kSharedPageBytes, 't'));
  CHECK_FALSE((*region)->Call((*region)->Acquire(), kSharedCallPull, request, 1,
                              absl::Now() + absl::Seconds(1), nullptr));
  CHECK(LoadWord(&PageOf(lent, 0)->state) == kSharedCallIdle);
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

// KvStore against a real ps_coordinator process.
#include "worker/collective/kv_store.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/coordinator_client.h"
#include "tests/testing/daemon.h"

namespace ps {
namespace worker {
namespace {

using testing::Daemon;

constexpr char kJob[] = R"pb(name: "kv_store_test"
                             tables { name: "emb" dim: 8 }
                             cluster { num_shards: 8 num_servers: 1 num_workers: 2 }
)pb";

std::unique_ptr<Daemon> StartCoordinator() {
  auto daemon = testing::StartCoordinator(kJob, "kv_store_test_job");
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  return std::move(*daemon);
}

std::unique_ptr<CoordinatorClient> Connect(const Daemon& daemon) {
  auto client = CoordinatorClient::Connect(daemon.address(), absl::Seconds(10));
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  return std::move(*client);
}

std::vector<char> Bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

TEST_CASE("KvStore sets, gets and waits under its prefix", "[collective][kv_store]") {
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  std::unique_ptr<CoordinatorClient> client = Connect(*daemon);
  KvStore a(client.get(), "group/a/");
  KvStore b(client.get(), "group/b/");

  a.set("0", Bytes("address of rank 0 in a"));
  b.set("0", Bytes("address of rank 0 in b"));
  a.wait({"0"});
  a.wait({"0"}, std::chrono::milliseconds(100));
  CHECK(a.get("0") == Bytes("address of rank 0 in a"));
  CHECK(b.get("0") == Bytes("address of rank 0 in b"));
  // The prefix is really in the coordinator's keys.
  auto raw = client->KvGet({"group/a/0"});
  REQUIRE(raw.ok());
  CHECK((*raw)[0] == "address of rank 0 in a");

  SECTION("values are bytes, not strings") {
    const std::vector<char> binary = {'\0', '\x01', '\xff', '\0'};
    a.set("binary", binary);
    CHECK(a.get("binary") == binary);
  }
  SECTION("an empty wait returns at once") { a.wait({}, std::chrono::milliseconds(1)); }
}

TEST_CASE("KvStore throws a KvStoreError with the coordinator's status", "[collective][kv_store]") {
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  std::unique_ptr<CoordinatorClient> client = Connect(*daemon);
  KvStore store(client.get(), "errors/", absl::Milliseconds(200));

  SECTION("a wait that times out: DEADLINE_EXCEEDED, as a gloo::IoException") {
    const absl::Time start = absl::Now();
    try {
      store.wait({"missing"}, std::chrono::milliseconds(200));
      FAIL("wait returned");
    } catch (const gloo::IoException& e) {
      const auto* error = dynamic_cast<const KvStoreError*>(&e);
      REQUIRE(error != nullptr);
      CHECK(absl::IsDeadlineExceeded(error->status()));
    }
    CHECK(absl::Now() - start < absl::Seconds(5));
  }
  SECTION("get waits up to the default timeout") {
    try {
      store.get("missing");
      FAIL("get returned");
    } catch (const KvStoreError& e) {
      CHECK(absl::IsDeadlineExceeded(e.status()));
    }
  }
  SECTION("a value over the coordinator's limit: RESOURCE_EXHAUSTED") {
    try {
      store.set("big", std::vector<char>((16 << 20) + 1, 'x'));
      FAIL("set returned");
    } catch (const KvStoreError& e) {
      CHECK(absl::IsResourceExhausted(e.status()));
    }
  }
  SECTION("an unreachable coordinator: UNAVAILABLE or DEADLINE_EXCEEDED") {
    daemon->Kill();
    try {
      store.set("k", Bytes("v"));
      FAIL("set returned");
    } catch (const KvStoreError& e) {
      INFO(e.status().ToString());
      CHECK((absl::IsUnavailable(e.status()) || absl::IsDeadlineExceeded(e.status())));
    }
  }
}

TEST_CASE("KvStore's wait without a timeout returns once another client sets the key",
          "[collective][kv_store]") {
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  std::unique_ptr<CoordinatorClient> waiter_client = Connect(*daemon);
  std::unique_ptr<CoordinatorClient> setter_client = Connect(*daemon);
  KvStore waiter(waiter_client.get(), "late/");
  KvStore setter(setter_client.get(), "late/");

  std::thread thread([&] { waiter.wait({"1", "2"}, gloo::kNoTimeout); });
  setter.set("1", Bytes("one"));
  setter.set("2", Bytes("two"));
  thread.join();
  CHECK(waiter.get("2") == Bytes("two"));
}

}  // namespace
}  // namespace worker
}  // namespace ps

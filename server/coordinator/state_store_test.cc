// The StateStore contract, run against every implementation.
#include "server/coordinator/state_store.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "server/coordinator/coordinator_store.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace coordinator {
namespace {

// Opens the same store again (a restarted coordinator's view of it).
using Reopen = std::function<StateStore*()>;

// Runs `body` with a store of each kind and a way to open it again.
void ForEachStore(const std::string& name, const std::function<void(const Reopen&)>& body) {
  SECTION("in memory") {
    MemoryStateStore memory;
    body([&memory]() -> StateStore* { return &memory; });
  }
  SECTION("RocksDB") {
    const std::string dir = testing::TempDir() + "/state_store_" + name;
    std::unique_ptr<CoordinatorStore> open;
    body([&]() -> StateStore* {
      open.reset();  // RocksDB's lock: one open at a time
      absl::StatusOr<std::unique_ptr<CoordinatorStore>> opened = CoordinatorStore::Open(dir);
      REQUIRE(opened.ok());
      open = *std::move(opened);
      return open.get();
    });
  }
}

TEST_CASE("state store: a new store holds nothing", "[state_store]") {
  ForEachStore("new", [](const Reopen& reopen) {
    StateStore* store = reopen();
    CHECK_FALSE(store->location().empty());
    absl::StatusOr<std::optional<SavedCoordinator>> loaded = store->Load();
    REQUIRE(loaded.ok());
    CHECK_FALSE(loaded->has_value());
    // Clocks and keys without a state record are no state.
    REQUIRE(store->SaveClock(0, 3).ok());
    REQUIRE(store->SaveKv("k", "v").ok());
    loaded = store->Load();
    REQUIRE(loaded.ok());
    CHECK_FALSE(loaded->has_value());
  });
}

TEST_CASE("state store: what was saved is loaded again, the latest of each", "[state_store]") {
  ForEachStore("saved", [](const Reopen& reopen) {
    StateStore* store = reopen();
    rpc::CoordinatorState state;
    state.set_job_digest(42);
    state.set_next_member_id(5);
    REQUIRE(store->SaveState(state).ok());
    state.set_next_member_id(7);
    state.mutable_map()->set_version(3);
    REQUIRE(store->SaveState(state).ok());  // replaces, whole
    REQUIRE(store->SaveClock(1, 4).ok());
    REQUIRE(store->SaveClock(1, 9).ok());
    REQUIRE(store->SaveClock(0, 2).ok());
    REQUIRE(store->SaveKv("gloo/0", "addr0").ok());
    REQUIRE(store->SaveKv("ckpt/3/w0", "a").ok());
    REQUIRE(store->SaveKv("ckpt/3/w1", "b").ok());
    REQUIRE(store->SaveKv("ckpt/30", "kept").ok());
    REQUIRE(store->EraseKvPrefix("ckpt/3/").ok());

    store = reopen();
    const absl::StatusOr<std::optional<SavedCoordinator>> loaded = store->Load();
    REQUIRE(loaded.ok());
    REQUIRE(loaded->has_value());
    const SavedCoordinator& saved = **loaded;
    CHECK(saved.state.job_digest() == 42);
    CHECK(saved.state.next_member_id() == 7);
    CHECK(saved.state.map().version() == 3);
    CHECK(saved.clocks == std::map<int32_t, int64_t>{{0, 2}, {1, 9}});
    CHECK(saved.kv ==
          std::map<std::string, std::string>{{"gloo/0", "addr0"}, {"ckpt/30", "kept"}});
  });
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

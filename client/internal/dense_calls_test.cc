#include "client/internal/dense_calls.h"

#include <catch2/catch.hpp>
#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "common/hash.h"

namespace ps {
namespace client_internal {
namespace {

TEST_CASE("a dense tensor's chunks go to their shards' servers, a few per request",
          "[client][dense]") {
  const uint64_t name_hash = NameHash("mlp");
  const std::vector<uint32_t> shard_to_server = {0, 1, 2, 0, 1, 2, 0, 1};
  const uint64_t chunk_floats = 4;
  const uint64_t total = GENERATE(uint64_t{1}, uint64_t{16}, uint64_t{103});
  // 16-byte chunks; messages of 64 bytes: 2 chunks a request.
  const std::vector<DenseRoute> routes =
      RouteDense(name_hash, total, chunk_floats, /*max_message_bytes=*/64, shard_to_server);
  std::set<uint32_t> chunks;
  for (const DenseRoute& route : routes) {
    CHECK(!route.chunks.empty());
    CHECK(route.chunks.size() <= 2);
    for (uint32_t c : route.chunks) {
      CHECK(shard_to_server[ShardOf(name_hash, c, 8)] == route.server);
      CHECK(chunks.insert(c).second);
    }
  }
  CHECK(chunks.size() == (total + chunk_floats - 1) / chunk_floats);
  CHECK(*chunks.rbegin() == chunks.size() - 1);
}

// A host whose map refreshes to a newer version `newer` times, and records what it is told.
class FakeHost final : public DenseCalls::Host {
 public:
  FakeHost() {
    auto routing = std::make_shared<Routing>();
    routing->version = 1;
    routing_ = routing;
  }
  std::shared_ptr<const Routing> CurrentRouting() const override { return routing_; }
  bool RefreshMap(uint64_t routed_version) override {
    ++refreshes;
    if (newer == 0) return false;
    --newer;
    auto routing = std::make_shared<Routing>();
    routing->version = routed_version + 1;
    routing_ = routing;
    return true;
  }
  void ReportUnavailable(uint32_t server, const absl::Status&) override {}

  int newer = 0;
  int refreshes = 0;

 private:
  std::shared_ptr<const Routing> routing_;
};

TEST_CASE("a dense call is retried while it fails for a retryable reason", "[client][dense]") {
  FakeHost host;
  std::atomic<int64_t> clock{-1};
  std::atomic<uint64_t> next_sequence{1};
  DenseCalls::Options options;
  options.retry_timeout = absl::Seconds(30);
  DenseCalls dense(options, &host, &clock, &next_sequence);
  std::vector<uint64_t> versions;
  auto failing = [&](std::vector<absl::Status> results) {
    return [&versions, results = std::move(results)](const Routing& routing) mutable {
      versions.push_back(routing.version);
      absl::Status next = results.front();
      if (results.size() > 1) results.erase(results.begin());
      return next;
    };
  };
  SECTION("until it succeeds, on the newer map") {
    host.newer = 5;
    CHECK(dense.Retry(failing({absl::UnavailableError("down"), absl::DeadlineExceededError("slow"),
                               absl::OkStatus()}))
              .ok());
    CHECK(versions == std::vector<uint64_t>{1, 2, 3});
  }
  SECTION("not an error that is not retryable") {
    CHECK(dense.Retry(failing({absl::InvalidArgumentError("NaN")})).code() ==
          absl::StatusCode::kInvalidArgument);
    CHECK(versions.size() == 1);
    CHECK(host.refreshes == 0);
  }
  SECTION("not a refused shard when no newer map exists") {
    CHECK(dense.Retry(failing({absl::FailedPreconditionError("not mine")})).code() ==
          absl::StatusCode::kFailedPrecondition);
    CHECK(versions.size() == 1);
    CHECK(host.refreshes == 1);
  }
  SECTION("not past the retry timeout") {
    DenseCalls::Options none;
    none.retry_timeout = absl::ZeroDuration();
    DenseCalls at_once(none, &host, &clock, &next_sequence);
    CHECK(at_once.Retry(failing({absl::UnavailableError("down")})).code() ==
          absl::StatusCode::kUnavailable);
    CHECK(versions.size() == 1);
  }
}

TEST_CASE("a dense push with a NaN, or without a name, is refused before anything is sent",
          "[client][dense]") {
  FakeHost host;
  std::atomic<int64_t> clock{-1};
  std::atomic<uint64_t> next_sequence{1};
  DenseCalls dense(DenseCalls::Options{}, &host, &clock, &next_sequence);
  const std::vector<float> nan = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK(dense.Push("mlp", nan, rpc::PushDenseRequest::GRADIENT).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(dense.Push("", std::vector<float>{1.0f}, rpc::PushDenseRequest::ASSIGN).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(next_sequence == 1);
  CHECK(host.refreshes == 0);
}

TEST_CASE("EndStep outside sync mode sends nothing", "[client][dense]") {
  FakeHost host;
  std::atomic<int64_t> clock{-1};
  std::atomic<uint64_t> next_sequence{1};
  DenseCalls dense(DenseCalls::Options{}, &host, &clock, &next_sequence);
  absl::StatusOr<int64_t> applied = dense.EndStep(3);
  REQUIRE(applied.ok());
  CHECK(*applied == -1);
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

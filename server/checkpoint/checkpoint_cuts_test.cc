#include "server/checkpoint/checkpoint_cuts.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/checkpoint/internal/test_shards.h"
#include "server/shard/shard.h"

namespace ps {
namespace server {
namespace {

using testing::Contents;
using testing::Fixture;

// The shards of a server as its map holds them, seen by CheckpointCuts as a store shows them.
struct FakeServer {
  explicit FakeServer(bool sync) { fixture.config.sync = sync; }

  CheckpointCuts::WithShards with_shards() {
    return [this](absl::FunctionRef<void(uint64_t, CheckpointCuts::ShardLookup)> fn) {
      absl::ReaderMutexLock lock(&mu);
      fn(version, [this](uint32_t s) ABSL_SHARED_LOCKS_REQUIRED(mu) {
        auto it = shards.find(s);
        if (it == shards.end()) return CheckpointCuts::HeldShard{};
        return CheckpointCuts::HeldShard{it->second.get(), primaries.count(s) > 0};
      });
    };
  }
  // A step as the barrier applies it: the cuts told before and after.
  void ApplyStep(CheckpointCuts& cuts, int64_t step) {
    cuts.BeforeStep(step);
    for (auto& [s, shard] : shards) shard->ApplyStep(step);
    cuts.AfterStep(step);
  }
  Shard& shard(uint32_t s) { return *shards.at(s); }

  Fixture fixture;
  absl::Mutex mu;
  uint64_t version = 3;
  std::map<uint32_t, std::unique_ptr<Shard>> shards;
  std::set<uint32_t> primaries;
};

ShardCut TakeAndRead(CheckpointCuts& cuts, uint32_t s) {
  absl::Duration stall, hold;
  absl::StatusOr<ShardCut> cut = cuts.Take(s, absl::Now() + absl::Seconds(30), &stall);
  REQUIRE(cut.ok());
  CHECK(cut->shard == s);
  REQUIRE(cuts.ReadRows(&*cut, &hold).ok());
  CHECK(cut->rows_to_read == 0);
  return std::move(cut).value();
}

TEST_CASE("a checkpoint cuts each primary at its applied sequence, its rows read after",
          "[server][checkpoint_cuts]") {
  FakeServer server(/*sync=*/false);
  for (uint32_t s : {0, 1, 2}) server.shards[s] = server.fixture.Filled(s, 50, 1000 * s);
  server.primaries = {0, 1};  // shard 2: a replica
  CheckpointCuts cuts(/*sync=*/false, server.with_shards());

  // Only this server's primaries, at the installed map version, one checkpoint at a time.
  CHECK(cuts.Begin(-1, -1, {0, 2}, 3).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(cuts.Begin(-1, -1, {0, 9}, 3).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(cuts.Begin(-1, -1, {0, 1}, 2).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(cuts.Begin(4, -1, {0, 1}, 3).code() == absl::StatusCode::kInvalidArgument);
  absl::Duration stall;
  CHECK(cuts.Take(0, absl::InfiniteFuture(), &stall).status().code() ==
        absl::StatusCode::kNotFound);
  REQUIRE(cuts.Begin(-1, -1, {0, 1}, 3).ok());
  CHECK(cuts.Begin(-1, -1, {0, 1}, 3).code() == absl::StatusCode::kFailedPrecondition);

  const Contents at_cut(server.shard(0).Cut(CheckpointCuts::kRecordBytes), server.fixture.tables);
  absl::StatusOr<ShardCut> cut = cuts.Take(0, absl::InfiniteFuture(), &stall);
  REQUIRE(cut.ok());
  // A push after the cut is not in the rows read afterwards.
  const std::vector<uint64_t> ids = {1, 2, 3};
  const std::vector<float> grads(ids.size() * 4, 1.0f);
  server.shard(0).Push(1, /*worker=*/3, /*sequence=*/1, ids, grads.data());
  absl::Duration hold;
  REQUIRE(cuts.ReadRows(&*cut, &hold).ok());
  CHECK(Contents(*cut, server.fixture.tables) == at_cut);
  CHECK(cuts.Take(0, absl::InfiniteFuture(), &stall).status().code() ==
        absl::StatusCode::kNotFound);  // taken

  // A shard that moved away since the checkpoint began.
  server.primaries.erase(1);
  CHECK(cuts.Take(1, absl::InfiniteFuture(), &stall).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  cuts.End();
  cuts.End();  // idempotent
  server.primaries.insert(1);
  REQUIRE(cuts.Begin(-1, -1, {0, 1}, 3).ok());  // the next one may start
  cuts.End();
}

TEST_CASE("an ended checkpoint abandons the reads of its cuts' rows", "[server][checkpoint_cuts]") {
  FakeServer server(/*sync=*/false);
  for (uint32_t s : {0, 1}) server.shards[s] = server.fixture.Filled(s, 50);
  server.primaries = {0, 1};
  CheckpointCuts cuts(/*sync=*/false, server.with_shards());
  REQUIRE(cuts.Begin(-1, -1, {0, 1}, 3).ok());
  absl::Duration stall, hold;
  absl::StatusOr<ShardCut> first = cuts.Take(0, absl::InfiniteFuture(), &stall);
  absl::StatusOr<ShardCut> second = cuts.Take(1, absl::InfiniteFuture(), &stall);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  cuts.End();
  CHECK(cuts.ReadRows(&*first, &hold).code() == absl::StatusCode::kAborted);
  // A shard dropped from this server meanwhile: FAILED_PRECONDITION.
  server.shards.erase(1);
  server.primaries.erase(1);
  CHECK(cuts.ReadRows(&*second, &hold).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a sync checkpoint cuts every shard at its step boundary",
          "[server][checkpoint_cuts][sync]") {
  FakeServer server(/*sync=*/true);
  // Filled's pushes are the sums of step 0, pending.
  for (uint32_t s : {0, 1, 2}) server.shards[s] = server.fixture.Filled(s, 40, 1000 * s);
  server.primaries = {0, 1, 2};
  CheckpointCuts cuts(/*sync=*/true, server.with_shards());
  CHECK(cuts.Begin(-1, -1, {0, 1}, 3).code() == absl::StatusCode::kInvalidArgument);
  // Boundary 0 has passed: step 0's pushes have arrived.
  CHECK(cuts.Begin(0, -1, {0, 1}, 3).code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(cuts.Begin(1, -1, {0, 1, 2}, 3).ok());
  absl::Duration stall;
  CHECK(cuts.Take(0, absl::Now() + absl::Milliseconds(1), &stall).status().code() ==
        absl::StatusCode::kDeadlineExceeded);

  server.ApplyStep(cuts, 0);  // the boundary is reached
  std::map<uint32_t, Contents> boundary;
  for (uint32_t s : {0, 1, 2}) {
    boundary.emplace(
        s, Contents(server.shard(s).Cut(CheckpointCuts::kRecordBytes), server.fixture.tables));
  }
  // Step 1's pushes arrive: the rows stay the boundary's until the step is applied.
  const std::vector<uint64_t> ids = {1, 2, 3, 1001, 2002};
  const std::vector<float> grads(ids.size() * 4, 1.0f);
  for (uint32_t s : {0, 1, 2})
    server.shard(s).Push(1, /*worker=*/3, /*sequence=*/50, ids, grads.data());
  std::vector<ShardCut> taken;
  taken.push_back(TakeAndRead(cuts, 0));
  // Step 1 is applied before shards 1 and 2 are taken: their rows were cut before it.
  server.ApplyStep(cuts, 1);
  taken.push_back(TakeAndRead(cuts, 1));
  taken.push_back(TakeAndRead(cuts, 2));
  for (const ShardCut& cut : taken) {
    CHECK(cut.applied_step == 0);
    CHECK(Contents(cut, server.fixture.tables) == boundary.at(cut.shard));
  }
  cuts.End();

  // Boundaries that have passed; one that is now is cut at once.
  CHECK(cuts.Begin(1, 1, {0}, 3).code() == absl::StatusCode::kFailedPrecondition);
  server.shard(0).Push(1, /*worker=*/3, /*sequence=*/51, ids, grads.data());  // step 2's
  CHECK(cuts.Begin(2, 1, {0}, 3).code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(cuts.Begin(2, 1, {1}, 3).ok());
  CHECK(TakeAndRead(cuts, 1).applied_step == 1);
  cuts.End();
}

TEST_CASE("a wait for a sync boundary ends when the checkpoint ends or the cuts close",
          "[server][checkpoint_cuts][sync]") {
  const bool close = GENERATE(false, true);
  CAPTURE(close);
  FakeServer server(/*sync=*/true);
  server.shards[0] = server.fixture.Filled(0, 10);
  server.primaries = {0};
  CheckpointCuts cuts(/*sync=*/true, server.with_shards());
  REQUIRE(cuts.Begin(1, -1, {0}, 3).ok());
  absl::StatusOr<ShardCut> waited;
  std::thread taker([&] {
    absl::Duration stall;
    waited = cuts.Take(0, absl::InfiniteFuture(), &stall);
  });
  if (close) {
    cuts.Close();
    taker.join();
    CHECK(waited.status().code() == absl::StatusCode::kUnavailable);
    cuts.End();
    CHECK(cuts.Begin(1, -1, {0}, 3).code() == absl::StatusCode::kUnavailable);
    cuts.Close();  // idempotent
  } else {
    cuts.End();
    taker.join();
    // ABORTED if the taker was waiting; NOT_FOUND if it came after the end.
    CHECK((waited.status().code() == absl::StatusCode::kAborted ||
           waited.status().code() == absl::StatusCode::kNotFound));
  }
}

}  // namespace
}  // namespace server
}  // namespace ps

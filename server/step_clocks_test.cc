#include "server/step_clocks.h"

#include <catch2/catch.hpp>

#include "proto/ps.pb.h"

namespace ps {
namespace server {
namespace {

TEST_CASE("pulls report how many steps of some worker's pushes they might miss",
          "[server][step_clocks]") {
  StepClocks clocks(/*num_workers=*/2, /*sync=*/false);
  rpc::ServerStatus status;
  clocks.FillStatus(&status);
  CHECK(status.step_pulls() == 0);
  CHECK(status.mean_pull_staleness() == 0.0);
  CHECK(status.last_pull_oldest_missing_step() == -1);
  // Only worker 1 heard from: worker 2 has pushed nothing, so step 0 is missing.
  for (int64_t step = 0; step < 5; ++step) clocks.RecordPush(1, step);
  clocks.RecordPull(3);
  clocks.FillStatus(&status);
  CHECK(status.last_pull_oldest_missing_step() == 0);
  CHECK(status.max_pull_staleness() == 3);
  // Worker 2 pushed step 0: a pull at step 5 might miss steps 1..4 of it.
  clocks.RecordPush(2, 0);
  clocks.RecordPush(2, -1);  // no clock: ignored
  clocks.RecordPull(5);
  clocks.RecordPull(-1);  // no clock: not counted
  clocks.FillStatus(&status);
  CHECK(status.step_pulls() == 2);
  CHECK(status.last_pull_oldest_missing_step() == 1);
  CHECK(status.max_pull_staleness() == 4);
  CHECK(status.mean_pull_staleness() == Approx(3.5));
  // A pull at step 1 misses nothing older than itself.
  clocks.RecordPull(1);
  clocks.FillStatus(&status);
  CHECK(status.step_pulls() == 3);
  CHECK(status.last_pull_oldest_missing_step() == 1);
  CHECK(status.mean_pull_staleness() == Approx(7.0 / 3));
  CHECK(status.max_pull_staleness() == 4);
}

TEST_CASE("in sync mode a pull misses nothing", "[server][step_clocks][sync]") {
  StepClocks clocks(/*num_workers=*/3, /*sync=*/true);
  clocks.RecordPush(1, 9);
  clocks.RecordPull(4);
  rpc::ServerStatus status;
  clocks.FillStatus(&status);
  CHECK(status.step_pulls() == 1);
  CHECK(status.max_pull_staleness() == 0);
  CHECK(status.mean_pull_staleness() == 0.0);
  CHECK(status.last_pull_oldest_missing_step() == 4);
}

}  // namespace
}  // namespace server
}  // namespace ps

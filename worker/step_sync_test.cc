#include "worker/step_sync.h"

#include <catch2/catch.hpp>

#include "tests/testing/local/local_client.h"

namespace ps {
namespace worker {
namespace {

config::Job OneWorkerJob(config::Training::Mode mode) {
  config::Job job;
  job.set_name("step_sync");
  config::Table* table = job.add_tables();
  table->set_name("emb");
  table->set_dim(4);
  table->mutable_optimizer()->set_type("sgd");
  table->mutable_optimizer()->set_learning_rate(0.1f);
  job.mutable_training()->set_mode(mode);
  if (mode == config::Training::BOUNDED_STALENESS) job.mutable_training()->set_staleness(2);
  job.mutable_cluster()->set_num_shards(4);
  job.mutable_cluster()->set_num_servers(1);
  job.mutable_cluster()->set_num_workers(1);
  return job;
}

// What train_bench's in-process setup does: training with no coordinator at all.
TEST_CASE("without a coordinator, sync and async steps go on and report no clock",
          "[worker][step_sync]") {
  const config::Training::Mode mode = GENERATE(config::Training::SYNC, config::Training::ASYNC);
  const config::Job job = OneWorkerJob(mode);
  auto client = testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  StepSync sync(job, client->get(), /*coordinator=*/nullptr, (*client)->worker_id());
  for (int64_t step = 0; step < 3; ++step) {
    REQUIRE(sync.BeforePull(step).ok());
    const absl::StatusOr<int64_t> next = sync.AfterPush(step);
    INFO(next.status().ToString());
    REQUIRE(next.ok());
    CHECK(*next == step + 1);
  }
}

TEST_CASE("without a coordinator, bounded staleness is refused, naming why",
          "[worker][step_sync]") {
  const config::Job job = OneWorkerJob(config::Training::BOUNDED_STALENESS);
  auto client = testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  StepSync sync(job, client->get(), /*coordinator=*/nullptr, (*client)->worker_id());
  const absl::Status pulled = sync.BeforePull(5);
  CHECK(pulled.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(pulled.message().find("coordinator") != absl::string_view::npos);
  CHECK(sync.AfterPush(0).status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a row cache tightens bounded staleness's wait by its refresh_steps",
          "[worker][step_sync][row_cache]") {
  config::Job job = OneWorkerJob(config::Training::BOUNDED_STALENESS);
  job.mutable_training()->set_staleness(3);
  auto client = testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  // The first step that waits (for step 0) is the one that needs the coordinator's clocks.
  const auto first_wait = [&](const config::Job& j) {
    StepSync sync(j, client->get(), /*coordinator=*/nullptr, (*client)->worker_id());
    for (int64_t step = 0; step < 10; ++step) {
      const absl::Status pulled = sync.BeforePull(step);
      if (!pulled.ok()) {
        CHECK(pulled.code() == absl::StatusCode::kFailedPrecondition);
        return step;
      }
    }
    return int64_t{-1};
  };
  {
    StepSync sync(job, client->get(), nullptr, (*client)->worker_id());
    CHECK(sync.pull_staleness() == 3);
    CHECK(sync.can_prefetch());
    CHECK(first_wait(job) == 4);  // step t waits for t - 3 - 1
  }
  job.mutable_training()->mutable_row_cache()->set_max_rows(100);
  job.mutable_training()->mutable_row_cache()->set_refresh_steps(1);
  {
    StepSync sync(job, client->get(), nullptr, (*client)->worker_id());
    CHECK(sync.pull_staleness() == 2);
    CHECK(sync.can_prefetch());
    CHECK(first_wait(job) == 3);  // t - (3 - 1) - 1
  }
  job.mutable_training()->mutable_row_cache()->set_refresh_steps(2);
  {
    // One step of staleness left to the servers: the next pull waits for this step's push.
    StepSync sync(job, client->get(), nullptr, (*client)->worker_id());
    CHECK(sync.pull_staleness() == 1);
    CHECK_FALSE(sync.can_prefetch());
    CHECK(first_wait(job) == 2);
  }
  // ASYNC waits for nothing, with a cache or without.
  job.mutable_training()->set_mode(config::Training::ASYNC);
  StepSync async(job, client->get(), nullptr, (*client)->worker_id());
  CHECK(async.pull_staleness() == 0);
  CHECK(async.can_prefetch());
  CHECK(first_wait(job) == -1);
}

}  // namespace
}  // namespace worker
}  // namespace ps

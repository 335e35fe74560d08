#include "worker/checkpoint_policy.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/local/local_client.h"
#include "tests/testing/temp_dir.h"
#include "worker/step_sync.h"

namespace ps {
namespace worker {
namespace {

config::Job JobIn(config::Training::Mode mode, const std::string& checkpoint_dir) {
  config::Job job;
  config::Table* t = job.add_tables();
  t->set_name("emb");
  t->set_dim(1);
  job.mutable_training()->set_mode(mode);
  job.mutable_cluster()->set_num_workers(1);
  job.mutable_cluster()->set_num_shards(1);
  if (!checkpoint_dir.empty()) {
    job.mutable_cluster()->set_checkpoint_dir(checkpoint_dir);
    job.mutable_cluster()->set_checkpoint_at_end(true);
  }
  return job;
}

TEST_CASE("CheckpointPolicy: a job whose checkpoints hold no worker state asks nothing of the "
          "worker",
          "[worker][checkpoint_policy]") {
  const config::Job job = JobIn(config::Training::ASYNC, "");
  auto client = testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  StepSync sync(job, client->get(), nullptr, 1);
  // No coordinator: a call to it would crash.
  CheckpointPolicy policy(job, nullptr, &sync, 0);
  const std::vector<float> params = {1, 2}, state = {3};
  CHECK(policy.AtBoundary(0, params, state).ok());
  CHECK(policy.AtEnd(5, 4, params, state).ok());
  const absl::StatusOr<std::string> final_checkpoint = policy.TakeFinal(5);
  REQUIRE(final_checkpoint.ok());
  CHECK(final_checkpoint->empty());
}

TEST_CASE("CheckpointPolicy: only worker 0 has the end-of-training checkpoint taken",
          "[worker][checkpoint_policy]") {
  auto dir = testing::ScopedTempDir::Create("checkpoint_policy");
  REQUIRE(dir.ok());
  const config::Job job = JobIn(config::Training::SYNC, (*dir)->path());
  auto client = testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  StepSync sync(job, client->get(), nullptr, 1);
  CheckpointPolicy policy(job, nullptr, &sync, 1);
  const std::vector<float> params = {1, 2}, state = {3};
  // No checkpoint notice yet: the state is kept, nothing is answered.
  CHECK(policy.AtBoundary(0, params, state).ok());
  const absl::StatusOr<std::string> final_checkpoint = policy.TakeFinal(5);
  REQUIRE(final_checkpoint.ok());
  CHECK(final_checkpoint->empty());
  // Reporting the clock at the end needs the coordinator, which this worker has not.
  CHECK(policy.AtEnd(5, 4, params, state).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("CheckpointPolicy::Restore reports a checkpoint it cannot read, outputs unchanged",
          "[worker][checkpoint_policy]") {
  auto dir = testing::ScopedTempDir::Create("checkpoint_policy");
  REQUIRE(dir.ok());
  const config::Job job = JobIn(config::Training::SYNC, (*dir)->path());
  std::vector<float> params = {1, 2}, state;
  const absl::Status restored = CheckpointPolicy::Restore(
      job, absl::StrCat((*dir)->path(), "/7"), 0, absl::MakeSpan(params), absl::MakeSpan(state));
  CHECK_FALSE(restored.ok());
  CHECK(params == std::vector<float>{1, 2});
}

}  // namespace
}  // namespace worker
}  // namespace ps

#include "worker/best_model.h"

#include <catch2/catch.hpp>
#include <deque>
#include <utility>
#include <vector>

namespace ps {
namespace worker {
namespace {

// Rank 1 of a group of two whose rank 0 adds, to each collective in turn, the next of `inputs`;
// it counts the collectives.
class ScriptedGroup final : public AllReduce {
 public:
  explicit ScriptedGroup(std::deque<std::vector<float>> inputs) : inputs_(std::move(inputs)) {}
  absl::Status SumInPlace(absl::Span<float> data) override {
    ++collectives;
    REQUIRE(!inputs_.empty());
    const std::vector<float> input = std::move(inputs_.front());
    inputs_.pop_front();
    REQUIRE(input.size() == data.size());
    for (size_t i = 0; i < data.size(); ++i) data[i] += input[i];
    return absl::OkStatus();
  }
  int rank() const override { return 1; }
  int size() const override { return 2; }

  int collectives = 0;

 private:
  std::deque<std::vector<float>> inputs_;
};

config::Job KeepingJob(bool restore_best) {
  config::Job job;
  job.mutable_training()->set_mode(config::Training::SYNC);
  job.mutable_training()->mutable_dense_optimizer()->set_type("adam");
  job.mutable_training()->mutable_early_stopping()->set_restore_best(restore_best);
  job.mutable_cluster()->set_checkpoint_dir("/checkpoints");
  return job;
}

TEST_CASE("BestModel: every worker takes worker 0's kept dense state", "[worker][best_model]") {
  // Worker 0 kept the model of step 126 (126 + 1 in two floats: 0 x 2^20 + 127), restored it on
  // the servers, and shares its state.
  ScriptedGroup group({{0.0f, 127.0f}, {1.0f, 0.5f, -1.5f, 0.25f}});
  BestModel best(KeepingJob(true), nullptr, &group, nullptr);
  REQUIRE(best.enabled());
  CHECK(best.Keep(126, {}, {}).ok());  // worker 0's part only
  std::vector<float> params = {9.0f, 9.0f};
  std::vector<float> state = {9.0f};
  const absl::StatusOr<int64_t> kept =
      best.Restore(true, absl::MakeSpan(params), absl::MakeSpan(state));
  REQUIRE(kept.ok());
  CHECK(*kept == 126);
  CHECK(params == std::vector<float>{0.5f, -1.5f});
  CHECK(state == std::vector<float>{0.25f});
  CHECK(group.collectives == 2);
  CHECK(best.checkpoint().empty());  // worker 0's
}

TEST_CASE("BestModel: when worker 0 could not restore, every worker fails and keeps its state",
          "[worker][best_model]") {
  ScriptedGroup group({{0.0f, 127.0f}, {0.0f, 0.0f, 0.0f, 0.0f}});
  BestModel best(KeepingJob(true), nullptr, &group, nullptr);
  std::vector<float> params = {9.0f, 9.0f};
  std::vector<float> state = {9.0f};
  const absl::StatusOr<int64_t> kept =
      best.Restore(true, absl::MakeSpan(params), absl::MakeSpan(state));
  CHECK(kept.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(params == std::vector<float>{9.0f, 9.0f});
  CHECK(state == std::vector<float>{9.0f});
}

TEST_CASE("BestModel: the last model stays without an early stop, a kept model or restore_best",
          "[worker][best_model]") {
  std::vector<float> params = {9.0f};
  std::vector<float> state;
  SECTION("training ran all its steps: no collective") {
    ScriptedGroup group({});
    BestModel best(KeepingJob(true), nullptr, &group, nullptr);
    CHECK(*best.Restore(false, absl::MakeSpan(params), absl::MakeSpan(state)) == -1);
    CHECK(group.collectives == 0);
  }
  SECTION("no evaluation improved: worker 0 kept nothing") {
    ScriptedGroup group({{0.0f, 0.0f}});
    BestModel best(KeepingJob(true), nullptr, &group, nullptr);
    CHECK(*best.Restore(true, absl::MakeSpan(params), absl::MakeSpan(state)) == -1);
    CHECK(group.collectives == 1);
  }
  SECTION("restore_best: false, or no checkpoint_dir") {
    ScriptedGroup group({});
    config::Job job = KeepingJob(false);
    CHECK_FALSE(BestModel(job, nullptr, &group, nullptr).enabled());
    job = KeepingJob(true);
    job.mutable_cluster()->clear_checkpoint_dir();
    BestModel best(job, nullptr, &group, nullptr);
    CHECK_FALSE(best.enabled());
    CHECK(best.Keep(5, absl::MakeConstSpan(params), {}).ok());
    CHECK(*best.Restore(true, absl::MakeSpan(params), absl::MakeSpan(state)) == -1);
    CHECK(group.collectives == 0);
  }
  CHECK(params == std::vector<float>{9.0f});
}

}  // namespace
}  // namespace worker
}  // namespace ps

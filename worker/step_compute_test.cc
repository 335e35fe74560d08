#include "worker/step_compute.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "worker/testing/tiny_model.h"

namespace ps {
namespace worker {
namespace {

config::Job TinyJob(int dense_sync_every) {
  config::Job job;
  AddTinyModel(&job);
  job.mutable_training()->set_batch_size(4);
  job.mutable_training()->set_dense_sync_every(dense_sync_every);
  job.mutable_training()->mutable_dense_optimizer()->set_type("sgd");
  job.mutable_training()->mutable_dense_optimizer()->set_learning_rate(0.5f);
  job.mutable_training()->set_seed(11);
  return job;
}

// A seeded batch of `n` samples and its rows (3 fields x 4 floats each).
void RandomBatch(int n, Batch* batch, std::vector<float>* rows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  batch->size = n;
  batch->labels.clear();
  batch->dense.clear();
  for (int i = 0; i < n; ++i) batch->labels.push_back(static_cast<float>(i % 2));
  for (int i = 0; i < 2 * n; ++i) batch->dense.push_back(normal(rng));
  batch->keys.assign(3 * n, 1);
  rows->clear();
  for (int i = 0; i < 3 * 4 * n; ++i) rows->push_back(normal(rng));
}

std::unique_ptr<StepCompute> Make(int dense_sync_every, int world, bool balanced) {
  auto compute = StepCompute::Create(TinyJob(dense_sync_every), Backend::kCpu, world, balanced);
  REQUIRE(compute.ok());
  return std::move(*compute);
}

TEST_CASE("StepCompute weighs every sample the same across workers, batches and local SGD",
          "[worker][step_compute]") {
  Batch batch;
  std::vector<float> rows;
  RandomBatch(4, &batch, &rows);
  auto one = Make(1, 1, false);
  auto two = Make(1, 2, false);
  auto local = Make(4, 2, false);
  const float loss = one->ForwardBackward(batch, rows);
  CHECK(two->ForwardBackward(batch, rows) == loss);
  CHECK(local->ForwardBackward(batch, rows) == loss);
  REQUIRE(one->probs().size() == 4);
  REQUIRE(one->emb_grad().size() == rows.size());
  const std::vector<float> g1(one->dense_grad().begin(), one->dense_grad().end());
  // Summed over 2 workers by AllReduce, each worker's part is half (exactly: a power of two);
  // local SGD's own gradient is whole.
  for (size_t i = 0; i < g1.size(); ++i) {
    CHECK(two->dense_grad()[i] == 0.5f * g1[i]);
    CHECK(local->dense_grad()[i] == g1[i]);
  }
  // A balanced batch of 2 where batch_size is 4 counts for half of a full one's gradient.
  auto balanced = Make(1, 1, true);
  Batch half;
  std::vector<float> half_rows;
  RandomBatch(2, &half, &half_rows);
  auto unbalanced = Make(1, 1, false);
  balanced->ForwardBackward(half, half_rows);
  unbalanced->ForwardBackward(half, half_rows);
  for (size_t i = 0; i < g1.size(); ++i) {
    CHECK(balanced->dense_grad()[i] == 0.5f * unbalanced->dense_grad()[i]);
  }
}

TEST_CASE("StepCompute: an empty batch adds nothing, and local SGD applies nothing for it",
          "[worker][step_compute]") {
  const int sync_every = GENERATE(1, 4);
  INFO("dense_sync_every " << sync_every);
  auto compute = Make(sync_every, 1, false);
  Batch batch;
  std::vector<float> rows;
  RandomBatch(4, &batch, &rows);
  compute->ForwardBackward(batch, rows);
  const std::vector<float> before(compute->params().begin(), compute->params().end());
  compute->ApplyDense(4);
  const std::vector<float> after(compute->params().begin(), compute->params().end());
  CHECK(after != before);
  // Local SGD skips the update of an empty batch (the gradient left over is not applied).
  compute->ApplyDense(0);
  const std::vector<float> skipped(compute->params().begin(), compute->params().end());
  CHECK((skipped == after) == (sync_every > 1));

  Batch empty;
  CHECK(compute->ForwardBackward(empty, {}) == 0.0f);
  for (float g : compute->dense_grad()) CHECK(g == 0.0f);
  CHECK(compute->probs().empty());
  CHECK(compute->optimizer_state().size() == 0);  // sgd keeps none
}

}  // namespace
}  // namespace worker
}  // namespace ps

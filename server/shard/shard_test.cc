#include "server/shard/shard.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "server/storage/embedding_table.h"

namespace ps {
namespace server {
namespace {

constexpr uint32_t kDim = 4;

// Two tables ("a" with adagrad, "b" with sgd) and an sgd dense optimizer.
struct Fixture {
  explicit Fixture(bool sync) {
    for (const char* name : {"a", "b"}) {
      config::Table table;
      table.set_name(name);
      table.set_dim(kDim);
      table.mutable_optimizer()->set_type(std::string(name) == "a" ? "adagrad" : "sgd");
      table.mutable_optimizer()->set_learning_rate(0.5f);
      table.mutable_initializer()->set_kind(config::Initializer::NORMAL);
      auto spec = TableSpec::Create(table, /*job_seed=*/7);
      REQUIRE(spec.ok());
      tables.push_back(std::move(spec).value());
    }
    config::Optimizer dense;
    dense.set_type("sgd");
    dense.set_learning_rate(1.0f);
    auto opt = Optimizer::Create(dense);
    REQUIRE(opt.ok());
    dense_optimizer = std::move(opt).value();
    config.tables = &tables;
    config.dense_optimizer = dense_optimizer.get();
    config.dense_chunk_floats = 8;
    config.sync = sync;
  }

  std::vector<std::unique_ptr<TableSpec>> tables;
  std::unique_ptr<Optimizer> dense_optimizer;
  ShardConfig config;
};

std::vector<float> PullRows(Shard& shard, size_t table, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * kDim);
  shard.Pull(table, keys, out.data());
  return out;
}

TEST_CASE("a push is applied once per (worker, sequence) and counted in the sequence",
          "[shard]") {
  Fixture f(/*sync=*/false);
  Shard shard(3, f.config, {16, 0});
  CHECK(shard.id() == 3);
  CHECK(shard.applied_sequence() == 0);
  const std::vector<uint64_t> keys = {5, 9, 5};
  const std::vector<float> before = PullRows(shard, 1, {5, 9});
  std::vector<float> grads(keys.size() * kDim, 1.0f);
  CHECK(shard.Push(1, /*worker=*/2, /*sequence=*/1, keys, grads.data()) ==
        ApplyWindow::Verdict::kApply);
  CHECK(shard.applied_sequence() == 1);
  // A retry changes nothing.
  CHECK(shard.Push(1, 2, 1, keys, grads.data()) == ApplyWindow::Verdict::kDuplicate);
  CHECK(shard.applied_sequence() == 1);
  // sgd at rate 0.5: key 5 got two gradients of 1 (summed), key 9 one.
  const std::vector<float> after = PullRows(shard, 1, {5, 9});
  for (uint32_t j = 0; j < kDim; ++j) {
    CHECK(after[j] == before[j] - 1.0f);
    CHECK(after[kDim + j] == before[kDim + j] - 0.5f);
  }
  // Another worker's sequence 1 is its own.
  CHECK(shard.Push(1, 3, 1, keys, grads.data()) == ApplyWindow::Verdict::kApply);
  CHECK(shard.applied_sequence() == 2);
  std::vector<uint64_t> rows(2, 0), bytes(2, 0);
  shard.AddSizes(&rows, &bytes);
  CHECK(rows == std::vector<uint64_t>{0, 2});
  CHECK(bytes[1] > 0);
}

TEST_CASE("sync pushes wait for ApplyStep, which applies their sum once", "[shard]") {
  Fixture f(/*sync=*/true);
  Shard shard(0, f.config, {});
  const std::vector<uint64_t> keys = {11};
  const std::vector<float> before = PullRows(shard, 1, keys);
  std::vector<float> grads(kDim, 2.0f);
  REQUIRE(shard.Push(1, 1, 1, keys, grads.data()) == ApplyWindow::Verdict::kApply);
  REQUIRE(shard.Push(1, 2, 1, keys, grads.data()) == ApplyWindow::Verdict::kApply);
  CHECK(PullRows(shard, 1, keys) == before);
  CHECK(shard.applied_step() == -1);
  shard.ApplyStep(0);
  CHECK(shard.applied_step() == 0);
  CHECK(shard.applied_sequence() == 3);
  const std::vector<float> after = PullRows(shard, 1, keys);
  for (uint32_t j = 0; j < kDim; ++j) CHECK(after[j] == before[j] - 2.0f);
  // The sums were consumed: an empty step changes no row.
  shard.ApplyStep(1);
  CHECK(PullRows(shard, 1, keys) == after);
  CHECK(shard.applied_step() == 1);
}

TEST_CASE("dense chunks: assign, gradients once per sequence, refused writes record nothing",
          "[shard]") {
  Fixture f(/*sync=*/false);
  Shard shard(0, f.config, {});
  std::vector<float> values;
  uint64_t total = 0;
  CHECK(shard.ReadDense("w", 0, &values, &total).code() == absl::StatusCode::kNotFound);
  const std::vector<float> init(8, 1.0f);
  REQUIRE(shard.AssignDense("w", 0, init, 10).ok());
  CHECK(shard.applied_sequence() == 1);
  REQUIRE(shard.ReadDense("w", 0, &values, &total).ok());
  CHECK(values == init);
  CHECK(total == 10);
  // A gradient of the wrong length is refused and does not use up its sequence.
  const std::vector<float> short_grad(3, 1.0f);
  CHECK(shard.ApplyDenseGradient("w", 0, short_grad, 10, 1, 5).status().code() ==
        absl::StatusCode::kInvalidArgument);
  const std::vector<float> grad(8, 0.25f);
  auto applied = shard.ApplyDenseGradient("w", 0, grad, 10, 1, 5);
  REQUIRE(applied.ok());
  CHECK(*applied == ApplyWindow::Verdict::kApply);
  auto again = shard.ApplyDenseGradient("w", 0, grad, 10, 1, 5);
  REQUIRE(again.ok());
  CHECK(*again == ApplyWindow::Verdict::kDuplicate);
  REQUIRE(shard.ReadDense("w", 0, &values, &total).ok());
  CHECK(values == std::vector<float>(8, 0.75f));
  CHECK(shard.applied_sequence() == 2);
}

}  // namespace
}  // namespace server
}  // namespace ps

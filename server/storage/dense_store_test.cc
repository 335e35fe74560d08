#include "server/storage/dense_store.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/job.pb.h"

namespace ps {
namespace server {
namespace {

std::unique_ptr<Optimizer> MakeOptimizer(const std::string& type) {
  config::Optimizer o;
  o.set_type(type);
  o.set_learning_rate(0.5f);
  auto opt = Optimizer::Create(o);
  REQUIRE(opt.ok());
  return std::move(opt).value();
}

TEST_CASE("assigned chunks read back", "[storage][dense_store]") {
  DenseChunkStore store(4);
  // A tensor of 10 floats: chunks of 4, 4 and 2.
  REQUIRE(store.Assign("w", 0, {1, 2, 3, 4}, 10).ok());
  REQUIRE(store.Assign("w", 2, {9, 10}, 10).ok());
  std::vector<float> out = {42};
  REQUIRE(store.Read("w", 0, &out).ok());
  CHECK(out == std::vector<float>{1, 2, 3, 4});
  REQUIRE(store.Read("w", 2, &out).ok());
  CHECK(out == std::vector<float>{9, 10});
  REQUIRE(store.Assign("w", 0, {5, 6, 7, 8}, 10).ok());
  REQUIRE(store.Read("w", 0, &out).ok());
  CHECK(out == std::vector<float>{5, 6, 7, 8});
  CHECK(*store.TotalFloats("w") == 10);

  // Never written: NOT_FOUND, and the out-parameter is left alone.
  CHECK(store.Read("w", 1, &out).code() == absl::StatusCode::kNotFound);
  CHECK(store.Read("b", 0, &out).code() == absl::StatusCode::kNotFound);
  CHECK(store.TotalFloats("b").status().code() == absl::StatusCode::kNotFound);
  CHECK(out == std::vector<float>{5, 6, 7, 8});
}

TEST_CASE("writes that disagree with the tensor's shape are refused", "[storage][dense_store]") {
  DenseChunkStore store(4);
  REQUIRE(store.Assign("w", 0, {1, 2, 3, 4}, 10).ok());
  const auto opt = MakeOptimizer("sgd");
  const std::vector<float> four = {1, 1, 1, 1};
  const std::vector<float> two = {1, 1};
  const bool gradient = GENERATE(false, true);
  auto write = [&](const std::string& name, uint32_t chunk, const std::vector<float>& values,
                   uint64_t total) {
    return gradient ? store.ApplyGradient(name, chunk, values, total, *opt)
                    : store.Assign(name, chunk, values, total);
  };
  CHECK(write("w", 1, four, 12).code() == absl::StatusCode::kInvalidArgument);  // other total
  CHECK(write("w", 1, two, 10).code() == absl::StatusCode::kInvalidArgument);   // short chunk
  CHECK(write("w", 2, four, 10).code() == absl::StatusCode::kInvalidArgument);  // last is 2 long
  CHECK(write("w", 3, two, 10).code() == absl::StatusCode::kInvalidArgument);   // beyond the end
  CHECK(write("x", 0, {}, 0).code() == absl::StatusCode::kInvalidArgument);     // empty tensor
  CHECK(write("", 0, four, 10).code() == absl::StatusCode::kInvalidArgument);
  // Nothing changed.
  std::vector<float> out;
  REQUIRE(store.Read("w", 0, &out).ok());
  CHECK(out == std::vector<float>{1, 2, 3, 4});
  CHECK(store.Read("w", 1, &out).code() == absl::StatusCode::kNotFound);
  CHECK(store.TotalFloats("x").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("gradients update chunks like the optimizer updates a row", "[storage][dense_store]") {
  const std::string type = GENERATE("sgd", "adagrad", "adam", "ftrl");
  CAPTURE(type);
  const auto opt = MakeOptimizer(type);
  const uint32_t chunk_floats = 5;
  const uint64_t total = 13;  // chunks of 5, 5 and 3
  DenseChunkStore store(chunk_floats);

  // The same updates applied by hand to zeros with a fresh state, chunk by chunk.
  std::vector<std::vector<float>> weights, states;
  for (uint32_t c = 0; c < 3; ++c) {
    const uint32_t len = c < 2 ? 5 : 3;
    weights.emplace_back(len, 0.0f);
    states.emplace_back(opt->StateFloats(len));
    opt->InitState(len, states.back().data());
  }
  // Chunk 1 is assigned first: its values are kept and its state starts fresh at the first
  // gradient.
  REQUIRE(store.Assign("dense", 1, {1, 2, 3, 4, 5}, total).ok());
  weights[1] = {1, 2, 3, 4, 5};

  for (int step = 0; step < 4; ++step) {
    for (uint32_t c = 0; c < 3; ++c) {
      std::vector<float> grads(weights[c].size());
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.1f * (step + 1) - 0.05f * i + c;
      REQUIRE(store.ApplyGradient("dense", c, grads, total, *opt).ok());
      opt->Apply(static_cast<uint32_t>(grads.size()), grads.data(), weights[c].data(),
                 states[c].data());
    }
  }
  for (uint32_t c = 0; c < 3; ++c) {
    std::vector<float> out;
    REQUIRE(store.Read("dense", c, &out).ok());
    CHECK(out == weights[c]);
  }
  // Assigning keeps the optimizer state: the next gradient continues from it.
  REQUIRE(store.Assign("dense", 0, {0, 0, 0, 0, 0}, total).ok());
  const std::vector<float> g = {1, 1, 1, 1, 1};
  REQUIRE(store.ApplyGradient("dense", 0, g, total, *opt).ok());
  std::vector<float> expected(5, 0.0f);
  opt->Apply(5, g.data(), expected.data(), states[0].data());
  std::vector<float> out;
  REQUIRE(store.Read("dense", 0, &out).ok());
  CHECK(out == expected);
}

}  // namespace
}  // namespace server
}  // namespace ps

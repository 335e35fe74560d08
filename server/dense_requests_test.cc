#include "server/dense_requests.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/hash.h"
#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "server/shard/shard.h"
#include "server/storage/embedding_table.h"

namespace ps {
namespace server {
namespace {

constexpr uint32_t kShards = 4;

// kShards shards with no tables, dense chunks of 4 floats applied with sgd (learning rate 1);
// `served` gives every shard but those in `not_served`.
struct Shards {
  Shards() {
    config::Optimizer sgd;
    sgd.set_type("sgd");
    sgd.set_learning_rate(1.0f);
    optimizer = std::move(Optimizer::Create(sgd)).value();
    config.tables = &tables;
    config.dense_optimizer = optimizer.get();
    config.dense_chunk_floats = 4;
    for (uint32_t s = 0; s < kShards; ++s) {
      shards.push_back(std::make_unique<Shard>(s, config, std::vector<size_t>{}));
    }
  }
  absl::StatusOr<Shard*> Served(uint32_t s) {
    if (not_served.count(s) > 0) return absl::FailedPreconditionError("not served here");
    return shards[s].get();
  }
  absl::Status Push(const rpc::PushDenseRequest& request,
                    std::vector<std::pair<uint32_t, uint64_t>>* replicated_at = nullptr) {
    return PushDenseChunks(
        request, kShards, [this](uint32_t s) { return Served(s); }, replicated_at);
  }
  absl::Status Pull(const rpc::PullDenseRequest& request, rpc::PullDenseResponse* response,
                    uint64_t max_message_bytes = 1 << 20) {
    return PullDenseChunks(
        request, kShards, max_message_bytes, [this](uint32_t s) { return Served(s); }, response);
  }

  std::vector<std::unique_ptr<TableSpec>> tables;
  std::unique_ptr<Optimizer> optimizer;
  ShardConfig config;
  std::vector<std::unique_ptr<Shard>> shards;
  std::map<uint32_t, bool> not_served;
};

// A push of `name` (total `values.size()` floats) chunk by chunk, chunks of 4 floats.
rpc::PushDenseRequest Push(const std::string& name, const std::vector<float>& values) {
  rpc::PushDenseRequest push;
  push.set_name(name);
  push.set_total_floats(values.size());
  for (size_t at = 0, c = 0; at < values.size(); at += 4, ++c) {
    rpc::DenseChunk* chunk = push.add_chunks();
    chunk->set_chunk(c);
    const size_t n = std::min<size_t>(4, values.size() - at);
    chunk->set_values(reinterpret_cast<const char*>(values.data() + at), n * sizeof(float));
  }
  return push;
}

std::vector<float> Pulled(Shards& shards, const std::string& name, uint32_t chunks) {
  rpc::PullDenseRequest pull;
  pull.set_name(name);
  for (uint32_t c = 0; c < chunks; ++c) pull.add_chunks(c);
  rpc::PullDenseResponse response;
  REQUIRE(shards.Pull(pull, &response).ok());
  std::vector<float> out;
  for (const rpc::DenseChunk& chunk : response.chunks()) {
    const size_t n = chunk.values().size() / sizeof(float);
    out.resize(out.size() + n);
    std::memcpy(out.data() + out.size() - n, chunk.values().data(), chunk.values().size());
  }
  return out;
}

TEST_CASE("a dense tensor's chunks live on their shards, gradients applied once per sequence",
          "[server][dense]") {
  Shards shards;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> values(14);
  for (float& v : values) v = uniform(rng);
  std::vector<std::pair<uint32_t, uint64_t>> replicated_at;
  REQUIRE(shards.Push(Push("mlp", values), &replicated_at).ok());
  REQUIRE(replicated_at.size() == 4);
  std::map<uint32_t, uint64_t> writes;  // by shard: each write advances its applied sequence
  for (uint32_t c = 0; c < 4; ++c) {
    const uint32_t s = ShardOf(NameHash("mlp"), c, kShards);
    CHECK(replicated_at[c].first == s);
    CHECK(replicated_at[c].second == ++writes[s]);
    std::vector<float> chunk;
    uint64_t total = 0;
    REQUIRE(shards.shards[s]->ReadDense("mlp", c, &chunk, &total).ok());
    CHECK(total == 14);
  }
  CHECK(Pulled(shards, "mlp", 4) == values);

  // Chunk c of a gradient is (worker, sequence + c): a retry applies nothing.
  std::vector<float> grads(14);
  for (float& g : grads) g = uniform(rng);
  rpc::PushDenseRequest gradient = Push("mlp", grads);
  gradient.set_kind(rpc::PushDenseRequest::GRADIENT);
  gradient.mutable_header()->set_worker_id(2);
  gradient.mutable_header()->set_sequence(10);
  REQUIRE(shards.Push(gradient).ok());
  REQUIRE(shards.Push(gradient).ok());
  const std::vector<float> after = Pulled(shards, "mlp", 4);
  for (size_t i = 0; i < values.size(); ++i) CHECK(after[i] == Approx(values[i] - grads[i]));
  // A chunk's sequence more than the window below the newest: refused.
  gradient.mutable_header()->set_sequence(5000);
  REQUIRE(shards.Push(gradient).ok());
  gradient.mutable_header()->set_sequence(11);
  const absl::Status old = shards.Push(gradient);
  CHECK(old.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(old.message(), "more than 1024 below"));
}

TEST_CASE("a malformed dense push changes nothing", "[server][dense]") {
  Shards shards;
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  REQUIRE(shards.Push(Push("mlp", values)).ok());
  rpc::PushDenseRequest bad = Push("mlp", {9, 9, 9, 9, 9, 9});
  bad.set_kind(rpc::PushDenseRequest::GRADIENT);
  bad.mutable_header()->set_worker_id(1);
  bad.mutable_header()->set_sequence(1);
  absl::StatusCode expected = absl::StatusCode::kInvalidArgument;
  SECTION("no name") { bad.clear_name(); }
  SECTION("no sequence") { bad.mutable_header()->set_sequence(0); }
  SECTION("a chunk twice") { *bad.add_chunks() = bad.chunks(0); }
  SECTION("sequence + chunk above 2^64 - 1") { bad.mutable_header()->set_sequence(UINT64_MAX); }
  SECTION("torn floats") { bad.mutable_chunks(1)->mutable_values()->push_back('x'); }
  SECTION("a NaN") {
    const float nan = std::nanf("");
    bad.mutable_chunks(1)->mutable_values()->replace(0, 4, reinterpret_cast<const char*>(&nan), 4);
  }
  SECTION("another total") { bad.set_total_floats(7); }
  SECTION("a chunk's shard not served") {
    shards.not_served[ShardOf(NameHash("mlp"), 1, kShards)] = true;
    expected = absl::StatusCode::kFailedPrecondition;
  }
  CHECK(shards.Push(bad).code() == expected);
  shards.not_served.clear();
  CHECK(Pulled(shards, "mlp", 2) == values);
}

TEST_CASE("a dense pull answers its chunks, or the first error", "[server][dense]") {
  Shards shards;
  REQUIRE(shards.Push(Push("mlp", std::vector<float>(12, 0.5f))).ok());
  rpc::PullDenseRequest pull;
  pull.set_name("mlp");
  pull.add_chunks(2);
  pull.add_chunks(0);
  rpc::PullDenseResponse response;
  REQUIRE(shards.Pull(pull, &response).ok());
  REQUIRE(response.chunks_size() == 2);
  CHECK(response.chunks(0).chunk() == 2);
  CHECK(response.total_floats() == 12);
  // Above the message limit.
  response.Clear();
  CHECK(shards.Pull(pull, &response, /*max_message_bytes=*/20).code() ==
        absl::StatusCode::kResourceExhausted);
  // A chunk never written; a tensor never written; a shard not served here.
  pull.add_chunks(3);
  CHECK(shards.Pull(pull, &response).code() == absl::StatusCode::kNotFound);
  pull.set_name("other");
  pull.clear_chunks();
  pull.add_chunks(0);
  CHECK(shards.Pull(pull, &response).code() == absl::StatusCode::kNotFound);
  shards.not_served[ShardOf(NameHash("other"), 0, kShards)] = true;
  CHECK(shards.Pull(pull, &response).code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace server
}  // namespace ps

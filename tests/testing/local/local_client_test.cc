#include "tests/testing/local/local_client.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "common/job_config.h"

namespace ps {
namespace testing {
namespace {

constexpr uint32_t kDim = 8;
constexpr float kLearningRate = 0.5f;

// sgd from zeros: a row is -kLearningRate times the sum of its gradients. A 1 MiB message limit
// holds 24576 keys of dim 8 per request, so large calls are cut into several. Dense chunks of 16
// floats spread a small tensor over several shards.
config::Job TestJob(config::Training::Mode mode = config::Training::ASYNC) {
  absl::StatusOr<config::Job> job =
      ParseJob(R"pb(
                 tables {
                   name: "emb"
                   dim: 8
                   initializer { kind: ZEROS }
                   optimizer { type: "sgd" learning_rate: 0.5 }
                 }
                 tables {
                   name: "other"
                   dim: 3
                   initializer { kind: ZEROS }
                   optimizer { type: "sgd" learning_rate: 1 }
                 }
                 training { dense_optimizer { type: "sgd" learning_rate: 0.5 } }
                 cluster {
                   num_shards: 16
                   num_servers: 2
                   num_workers: 1
                   max_message_bytes: 1048576
                   dense_chunk_floats: 16
                 }
               )pb",
               "test.pbtxt");
  REQUIRE(job.ok());
  job->mutable_training()->set_mode(mode);
  return *job;
}

std::unique_ptr<LocalClient> NewClient(config::Training::Mode mode = config::Training::ASYNC,
                                       LocalClientOptions options = {}) {
  absl::StatusOr<std::unique_ptr<LocalClient>> client = LocalClient::Create(TestJob(mode), options);
  REQUIRE(client.ok());
  return std::move(*client);
}

TEST_CASE("LocalClient describes its job and a one-server shard map", "[local_client]") {
  std::unique_ptr<LocalClient> client = NewClient();
  CHECK(client->job().tables_size() == 2);
  CHECK(client->worker_id() == 1);
  CHECK(client->rank() == 0);
  CHECK(*client->Dim("emb") == kDim);
  CHECK(*client->Dim("other") == 3);
  CHECK(client->Dim("nope").status().code() == absl::StatusCode::kNotFound);
  const rpc::ShardMap map = client->shard_map();
  CHECK(map.version() == 1);
  REQUIRE(map.num_shards() == 16);
  REQUIRE(map.shards_size() == 16);
  for (int s = 0; s < map.shards_size(); ++s) {
    CHECK(map.shards(s).shard() == static_cast<uint32_t>(s));
    CHECK(map.shards(s).primary() == 0);
  }
  CHECK(client->store().map_version() == 1);
}

TEST_CASE("LocalClient pushes and pulls match a reference of sums", "[local_client]") {
  // 100000 keys take five requests; repeated keys are summed.
  const int num_keys = GENERATE(1, 1000, 100000);
  const int distinct = GENERATE(1, 50, 1 << 30);
  // Sync: a step's pushes are applied when it ends, and the next step's pull sees them.
  const config::Training::Mode mode = GENERATE(config::Training::ASYNC, config::Training::SYNC);
  std::unique_ptr<LocalClient> client = NewClient(mode);
  std::mt19937_64 rng(num_keys * 31 + distinct);
  std::map<uint64_t, std::vector<double>> expected;  // key -> sum of its gradients
  for (int round = 0; round < 3; ++round) {
    std::vector<uint64_t> keys(num_keys);
    for (uint64_t& k : keys) k = rng() % distinct;
    std::vector<float> grads(keys.size() * kDim);
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (float& g : grads) g = uniform(rng);
    client->SetClock(round);
    REQUIRE(client->Push("emb", keys, grads).ok());
    REQUIRE(client->EndStep(round).ok());
    client->SetClock(round + 1);
    for (size_t i = 0; i < keys.size(); ++i) {
      std::vector<double>& sum = expected[keys[i]];
      sum.resize(kDim);
      for (uint32_t j = 0; j < kDim; ++j) sum[j] += grads[i * kDim + j];
    }
    std::vector<float> rows(keys.size() * kDim, std::nanf(""));
    REQUIRE(client->Pull("emb", keys, absl::MakeSpan(rows)).ok());
    // Float sums of up to 300000 gradients in the store against double sums here.
    size_t wrong = 0, first_wrong = 0;
    for (size_t i = 0; i < keys.size() * kDim; ++i) {
      const double want = -kLearningRate * expected[keys[i / kDim]][i % kDim];
      if (std::abs(rows[i] - want) > 1e-4 + 1e-4 * std::abs(want) && wrong++ == 0) first_wrong = i;
    }
    INFO("round " << round << ": first wrong float " << first_wrong << " of key "
                  << keys[first_wrong / kDim] << ": " << rows[first_wrong] << " vs "
                  << -kLearningRate * expected[keys[first_wrong / kDim]][first_wrong % kDim]);
    REQUIRE(wrong == 0);
  }
  // A key never pushed comes from the initializer; the other table is untouched.
  std::vector<float> fresh(kDim, 1.0f);
  REQUIRE(client->Pull("emb", {uint64_t{1} << 62}, absl::MakeSpan(fresh)).ok());
  CHECK(fresh == std::vector<float>(kDim, 0.0f));
  std::vector<float> other(3, 1.0f);
  REQUIRE(client->Pull("other", {0}, absl::MakeSpan(other)).ok());
  CHECK(other == std::vector<float>(3, 0.0f));
}

TEST_CASE("LocalClient returns the network client's errors and applies nothing", "[local_client]") {
  std::unique_ptr<LocalClient> client = NewClient();
  // Enough keys for several requests, so that a refused push would be visible in any of them.
  std::vector<uint64_t> keys(60000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  std::vector<float> rows(keys.size() * kDim);
  std::vector<float> grads(keys.size() * kDim, 1.0f);

  CHECK(client->Pull("nope", keys, absl::MakeSpan(rows)).code() == absl::StatusCode::kNotFound);
  CHECK(client->Push("nope", keys, grads).code() == absl::StatusCode::kNotFound);
  CHECK(client->Pull("emb", keys, absl::MakeSpan(rows).subspan(1)).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(client->Push("emb", keys, absl::MakeSpan(grads).subspan(1)).code() ==
        absl::StatusCode::kInvalidArgument);
  const float bad =
      GENERATE(std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity());
  grads.back() = bad;
  CHECK(client->Push("emb", keys, grads).code() == absl::StatusCode::kInvalidArgument);

  REQUIRE(client->Pull("emb", keys, absl::MakeSpan(rows)).ok());
  CHECK(rows == std::vector<float>(rows.size(), 0.0f));
  // An empty call does nothing and succeeds.
  CHECK(client->Pull("emb", {}, absl::Span<float>()).ok());
  CHECK(client->Push("emb", {}, absl::Span<const float>()).ok());
}

TEST_CASE("LocalClient in sync mode keeps the servers' step rules", "[local_client]") {
  LocalClientOptions options;
  options.step_wait_timeout = absl::Milliseconds(50);
  std::unique_ptr<LocalClient> client = NewClient(config::Training::SYNC, options);
  const std::vector<uint64_t> keys = {1, 2};
  const std::vector<float> grads(keys.size() * kDim, 1.0f);
  std::vector<float> rows(keys.size() * kDim);
  // A push without its step is refused; steps ahead of the pending one wait for it, and are
  // UNAVAILABLE (retryable) when nobody ends it.
  CHECK(client->Push("emb", keys, grads).code() == absl::StatusCode::kInvalidArgument);
  client->SetClock(1);
  CHECK(client->Push("emb", keys, grads).code() == absl::StatusCode::kUnavailable);
  CHECK(client->EndStep(1).status().code() == absl::StatusCode::kUnavailable);
  // A pull for step 1 waits for step 0, which nobody ends.
  CHECK(client->Pull("emb", keys, absl::MakeSpan(rows)).code() ==
        absl::StatusCode::kDeadlineExceeded);
  client->SetClock(0);
  REQUIRE(client->Push("emb", keys, grads).ok());
  REQUIRE(client->Pull("emb", keys, absl::MakeSpan(rows)).ok());
  CHECK(rows == std::vector<float>(rows.size(), 0.0f));  // step 0 is not applied yet
  REQUIRE(client->EndStep(0).ok());
  CHECK(client->EndStep(0).ok());  // ending an applied step again is a no-op
  client->SetClock(1);
  REQUIRE(client->Pull("emb", keys, absl::MakeSpan(rows)).ok());
  CHECK(rows == std::vector<float>(rows.size(), -kLearningRate));
  // A push for a step already applied (a straggler's) is dropped.
  client->SetClock(0);
  REQUIRE(client->Push("emb", keys, grads).ok());
  client->SetClock(1);
  REQUIRE(client->EndStep(1).ok());
  client->SetClock(2);
  REQUIRE(client->Pull("emb", keys, absl::MakeSpan(rows)).ok());
  CHECK(rows == std::vector<float>(rows.size(), -kLearningRate));
  // A straggler's pull for a step already applied is refused.
  client->SetClock(1);
  CHECK(client->Pull("emb", keys, absl::MakeSpan(rows)).code() == absl::StatusCode::kAborted);
  CHECK(LocalClient::Create(TestJob(), LocalClientOptions{1, 0, absl::ZeroDuration()})
            .status()
            .code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("LocalClient sync push ahead of the pending step waits for it", "[local_client]") {
  std::unique_ptr<LocalClient> client = NewClient(config::Training::SYNC);
  const std::vector<uint64_t> keys = {7};
  const std::vector<float> grads(kDim, 1.0f);
  client->SetClock(0);
  REQUIRE(client->Push("emb", keys, grads).ok());
  client->SetClock(1);
  // Step 1's push and end, from another thread, go in once step 0 is applied here: either before
  // or after they start, with the same outcome.
  absl::Status pushed = absl::UnknownError("not run");
  absl::StatusOr<int64_t> ended = absl::UnknownError("not run");
  std::thread ahead([&] {
    pushed = client->Push("emb", keys, grads);
    ended = client->EndStep(1);
  });
  const absl::StatusOr<int64_t> applied = client->EndStep(0);
  ahead.join();
  REQUIRE(applied.ok());
  CHECK(*applied >= 0);
  REQUIRE(pushed.ok());
  REQUIRE(ended.ok());
  CHECK(*ended == 1);
  client->SetClock(2);
  std::vector<float> row(kDim);
  REQUIRE(client->Pull("emb", keys, absl::MakeSpan(row)).ok());
  CHECK(row == std::vector<float>(kDim, -2 * kLearningRate));
}

TEST_CASE("LocalClient dense tensors: assign, gradients and errors", "[local_client]") {
  std::unique_ptr<LocalClient> client = NewClient();
  const size_t size = GENERATE(size_t{1}, size_t{16}, size_t{100});  // 1, 1 and 7 chunks
  std::vector<float> out(size);
  CHECK(client->PullDense("dense", absl::MakeSpan(out)).code() == absl::StatusCode::kNotFound);

  std::vector<float> values(size);
  for (size_t i = 0; i < size; ++i) values[i] = static_cast<float>(i) + 0.5f;
  REQUIRE(client->PushDense("dense", values, DenseUpdate::kAssign).ok());
  REQUIRE(client->PullDense("dense", absl::MakeSpan(out)).ok());
  CHECK(out == values);

  std::vector<float> grads(size, 2.0f);
  REQUIRE(client->PushDense("dense", grads, DenseUpdate::kGradient).ok());
  REQUIRE(client->PullDense("dense", absl::MakeSpan(out)).ok());
  for (size_t i = 0; i < size; ++i) CHECK(out[i] == Approx(values[i] - kLearningRate * 2.0f));

  // Sizes that disagree with the tensor's, bad values, no name: refused, nothing changed.
  std::vector<float> larger(size + 17, 1.0f);
  CHECK(client->PushDense("dense", larger, DenseUpdate::kAssign).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK_FALSE(client->PullDense("dense", absl::MakeSpan(larger)).ok());
  if (size > 1) {
    std::vector<float> smaller(size - 1);
    CHECK(client->PullDense("dense", absl::MakeSpan(smaller)).code() ==
          absl::StatusCode::kInvalidArgument);
  }
  std::vector<float> nan(size, std::numeric_limits<float>::quiet_NaN());
  CHECK(client->PushDense("dense", nan, DenseUpdate::kAssign).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(client->PushDense("", values, DenseUpdate::kAssign).code() ==
        absl::StatusCode::kInvalidArgument);
  REQUIRE(client->PullDense("dense", absl::MakeSpan(out)).ok());
  for (size_t i = 0; i < size; ++i) CHECK(out[i] == Approx(values[i] - kLearningRate * 2.0f));
}

TEST_CASE("LocalClient asynchronous calls complete inline", "[local_client]") {
  std::unique_ptr<LocalClient> client = NewClient();
  const std::vector<uint64_t> keys = {3, 4, 3};
  const std::vector<float> grads(keys.size() * kDim, 1.0f);
  int calls = 0;
  absl::Status status = absl::UnknownError("not called");
  client->PushAsync("emb", keys, grads, [&](absl::Status s) {
    ++calls;
    status = s;
  });
  CHECK(calls == 1);
  CHECK(status.ok());
  std::vector<float> rows(keys.size() * kDim);
  std::future<absl::Status> pulled = client->PullAsync("emb", keys, absl::MakeSpan(rows));
  REQUIRE(pulled.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  REQUIRE(pulled.get().ok());
  CHECK(rows[0] == Approx(-kLearningRate * 2));         // key 3, twice
  CHECK(rows[kDim] == Approx(-kLearningRate * 1));      // key 4
  CHECK(rows[2 * kDim] == Approx(-kLearningRate * 2));  // key 3 again
  CHECK(client->PullAsync("nope", keys, absl::MakeSpan(rows)).get().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("LocalClient holds a sync pull ahead of its step until the step before is applied",
          "[local_client]") {
  std::unique_ptr<LocalClient> client = NewClient(config::Training::SYNC);
  const std::vector<uint64_t> keys = {5, 6};
  const std::vector<float> grads(keys.size() * kDim, 1.0f);
  client->SetClock(0);
  REQUIRE(client->Push("emb", keys, grads).ok());
  // The pull of step 1, issued before step 0 ends, is answered when it is applied, with its rows.
  client->SetClock(1);
  std::vector<float> rows(keys.size() * kDim, 7.0f);
  std::future<absl::Status> pulled = client->PullAsync("emb", keys, absl::MakeSpan(rows));
  CHECK(pulled.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  REQUIRE(client->EndStep(0).ok());
  REQUIRE(pulled.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  REQUIRE(pulled.get().ok());
  CHECK(rows == std::vector<float>(rows.size(), -kLearningRate));
  // Once its step before is applied a pull is answered at once; a straggler's pull of an applied
  // step is refused at once.
  CHECK(client->PullAsync("emb", keys, absl::MakeSpan(rows)).get().ok());
  client->SetClock(0);
  CHECK(client->PullAsync("emb", keys, absl::MakeSpan(rows)).get().code() ==
        absl::StatusCode::kAborted);
}

TEST_CASE("LocalClient pushes from many threads are each applied once", "[local_client]") {
  std::unique_ptr<LocalClient> client = NewClient();
  constexpr int kThreads = 4;
  constexpr int kPushes = 200;
  std::vector<uint64_t> keys(64);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  const std::vector<float> grads(keys.size() * kDim, 1.0f);
  std::vector<std::thread> threads;
  std::vector<absl::Status> errors(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPushes && errors[t].ok(); ++i)
        errors[t] = client->Push("emb", keys, grads);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& e : errors) CHECK(e.ok());
  std::vector<float> rows(keys.size() * kDim);
  REQUIRE(client->Pull("emb", keys, absl::MakeSpan(rows)).ok());
  for (float v : rows) REQUIRE(v == Approx(-kLearningRate * kThreads * kPushes));
}

}  // namespace
}  // namespace testing
}  // namespace ps

#include "worker/dense_sync.h"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "tests/testing/local/local_client.h"
#include "worker/collective/allreduce.h"
#include "worker/wait_time.h"

namespace ps {
namespace worker {
namespace {

// Rank `rank` of a group of two whose other rank adds `other` to every element of every
// collective; it records the collectives' sizes.
class FakeGroup final : public AllReduce {
 public:
  FakeGroup(int rank, float other) : rank_(rank), other_(other) {}
  absl::Status SumInPlace(absl::Span<float> data) override {
    sizes.push_back(data.size());
    for (float& x : data) x += other_;
    return absl::OkStatus();
  }
  int rank() const override { return rank_; }
  int size() const override { return 2; }

  std::vector<size_t> sizes;

 private:
  const int rank_;
  const float other_;
};

config::Job JobWithATable() {
  config::Job job;
  config::Table* t = job.add_tables();
  t->set_name("emb");
  t->set_dim(1);
  job.mutable_training()->set_mode(config::Training::ASYNC);
  job.mutable_cluster()->set_num_workers(1);
  job.mutable_cluster()->set_num_shards(1);
  return job;
}

TEST_CASE("DenseSync sums every step's gradients, and joins a skipped step's collective with "
          "zeros",
          "[worker][dense_sync]") {
  FakeGroup group(1, 1.0f);
  auto client = testing::LocalClient::Create(JobWithATable(), {});
  REQUIRE(client.ok());
  std::vector<float> params = {1, 2, 3};
  std::vector<int64_t> after;  // the steps after_collective ran for
  DenseSync::Options options;
  options.end_step = 10;
  options.after_collective = [&](int64_t steps_done) -> absl::StatusOr<bool> {
    after.push_back(steps_done);
    return steps_done == 6;  // an evaluation that stops training there
  };
  WaitTime waited;
  DenseSync dense(&group, client->get(), absl::MakeSpan(params), options, &waited);

  std::vector<float> grad = {0.5f, 0.5f, 0.5f};
  absl::Duration allreduce_time;
  REQUIRE(dense.SumGradients(0, absl::MakeSpan(grad), &allreduce_time).ok());
  CHECK(grad == std::vector<float>{1.5f, 1.5f, 1.5f});
  CHECK(allreduce_time >= absl::ZeroDuration());
  REQUIRE(dense.StepDone(0, 1).ok());
  // This worker skipped steps 1 to 3 (a straggler outside a sync quorum): their collectives
  // with zeros, each followed by after_collective, then step 4's gradients.
  REQUIRE(dense.SumGradients(4, absl::MakeSpan(grad), &allreduce_time).ok());
  CHECK(group.sizes.size() == 5);
  CHECK(after == std::vector<int64_t>{1, 2, 3, 4});
  REQUIRE(dense.StepDone(4, 5).ok());
  CHECK(after == std::vector<int64_t>{1, 2, 3, 4, 5});
  CHECK(dense.end() == 10);
  // Step 5's, after which the evaluation ends training after step 6.
  REQUIRE(dense.SumGradients(5, absl::MakeSpan(grad), &allreduce_time).ok());
  REQUIRE(dense.StepDone(5, 6).ok());
  CHECK(dense.end() == 6);
  CHECK(*dense.CatchUp(10) == 6);
  REQUIRE(dense.Finish().ok());
  CHECK(group.sizes.size() == 6);
  CHECK(params == std::vector<float>{1, 2, 3});  // only gradients were summed
  CHECK(waited.waited() >= absl::ZeroDuration());
  // Rank 1 does not push the master copy; only worker 0 does.
  REQUIRE(dense.PushModel().ok());
  std::vector<float> pushed(3);
  CHECK((*client)->PullDense(kDenseModelName, absl::MakeSpan(pushed)).code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("DenseSync with local SGD averages the parameters every k steps and at the end",
          "[worker][dense_sync]") {
  FakeGroup group(0, 3.0f);  // the other worker's parameters: all 3
  auto client = testing::LocalClient::Create(JobWithATable(), {});
  REQUIRE(client.ok());
  std::vector<float> params = {1, 5};
  std::vector<int64_t> after;
  DenseSync::Options options;
  options.sync_every = 4;
  options.start_step = 2;  // resumed: the averaging after step 4 comes first
  options.end_step = 10;
  options.push_every = 3;
  options.after_collective = [&](int64_t steps_done) -> absl::StatusOr<bool> {
    after.push_back(steps_done);
    return false;
  };
  WaitTime waited;
  DenseSync dense(&group, client->get(), absl::MakeSpan(params), options, &waited);
  REQUIRE(dense.StepDone(2, 3).ok());  // step 3 is a multiple of push_every: worker 0 pushes
  std::vector<float> pushed(2);
  REQUIRE((*client)->PullDense(kDenseModelName, absl::MakeSpan(pushed)).ok());
  CHECK(pushed == std::vector<float>{1, 5});
  CHECK(group.sizes.empty());
  REQUIRE(dense.StepDone(3, 4).ok());
  CHECK(params == std::vector<float>{2, 4});  // (p + 3) / 2
  CHECK(after == std::vector<int64_t>{4});
  REQUIRE(dense.StepDone(4, 9).ok());  // skipped to 9: the averaging after step 8
  CHECK(params == std::vector<float>{2.5f, 3.5f});
  CHECK(after == std::vector<int64_t>{4, 8});
  REQUIRE(dense.Finish().ok());  // none due until 10; the final averaging
  CHECK(params == std::vector<float>{2.75f, 3.25f});
  CHECK(after == std::vector<int64_t>{4, 8});
  CHECK(group.sizes == std::vector<size_t>{2, 2, 2});
}

TEST_CASE("DenseSync exchanges the speeds of balanced batches first after 8 steps, then every 32",
          "[worker][dense_sync]") {
  FakeGroup group(0, 0.0f);
  auto client = testing::LocalClient::Create(JobWithATable(), {});
  REQUIRE(client.ok());
  std::vector<float> params = {0};
  BatchBalancer balancer(2, 4);
  DenseSync::Options options;
  options.end_step = 100;
  options.balancer = &balancer;
  WaitTime waited;
  DenseSync dense(&group, client->get(), absl::MakeSpan(params), options, &waited);
  std::vector<float> grad = {0};
  absl::Duration t;
  std::vector<int64_t> exchanged;  // steps after which the collective was the speeds' (4 floats)
  for (int64_t step = 0; step < 50; ++step) {
    const size_t before = group.sizes.size();
    REQUIRE(dense.SumGradients(step, absl::MakeSpan(grad), &t).ok());
    if (group.sizes.size() == before + 2) {
      CHECK(group.sizes.back() == balancer.ExchangeFloats());
      exchanged.push_back(step + 1);
    }
  }
  CHECK(exchanged == std::vector<int64_t>{8, 40});
}

}  // namespace
}  // namespace worker
}  // namespace ps

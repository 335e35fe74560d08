#include "worker/embedding_io.h"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "tests/testing/local/local_client.h"

namespace ps {
namespace worker {
namespace {

// Three sparse fields: fields 0 and 2 read table "a" (dim 2), field 1 reads table "b".
config::Job TwoTableJob(bool shared) {
  config::Job job;
  job.set_name("io");
  for (const char* name : {"a", "b", "a2"}) {
    config::Table* t = job.add_tables();
    t->set_name(name);
    t->set_dim(2);
    t->mutable_initializer()->set_kind(config::Initializer::ZEROS);
    t->mutable_optimizer()->set_type("sgd");
    t->mutable_optimizer()->set_learning_rate(1.0f);
  }
  job.mutable_model()->set_num_sparse_features(3);
  if (shared) job.mutable_model()->set_shared_table("a");
  job.mutable_training()->set_mode(config::Training::ASYNC);
  return job;
}

Batch TwoSamples() {
  Batch batch;
  batch.size = 2;
  batch.labels = {0, 1};
  batch.keys = {10, 20, 30, 11, 21, 31};  // sample-major: sample 0 has keys 10, 20, 30
  return batch;
}

TEST_CASE("GroupFields groups fields by their table", "[worker][embedding_io]") {
  const std::vector<FieldGroup> per_table = GroupFields(TwoTableJob(false), 3);
  REQUIRE(per_table.size() == 3);
  CHECK(per_table[0].table == "a");
  CHECK(per_table[1].fields == std::vector<int>{1});
  const std::vector<FieldGroup> shared = GroupFields(TwoTableJob(true), 3);
  REQUIRE(shared.size() == 1);
  CHECK(shared[0].fields == std::vector<int>{0, 1, 2});
}

TEST_CASE("a push of the model's gradients moves the rows a pull lays out", "[worker][embedding_io]") {
  const bool shared = GENERATE(false, true);
  CAPTURE(shared);
  const config::Job job = TwoTableJob(shared);
  auto client = ps::testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  const std::vector<FieldGroup> groups = GroupFields(job, 3);
  const int dim = 2;

  // Gradient of (sample r, field f, coordinate c) = r * 10 + f + c / 10: each lands on its key.
  StepData d;
  d.batch = TwoSamples();
  std::vector<float> grads(2 * 3 * dim);
  for (int r = 0; r < 2; ++r)
    for (int f = 0; f < 3; ++f)
      for (int c = 0; c < dim; ++c) grads[(r * 3 + f) * dim + c] = r * 10 + f + c / 10.0f;
  PushData push;
  StartPush(client->get(), groups, 3, dim, d.batch, grads, -1, &push);
  REQUIRE(FinishPush(&push).ok());

  StartPull(client->get(), groups, 3, dim, &d);
  REQUIRE(FinishPull(groups, 3, dim, &d).ok());
  REQUIRE(d.emb.size() == grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    INFO("float " << i);
    CHECK(d.emb[i] == -grads[i]);  // sgd with learning rate 1 from zeros
  }
  DrainPull(&d);  // nothing in flight: returns at once
  CHECK(d.pending.empty());
}

}  // namespace
}  // namespace worker
}  // namespace ps

#include "worker/embedding_io.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "tests/testing/local/local_client.h"

namespace ps {
namespace worker {
namespace {

config::Table* AddTable(config::Job* job, const char* name, int dim,
                        config::Initializer::Kind init) {
  config::Table* t = job->add_tables();
  t->set_name(name);
  t->set_dim(dim);
  t->mutable_initializer()->set_kind(init);
  t->mutable_initializer()->set_low(-1);
  t->mutable_initializer()->set_high(1);
  t->mutable_optimizer()->set_type("sgd");
  t->mutable_optimizer()->set_learning_rate(1.0f);
  return t;
}

// Three sparse fields: fields 0 and 2 read table "a" (dim 2), field 1 reads table "b".
config::Job TwoTableJob(bool shared) {
  config::Job job;
  job.set_name("io");
  for (const char* name : {"a", "b", "a2"}) AddTable(&job, name, 2, config::Initializer::ZEROS);
  job.mutable_model()->set_num_sparse_features(3);
  job.mutable_model()->set_num_dense_features(1);
  job.mutable_model()->add_bottom_mlp(2);
  if (shared) job.mutable_model()->set_shared_table("a");
  job.mutable_training()->set_mode(config::Training::ASYNC);
  return job;
}

Batch TwoSamples() {
  Batch batch;
  batch.size = 2;
  batch.labels = {0, 1};
  batch.keys = {10, 20, 30, 11, 21, 31};  // sample-major: sample 0 has keys 10, 20, 30
  SetSingleValuedOffsets(3, &batch);
  return batch;
}

EmbeddingLayout LayoutOf(const config::Job& job) {
  absl::StatusOr<ModelSpec> spec = ModelSpec::FromJob(job);
  REQUIRE(spec.ok());
  absl::StatusOr<EmbeddingLayout> layout = EmbeddingLayout::FromJob(job, *spec);
  REQUIRE(layout.ok());
  return *layout;
}

TEST_CASE("the layout groups slots by their table", "[worker][embedding_io]") {
  const EmbeddingLayout per_table = LayoutOf(TwoTableJob(false));
  REQUIRE(per_table.tables().size() == 3);
  CHECK(per_table.tables()[0].table == "a");
  CHECK(per_table.tables()[1].slots == std::vector<int>{1});
  CHECK(per_table.width() == 6);
  CHECK_FALSE(per_table.direct());
  const EmbeddingLayout shared = LayoutOf(TwoTableJob(true));
  REQUIRE(shared.tables().size() == 1);
  CHECK(shared.tables()[0].slots == std::vector<int>{0, 1, 2});
  CHECK(shared.direct());
}

TEST_CASE("a push of the model's gradients moves the rows a pull lays out", "[worker][embedding_io]") {
  const bool shared = GENERATE(false, true);
  CAPTURE(shared);
  const config::Job job = TwoTableJob(shared);
  auto client = ps::testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  const EmbeddingLayout layout = LayoutOf(job);
  const int dim = 2;

  // Gradient of (sample r, field f, coordinate c) = r * 10 + f + c / 10: each lands on its key.
  StepData d;
  d.batch = TwoSamples();
  StartPull(client->get(), layout, &d);
  REQUIRE(FinishPull(layout, &d).ok());
  std::vector<float> grads(2 * 3 * dim);
  for (int r = 0; r < 2; ++r)
    for (int f = 0; f < 3; ++f)
      for (int c = 0; c < dim; ++c) grads[(r * 3 + f) * dim + c] = r * 10 + f + c / 10.0f;
  PushData push;
  StartPush(client->get(), layout, d, grads, -1, &push);
  REQUIRE(FinishPush(&push).ok());

  StartPull(client->get(), layout, &d);
  REQUIRE(FinishPull(layout, &d).ok());
  REQUIRE(d.emb.size() == grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    INFO("float " << i);
    CHECK(d.emb[i] == -grads[i]);  // sgd with learning rate 1 from zeros
  }
  DrainPull(&d);  // nothing in flight: returns at once
  CHECK(d.pending.empty());
}

TEST_CASE("with a row cache a pull serves fresh rows from it and pulls only the misses",
          "[worker][embedding_io][row_cache]") {
  const bool shared = GENERATE(false, true);  // one table (direct without a cache), or three
  CAPTURE(shared);
  const config::Job job = TwoTableJob(shared);
  auto client = ps::testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  const EmbeddingLayout layout = LayoutOf(job);
  std::vector<int> dims;
  for (const TableSlots& t : layout.tables()) dims.push_back(t.dim);
  RowCache::Options options;
  options.max_rows = 16;
  options.refresh_steps = 1;
  options.dims = dims;
  auto cache = RowCache::Create(options);
  REQUIRE(cache.ok());
  const auto pull = [&](RowCache* c, int64_t step) {
    StepData d;
    d.batch = TwoSamples();
    StartPull(client->get(), layout, &d, c, step);
    REQUIRE(FinishPull(layout, &d).ok());
    return d.emb;
  };

  // Step 0 pulls everything: the same floats as without the cache.
  const std::vector<float> initial = pull(nullptr, 0);
  CHECK(pull(cache->get(), 0) == initial);
  CHECK((*cache)->stats().hits == 0);
  CHECK((*cache)->stats().lookups == 6);
  CHECK((*cache)->stats().rows == 6);

  // A push moves the rows on the server (sgd, learning rate 1).
  StepData d;
  d.batch = TwoSamples();
  StartPull(client->get(), layout, &d);
  REQUIRE(FinishPull(layout, &d).ok());
  const std::vector<float> grads(d.emb.size(), 1.0f);
  PushData push;
  StartPush(client->get(), layout, d, grads, 0, &push);
  REQUIRE(FinishPush(&push).ok());
  const std::vector<float> moved = pull(nullptr, 1);
  REQUIRE(moved != initial);

  // Step 1: every row is fresh (pulled for step 0), served from the cache as it was pulled.
  CHECK(pull(cache->get(), 1) == initial);
  CHECK((*cache)->stats().hits == 6);
  CHECK((*cache)->stats().cache_bytes == 6 * 2 * 4);
  // Step 2: refresh_steps passed; pulled again, with the push in them, then cached.
  CHECK(pull(cache->get(), 2) == moved);
  CHECK((*cache)->stats().hits == 6);
  CHECK((*cache)->stats().pulled_bytes == 2 * 6 * 2 * 4);
  CHECK(pull(cache->get(), 3) == moved);
  CHECK((*cache)->stats().hits == 12);
}

// A schema'd job of three fields: "user" (single-valued, table "u", dim 2), "tags"
// (multi-valued, table "t", dim 2) and "site" (single-valued, table "u"), pooled by `pooling`;
// for WIDE_DEEP, two wide features: "tags", and the cross of "user" and "site".
config::Job PooledJob(config::Model::Pooling pooling, config::Model::Type type) {
  config::Job job;
  job.set_name("pool");
  AddTable(&job, "u", 2, config::Initializer::UNIFORM);
  AddTable(&job, "t", 2, config::Initializer::UNIFORM);
  AddTable(&job, "lin", 1, config::Initializer::UNIFORM);
  job.mutable_training()->set_mode(config::Training::ASYNC);
  config::Model* m = job.mutable_model();
  m->set_type(type);
  m->set_pooling(pooling);
  if (type == config::Model::DLRM) m->add_bottom_mlp(2);
  if (type == config::Model::WIDE_DEEP) {
    m->set_linear_table("lin");
    m->add_wide()->add_fields("tags");
    config::Model::WideFeature* cross = m->add_wide();
    cross->add_fields("user");
    cross->add_fields("site");
  }
  config::Data* data = job.mutable_data();
  data->set_format(config::Data::DELIMITED);
  config::Schema* s = data->mutable_schema();
  s->set_label("1");
  s->add_dense()->set_column("5");
  config::SparseField* user = s->add_sparse();
  user->set_column("2");
  user->set_name("user");
  user->set_table("u");
  config::SparseField* tags = s->add_sparse();
  tags->set_column("3");
  tags->set_name("tags");
  tags->set_table("t");
  tags->set_separator("|");
  config::SparseField* site = s->add_sparse();
  site->set_column("4");
  site->set_name("site");
  site->set_table("u");
  return job;
}

// Sample 0: user 1, tags {5, 6, 5}, site 9; sample 1: user 2, no tags, site 9.
Batch PooledBatch() {
  Batch batch;
  batch.size = 2;
  batch.labels = {0, 1};
  batch.keys = {1, 5, 6, 5, 9, 2, 9};
  batch.offsets = {0, 1, 4, 5, 6, 6, 7};
  return batch;
}

std::vector<float> RowOf(Client* client, const char* table, uint64_t key, int dim) {
  std::vector<float> row(dim);
  REQUIRE(client->Pull(table, {key}, absl::MakeSpan(row)).ok());
  return row;
}

TEST_CASE("multi-valued fields pool by SUM and MEAN as computed by hand",
          "[worker][embedding_io]") {
  const bool mean = GENERATE(false, true);
  CAPTURE(mean);
  const config::Job job =
      PooledJob(mean ? config::Model::MEAN : config::Model::SUM, config::Model::DLRM);
  auto client = ps::testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  Client* c = client->get();
  const EmbeddingLayout layout = LayoutOf(job);
  REQUIRE(layout.width() == 6);
  const std::vector<float> u1 = RowOf(c, "u", 1, 2), u2 = RowOf(c, "u", 2, 2),
                           u9 = RowOf(c, "u", 9, 2), t5 = RowOf(c, "t", 5, 2),
                           t6 = RowOf(c, "t", 6, 2);
  StepData d;
  d.batch = PooledBatch();
  StartPull(c, layout, &d);
  REQUIRE(FinishPull(layout, &d).ok());
  const float k = mean ? 1.0f / 3 : 1.0f;
  const std::vector<float> expected = {u1[0],
                                       u1[1],
                                       (2 * t5[0] + t6[0]) * k,
                                       (2 * t5[1] + t6[1]) * k,
                                       u9[0],
                                       u9[1],
                                       u2[0],
                                       u2[1],
                                       0,
                                       0,
                                       u9[0],
                                       u9[1]};
  REQUIRE(d.emb.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("float " << i);
    CHECK(d.emb[i] == Approx(expected[i]).epsilon(1e-6));
  }

  // Each distinct key is pulled once: table "u" reads keys 1, 9 (sample 0) and 2, 9 (sample 1),
  // table "t" keys 5, 6, 5 (sample 0) and none (sample 1).
  REQUIRE(d.tables.size() == 2);
  CHECK(d.tables[0].unique == std::vector<uint64_t>{1, 9, 2});
  CHECK(d.tables[0].index == std::vector<uint32_t>{0, 1, 2, 1});
  CHECK(d.tables[1].unique == std::vector<uint64_t>{5, 6});
  CHECK(d.tables[1].index == std::vector<uint32_t>{0, 1, 0});
  CHECK(d.tables[1].ends == std::vector<uint32_t>{3, 3});
  CHECK(d.rows[0].size() == 3 * 2);

  // Gradient 1 on every pooled float: each row moves by the number of times it was pooled
  // (scaled by 1/3 for MEAN); key 9 is in two samples, key 5 twice in one.
  std::vector<float> grads(d.emb.size(), 1.0f);
  PushData push;
  StartPush(c, layout, d, grads, -1, &push);
  REQUIRE(FinishPush(&push).ok());
  CHECK(RowOf(c, "u", 9, 2)[0] == Approx(u9[0] - 2));
  CHECK(RowOf(c, "u", 1, 2)[1] == Approx(u1[1] - 1));
  CHECK(RowOf(c, "t", 5, 2)[0] == Approx(t5[0] - 2 * k));
  CHECK(RowOf(c, "t", 6, 2)[1] == Approx(t6[1] - k));
}

TEST_CASE("wide features pool their fields and hash crosses into the linear table",
          "[worker][embedding_io]") {
  const config::Job job = PooledJob(config::Model::SUM, config::Model::WIDE_DEEP);
  auto client = ps::testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  Client* c = client->get();
  const EmbeddingLayout layout = LayoutOf(job);
  REQUIRE(layout.width() == 8);  // three fields of dim 2, two wide features
  REQUIRE(layout.slots().size() == 5);
  CHECK(layout.slots()[3].fields == std::vector<int>{1});
  CHECK(layout.slots()[4].fields == std::vector<int>{0, 2});
  StepData d;
  d.batch = PooledBatch();
  StartPull(c, layout, &d);
  REQUIRE(FinishPull(layout, &d).ok());
  // The wide feature of "tags" sums the linear weights of its values; sample 1 has none.
  const float l5 = RowOf(c, "lin", 5, 1)[0], l6 = RowOf(c, "lin", 6, 1)[0];
  CHECK(d.emb[6] == Approx(2 * l5 + l6));
  CHECK(d.emb[8 + 6] == 0.0f);
  // The crosses (user 1, site 9) and (user 2, site 9) are keys of their own.
  CHECK(d.emb[7] != d.emb[8 + 7]);
  CHECK(d.emb[7] != RowOf(c, "lin", 1, 1)[0]);
}

TEST_CASE("for a device: the rows unpooled, as a PooledInput, and the rows' gradients pushed",
          "[worker][embedding_io]") {
  const bool mean = GENERATE(false, true);
  CAPTURE(mean);
  const config::Job job =
      PooledJob(mean ? config::Model::MEAN : config::Model::SUM, config::Model::WIDE_DEEP);
  auto client = ps::testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  Client* c = client->get();
  const EmbeddingLayout layout = LayoutOf(job);
  const std::vector<float> t5 = RowOf(c, "t", 5, 2), u9 = RowOf(c, "u", 9, 2);
  StepData d;
  d.batch = PooledBatch();
  StartPull(c, layout, &d);
  REQUIRE(AwaitPull(layout, &d).ok());
  CHECK(!d.pooled);
  CHECK(!d.direct);
  REQUIRE(d.rows.size() == 3);  // u, t, lin
  CHECK(std::vector<float>(d.rows[1].begin(), d.rows[1].begin() + 2) == t5);

  const PooledInput in = PooledInputOf(layout, d);
  CHECK(in.batch == 2);
  CHECK(in.dense == d.batch.dense.data());
  REQUIRE(in.tables.size() == 3);
  CHECK(CheckPooledInput(in, layout.width()).ok());
  // Table "u": user (offset 0) and site (offset 4); "t": tags (offset 2); "lin": the wide
  // features (offsets 6 and 7), the cross pooled by SUM whatever the job's pooling.
  CHECK(in.tables[0].slot_offset == std::vector<int32_t>{0, 4});
  CHECK(in.tables[1].slot_offset == std::vector<int32_t>{2});
  CHECK(in.tables[2].slot_offset == std::vector<int32_t>{6, 7});
  const uint8_t m = mean ? 1 : 0;
  CHECK(in.tables[0].slot_mean == std::vector<uint8_t>{m, m});
  CHECK(in.tables[2].slot_mean == std::vector<uint8_t>{m, 0});
  CHECK(in.tables[1].dim == 2);
  CHECK(in.tables[1].num_rows() == 2);
  CHECK(in.tables[1].index.data() == d.tables[1].index.data());
  CHECK(in.tables[1].ends.size() == 2);

  // The rows' gradients go out as they are: -1 on every float of key 5 of "t" and of key 9 of
  // "u", nothing on the others.
  std::vector<std::vector<float>> row_grads(3);
  for (size_t g = 0; g < 3; ++g) row_grads[g].assign(d.rows[g].size(), 0.0f);
  row_grads[0][2] = row_grads[0][3] = -1.0f;  // "u": keys 1, 9, 2
  row_grads[1][0] = row_grads[1][1] = -1.0f;  // "t": keys 5, 6
  PushData push;
  StartPushRows(c, layout, d, &row_grads, -1, &push);
  REQUIRE(FinishPush(&push).ok());
  CHECK(RowOf(c, "t", 5, 2) == std::vector<float>{t5[0] + 1, t5[1] + 1});
  CHECK(RowOf(c, "u", 9, 2) == std::vector<float>{u9[0] + 1, u9[1] + 1});
}

TEST_CASE("the deduper finds every distinct key once, batch after batch",
          "[worker][embedding_io]") {
  std::mt19937_64 rng(11);
  KeyDeduper dedup;
  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{5000}, size_t{300}}) {
    CAPTURE(n);
    // Keys from a small range, so that many repeat; and small integers, whose low bits alone
    // would collide in a table indexed by them.
    std::vector<uint64_t> keys(n);
    for (uint64_t& k : keys) k = (rng() % (n / 3 + 1)) << (rng() % 2 ? 0 : 32);
    dedup.Reset(n);
    std::vector<uint64_t> unique;
    std::vector<uint32_t> places;
    for (uint64_t k : keys) places.push_back(dedup.Find(k, &unique));
    std::map<uint64_t, uint32_t> first;
    for (size_t i = 0; i < n; ++i) first.emplace(keys[i], static_cast<uint32_t>(first.size()));
    REQUIRE(unique.size() == first.size());
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(unique[places[i]] == keys[i]);
      REQUIRE(places[i] == first[keys[i]]);
    }
  }
}

}  // namespace
}  // namespace worker
}  // namespace ps

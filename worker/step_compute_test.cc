// StepCompute on the CPU backend, and its two routes of a step: the host's pooling (the CPU) and
// the device's (the GPU). Built twice: as step_compute_test over the real backends (the GPU route
// is checked where there is a device, skipped here), and as step_compute_emulated_test over
// cuda_kernels' host stand-in (worker/model:model_emulated), where the GPU route runs on the
// host and its pooling and scatter must give the host's floats exactly.
#include "worker/step_compute.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tests/testing/local/local_client.h"
#include "worker/embedding_io.h"
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

// A job of three fields: "user" (single-valued, table "u", dim 2), "tags" (multi-valued, table
// "t", dim 2) and "site" (single-valued, table "u"), pooled by `pooling`; WIDE_DEEP adds two wide
// features: "tags", and the cross of "user" and "site" (table "lin", dim 1).
config::Job RowsJob(config::Model::Pooling pooling, config::Model::Type type) {
  config::Job job;
  for (auto [name, dim] : {std::pair<const char*, int>{"u", 2}, {"t", 2}, {"lin", 1}}) {
    config::Table* t = job.add_tables();
    t->set_name(name);
    t->set_dim(dim);
  }
  job.mutable_training()->set_batch_size(300);
  job.mutable_training()->mutable_dense_optimizer()->set_type("sgd");
  job.mutable_training()->set_seed(3);
  config::Model* m = job.mutable_model();
  m->set_type(type);
  m->set_pooling(pooling);
  m->add_top_mlp(4);
  if (type == config::Model::DLRM) m->add_bottom_mlp(2);
  if (type == config::Model::WIDE_DEEP) {
    m->set_linear_table("lin");
    m->add_wide()->add_fields("tags");
    config::Model::WideFeature* cross = m->add_wide();
    cross->add_fields("user");
    cross->add_fields("site");
  }
  config::Schema* s = job.mutable_data()->mutable_schema();
  s->set_label("1");
  s->add_dense()->set_column("5");
  s->add_dense()->set_column("6");
  const char* names[] = {"user", "tags", "site"};
  const char* tables[] = {"u", "t", "u"};
  for (int f = 0; f < 3; ++f) {
    config::SparseField* field = s->add_sparse();
    field->set_column(std::to_string(f + 2));
    field->set_name(names[f]);
    field->set_table(tables[f]);
    if (f == 1) field->set_separator("|");
  }
  return job;
}

// A seeded batch of `n` samples of RowsJob, pulled: few distinct keys (samples share them), 0 to
// 4 tags a sample (about a fifth without any, some repeated within a sample), random rows.
StepData RowsStep(const EmbeddingLayout& layout, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  StepData d;
  Batch& b = d.batch;
  b.size = n;
  b.offsets = {0};
  for (int r = 0; r < n; ++r) {
    b.labels.push_back(static_cast<float>(rng() % 2));
    for (int i = 0; i < 2; ++i) b.dense.push_back(std::fabs(normal(rng)));
    b.keys.push_back(rng() % 9);  // user
    b.offsets.push_back(b.keys.size());
    const int tags = rng() % 5 == 0 ? 0 : 1 + rng() % 4;
    for (int k = 0; k < tags; ++k) b.keys.push_back(100 + rng() % 7);
    b.offsets.push_back(b.keys.size());
    b.keys.push_back(rng() % 9);  // site: the same table as user, keys shared with it
    b.offsets.push_back(b.keys.size());
  }
  GatherKeys(layout, b, &d.dedup, &d.tables);
  d.rows.resize(layout.tables().size());
  for (size_t g = 0; g < layout.tables().size(); ++g) {
    for (size_t k = 0; k < d.tables[g].unique.size() * layout.tables()[g].dim; ++k) {
      d.rows[g].push_back(normal(rng));
    }
  }
  d.emb.resize(size_t(n) * layout.width());
  REQUIRE(AwaitPull(layout, &d).ok());  // nothing in flight: the rows stay unpooled
  CHECK(!d.pooled);
  return d;
}

void CheckClose(const std::string& what, const std::vector<float>& got,
                const std::vector<float>& want, bool exact) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  double scale = 0;
  for (float v : want) scale = std::max(scale, double(std::fabs(v)));
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(what << "[" << i << "]");
    if (exact) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::fabs(double(got[i]) - want[i]) <= 1e-4 * std::fabs(want[i]) + 1e-5 * scale);
    }
  }
}

std::vector<float> Floats(absl::Span<const float> s) { return {s.begin(), s.end()}; }

TEST_CASE("StepCompute routes a step to the host's pooling or to the device's",
          "[worker][step_compute]") {
  const bool mean = GENERATE(false, true);
  const config::Model::Type type = GENERATE(config::Model::DLRM, config::Model::WIDE_DEEP);
  const int n = GENERATE(1, 7, 300);
  INFO((mean ? "MEAN" : "SUM") << ", type " << type << ", batch " << n);
  const config::Job job = RowsJob(mean ? config::Model::MEAN : config::Model::SUM, type);
  absl::StatusOr<ModelSpec> spec = ModelSpec::FromJob(job);
  REQUIRE(spec.ok());
  absl::StatusOr<EmbeddingLayout> layout = EmbeddingLayout::FromJob(job, *spec);
  REQUIRE(layout.ok());

  // The CPU backend, as the trainer drove it before the GPU route: FinishPull's pooling, then
  // SpreadGrads of the pooled inputs' gradient.
  StepData host = RowsStep(*layout, n, 40 + n);
  PoolRows(*layout, n, host.tables, host.rows, host.emb.data());
  auto cpu = StepCompute::Create(job, Backend::kCpu, 1, false);
  REQUIRE(cpu.ok());
  const float cpu_loss = (*cpu)->ForwardBackward(host.batch, host.emb);
  std::vector<std::vector<float>> cpu_rows;
  SpreadGrads(*layout, n, host.tables, (*cpu)->emb_grad().data(), &cpu_rows);

  SECTION("the CPU pools unpooled rows on the host, bit for bit as FinishPull") {
    auto again = StepCompute::Create(job, Backend::kCpu, 1, false);
    REQUIRE(again.ok());
    StepData d = RowsStep(*layout, n, 40 + n);
    absl::StatusOr<float> loss = (*again)->ForwardBackward(*layout, &d);
    REQUIRE(loss.ok());
    CHECK(!(*again)->rows_on_device());
    CHECK(d.pooled);
    CHECK(d.emb == host.emb);
    CHECK(*loss == cpu_loss);
    CHECK((*again)->emb_grad() == (*cpu)->emb_grad());
    CHECK(Floats((*again)->dense_grad()) == Floats((*cpu)->dense_grad()));
  }

  SECTION("the GPU pools and scatters on the device") {
    auto gpu = StepCompute::Create(job, Backend::kGpu, 1, false);
    if (!gpu.ok()) {
      REQUIRE(gpu.status().code() == absl::StatusCode::kFailedPrecondition);
      WARN("no CUDA device: the GPU route is not checked here (step_compute_emulated_test is)");
      return;
    }
    StepData d = RowsStep(*layout, n, 40 + n);
    absl::StatusOr<float> loss = (*gpu)->ForwardBackward(*layout, &d);
    INFO(loss.status().ToString());
    REQUIRE(loss.ok());
    CHECK((*gpu)->rows_on_device());
    CHECK(!d.pooled);
    CHECK(*loss == Approx(cpu_loss).epsilon(1e-5));
    CheckClose("dense_grad", Floats((*gpu)->dense_grad()), Floats((*cpu)->dense_grad()), false);
    CheckClose("probs", (*gpu)->probs(), (*cpu)->probs(), false);
    REQUIRE((*gpu)->row_grads()->size() == cpu_rows.size());
    for (size_t g = 0; g < cpu_rows.size(); ++g) {
      CheckClose("row_grads " + std::to_string(g), (*gpu)->row_grads()->at(g), cpu_rows[g], false);
    }

    // The same GPU model on the host's pooling: the device's pooling and scatter are the host's
    // floats (on a real device up to the scatter's fused multiply-adds).
#ifdef PS_GPU_EMULATED
    const bool exact = true;
#else
    const bool exact = false;
#endif
    auto gpu_host = StepCompute::Create(job, Backend::kGpu, 1, false);
    REQUIRE(gpu_host.ok());
    (*gpu_host)->ForwardBackward(host.batch, host.emb);
    std::vector<std::vector<float>> want;
    SpreadGrads(*layout, n, host.tables, (*gpu_host)->emb_grad().data(), &want);
    for (size_t g = 0; g < want.size(); ++g) {
      CheckClose("row_grads vs the host's " + std::to_string(g), (*gpu)->row_grads()->at(g),
                 want[g], exact);
    }
    CheckClose("dense_grad vs the host's", Floats((*gpu)->dense_grad()),
               Floats((*gpu_host)->dense_grad()), exact);

    // An empty batch: nothing to push, zero gradients.
    StepData empty = RowsStep(*layout, 0, 1);
    absl::StatusOr<float> none = (*gpu)->ForwardBackward(*layout, &empty);
    REQUIRE(none.ok());
    CHECK(*none == 0.0f);
    for (float g : (*gpu)->dense_grad()) CHECK(g == 0.0f);
    for (const std::vector<float>& g : *(*gpu)->row_grads()) CHECK(g.empty());
  }
}

// Trains `steps` ASYNC steps of RowsJob with a row cache through an in-process store, pulling and
// pushing as the trainer's pipeline does: on the CPU route (host cache, host pooling) or on the
// GPU route (the cache's rows on the device). Returns each step's loss and, at the end, the
// tables' rows of keys 0..8 and 100..106; nullopt without a device for the GPU route.
struct CachedRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> rows;
  RowCacheStats stats;
};
std::optional<CachedRun> TrainWithCache(const config::Job& job, const EmbeddingLayout& layout,
                                        Backend backend, int steps) {
  auto compute = StepCompute::Create(job, backend, 1, false);
  if (!compute.ok()) {
    REQUIRE(compute.status().code() == absl::StatusCode::kFailedPrecondition);
    return std::nullopt;
  }
  const bool device = (*compute)->model()->pools_rows();
  auto cache = MakeRowCache(job, layout, nullptr, 0, device);
  REQUIRE(cache.ok());
  REQUIRE(*cache != nullptr);
  auto client = ps::testing::LocalClient::Create(job, {});
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  CachedRun run;
  for (int step = 0; step < steps; ++step) {
    StepData d = RowsStep(layout, 32, 900 + step);  // its rows are replaced by the pull's
    d.rows.clear();
    StartPull(client->get(), layout, &d, cache->get(), step);
    REQUIRE((device ? AwaitPull(layout, &d) : FinishPull(layout, &d)).ok());
    absl::StatusOr<float> loss = (*compute)->ForwardBackward(layout, &d);
    REQUIRE(loss.ok());
    run.losses.push_back(*loss);
    PushData push;
    if ((*compute)->rows_on_device()) {
      StartPushRows(client->get(), layout, d, (*compute)->row_grads(), step, &push);
    } else {
      StartPush(client->get(), layout, d, (*compute)->emb_grad(), step, &push);
    }
    REQUIRE(FinishPush(&push).ok());
    (*compute)->ApplyDense(32);
  }
  for (const char* table : {"u", "t"}) {
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 9; ++k) keys.push_back(k);
    for (uint64_t k = 100; k < 107; ++k) keys.push_back(k);
    std::vector<float> rows(keys.size() * 2);
    REQUIRE((*client)->Pull(table, keys, absl::MakeSpan(rows)).ok());
    run.rows.push_back(rows);
  }
  run.stats = (*cache)->stats();
  return run;
}

TEST_CASE("a row cache on the device trains as the host's cache does", "[worker][step_compute]") {
  config::Job job = RowsJob(config::Model::SUM, config::Model::DLRM);
  job.mutable_training()->set_mode(config::Training::ASYNC);
  job.mutable_data()->set_format(config::Data::DELIMITED);
  job.mutable_data()->add_train_paths("unused.tsv");  // the steps' batches are made here
  job.mutable_cluster()->set_num_shards(4);
  job.mutable_training()->mutable_row_cache()->set_max_rows(6);  // fewer than the keys: evictions
  job.mutable_training()->mutable_row_cache()->set_refresh_steps(2);
  for (config::Table& t : *job.mutable_tables()) {
    t.mutable_optimizer()->set_type("sgd");
    t.mutable_optimizer()->set_learning_rate(0.5f);
  }
  absl::StatusOr<ModelSpec> spec = ModelSpec::FromJob(job);
  REQUIRE(spec.ok());
  absl::StatusOr<EmbeddingLayout> layout = EmbeddingLayout::FromJob(job, *spec);
  REQUIRE(layout.ok());
  const std::optional<CachedRun> cpu = TrainWithCache(job, *layout, Backend::kCpu, 12);
  REQUIRE(cpu.has_value());
  CHECK(cpu->stats.hits > 0);
  CHECK(cpu->stats.hits < cpu->stats.lookups);
  const std::optional<CachedRun> gpu = TrainWithCache(job, *layout, Backend::kGpu, 12);
  if (!gpu.has_value()) {
    WARN("no CUDA device: the device cache is not checked here (step_compute_emulated_test is)");
    return;
  }
  CHECK(gpu->stats.hits == cpu->stats.hits);
  CHECK(gpu->stats.lookups == cpu->stats.lookups);
  // The same hits, and the same training up to the GPU's float rounding (the dense part's GEMMs
  // differ from OpenBLAS's, on the host stand-in too; gpu_model_test checks the device cache's
  // rows bit for bit).
  for (size_t k = 0; k < cpu->losses.size(); ++k) {
    CHECK(gpu->losses[k] == Approx(cpu->losses[k]).epsilon(1e-4));
  }
  for (size_t t = 0; t < cpu->rows.size(); ++t) {
    CheckClose("rows of table " + std::to_string(t), gpu->rows[t], cpu->rows[t], false);
  }
}

}  // namespace
}  // namespace worker
}  // namespace ps

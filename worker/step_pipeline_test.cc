#include "worker/step_pipeline.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/testing/local/local_client.h"
#include "tests/testing/temp_dir.h"
#include "worker/batch_reader.h"
#include "worker/step_breakdown.h"
#include "worker/step_sync.h"
#include "worker/wait_time.h"

namespace ps {
namespace worker {
namespace {

constexpr int kDim = 2;
const SchemaOptions kSchema{1, 2};

// Rows start at zero and SGD with learning rate 1 adds 1 per push of gradient -1: a row counts the
// pushes applied to it.
config::Job CountingJob(config::Training::Mode mode, const std::string& train) {
  config::Job job;
  job.set_name("step_pipeline");
  config::Table* t = job.add_tables();
  t->set_name("emb");
  t->set_dim(kDim);
  t->mutable_initializer()->set_kind(config::Initializer::ZEROS);
  t->mutable_optimizer()->set_type("sgd");
  t->mutable_optimizer()->set_learning_rate(1.0f);
  job.mutable_model()->set_shared_table("emb");
  job.mutable_model()->set_num_dense_features(1);
  job.mutable_model()->set_num_sparse_features(2);
  job.mutable_model()->add_bottom_mlp(kDim);
  job.mutable_data()->add_train_paths(train);
  job.mutable_training()->set_mode(mode);
  job.mutable_cluster()->set_num_workers(1);
  job.mutable_cluster()->set_num_shards(4);
  return job;
}

EmbeddingLayout LayoutOf(const config::Job& job) {
  absl::StatusOr<ModelSpec> spec = ModelSpec::FromJob(job);
  REQUIRE(spec.ok());
  absl::StatusOr<EmbeddingLayout> layout = EmbeddingLayout::FromJob(job, *spec);
  REQUIRE(layout.ok());
  return *layout;
}

// 4 lines, every one with the keys of categorical values "a" and "b": each step's batch of 2
// touches the same 2 keys twice.
std::string WriteData(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/train.tsv");
  std::ofstream out(path);
  for (int i = 0; i < 4; ++i) out << "1\t" << i << "\t0000000a\t0000000b\n";
  return path;
}

// A cluster that went on without this worker: the pulls of the steps in `applied` (the steps the
// quorum applied without it) are ABORTED, EndStep answers the newest of them, and every other pull
// gets zeros. It records the clock of every pull.
class StragglerClient final : public Client {
 public:
  StragglerClient(const config::Job& job, std::vector<int64_t> applied)
      : job_(job), applied_(std::move(applied)) {}

  const config::Job& job() const override { return job_; }
  uint32_t worker_id() const override { return 1; }
  int rank() const override { return 0; }
  int64_t start_step() const override { return 0; }
  absl::StatusOr<uint32_t> Dim(absl::string_view) const override { return kDim; }
  absl::Status Pull(absl::string_view, absl::Span<const uint64_t>, absl::Span<float>) override {
    return absl::UnimplementedError("Pull");
  }
  absl::Status Push(absl::string_view, absl::Span<const uint64_t>,
                    absl::Span<const float>) override {
    return absl::UnimplementedError("Push");
  }
  absl::Status PullDense(absl::string_view, absl::Span<float>) override {
    return absl::UnimplementedError("PullDense");
  }
  absl::Status PushDense(absl::string_view, absl::Span<const float>, DenseUpdate) override {
    return absl::UnimplementedError("PushDense");
  }
  void PullAsync(absl::string_view, absl::Span<const uint64_t>, absl::Span<float> values,
                 Callback done) override {
    pulled.push_back(clock_);
    if (std::find(applied_.begin(), applied_.end(), clock_) != applied_.end()) {
      done(absl::AbortedError("step applied without this worker"));
      return;
    }
    std::fill(values.begin(), values.end(), 0.0f);
    done(absl::OkStatus());
  }
  void PushAsync(absl::string_view, absl::Span<const uint64_t>, absl::Span<const float>,
                 Callback done) override {
    done(absl::OkStatus());
  }
  absl::StatusOr<int64_t> EndStep(int64_t step) override {
    ended.push_back(step);
    return applied_.empty() ? step : std::max(step, applied_.back());
  }
  void SetClock(int64_t step) override { clock_ = step; }
  rpc::ShardMap shard_map() const override { return rpc::ShardMap(); }

  std::vector<int64_t> pulled;  // the clock of each pull
  std::vector<int64_t> ended;   // the steps ended

 private:
  const config::Job job_;
  const std::vector<int64_t> applied_;
  int64_t clock_ = -1;
};

TEST_CASE(
    "StepPipeline pulls each step's rows and pushes its gradients, overlapping steps where "
    "the mode allows",
    "[worker][step_pipeline]") {
  const auto mode = GENERATE(config::Training::SYNC, config::Training::ASYNC);
  INFO(config::Training::Mode_Name(mode));
  auto dir = testing::ScopedTempDir::Create("step_pipeline");
  REQUIRE(dir.ok());
  const config::Job job = CountingJob(mode, WriteData((*dir)->path()));
  auto client = testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  auto reader = BatchReader::Open(job, kSchema, 0, 1, 2, nullptr);
  REQUIRE(reader.ok());
  StepSync sync(job, client->get(), nullptr, 1);
  WaitTime waited;
  // A clock that moves 1 ms at every reading: each batch read shows as 1 ms of read.
  absl::Time fake_now = absl::UnixEpoch();
  StepBreakdown breakdown([&] { return fake_now += absl::Milliseconds(1); });
  breakdown.Start();
  StepPipeline pipeline(client->get(), &sync, reader->get(), LayoutOf(job), &waited, &breakdown);
  CHECK(pipeline.pipelined() == (mode == config::Training::ASYNC));
  CHECK(pipeline.overlap() == (mode == config::Training::ASYNC
                                   ? StepPipeline::Overlap::kPrefetch
                                   : StepPipeline::Overlap::kPullAhead));

  const auto no_catch_up = [](int64_t) -> absl::StatusOr<int64_t> {
    FAIL("no step was applied without this worker");
    return 0;
  };
  constexpr int64_t kSteps = 3;
  REQUIRE(pipeline.Start(0).ok());
  int64_t step = 0;
  std::vector<float> first_rows;
  while (step < kSteps) {
    INFO("step " << step);
    absl::StatusOr<bool> pulled = pipeline.AwaitRows(&step, no_catch_up);
    REQUIRE(pulled.ok());
    REQUIRE(*pulled);
    REQUIRE(pipeline.batch().size == 2);
    REQUIRE(pipeline.current()->emb.size() == 2 * 2 * kDim);
    if (step == 0) first_rows = pipeline.current()->emb;
    if (mode == config::Training::SYNC) {
      // Each step's pull sees every push before it: 2 samples x 1 push of each key per step.
      for (float v : pipeline.current()->emb) CHECK(v == 2.0f * step);
    }
    REQUIRE(pipeline.Prefetch(step + 1, kSteps).ok());
    const std::vector<float> grads(pipeline.current()->emb.size(), -1.0f);
    const int64_t this_step = step;
    REQUIRE(pipeline.BeginPush(step, grads).ok());
    // SYNC: the next step's pull is held by the store until this step is applied (its EndStep
    // in EndPush), so it still sees this step's pushes (checked above, at the next step).
    REQUIRE(pipeline.PullAhead(step + 1, kSteps).ok());
    absl::StatusOr<int64_t> next = pipeline.EndPush(kSteps);
    REQUIRE(next.ok());
    step = *next;
    CHECK(step == this_step + 1);
    REQUIRE(pipeline.Advance(step, kSteps).ok());
  }
  REQUIRE(pipeline.Finish().ok());
  CHECK(first_rows == std::vector<float>(2 * 2 * kDim, 0.0f));
  // The batches read (one per step), each measured as read, inside the caller's lap.
  breakdown.Lap(StepPart::kOther);
  const StepTimes times = breakdown.Take();
  CHECK(times[StepPart::kRead] == absl::Milliseconds(kSteps));
  // Every push applied, once.
  Batch batch;
  auto again = BatchReader::Open(job, kSchema, 0, 1, 2, nullptr);
  REQUIRE(again.ok());
  REQUIRE((*again)->Next(&batch).ok());
  std::vector<float> rows(2 * kDim);
  (*client)->SetClock(kSteps);
  REQUIRE(
      (*client)->Pull("emb", absl::MakeConstSpan(batch.keys.data(), 2), absl::MakeSpan(rows)).ok());
  for (float v : rows) CHECK(v == 2.0f * kSteps);
}

TEST_CASE("StepPipeline catches a SYNC straggler up with the step the cluster is at",
          "[worker][step_pipeline]") {
  auto dir = testing::ScopedTempDir::Create("step_pipeline");
  REQUIRE(dir.ok());
  const config::Job job = CountingJob(config::Training::SYNC, WriteData((*dir)->path()));
  // The quorum applied steps 0 to 2 without this worker.
  StragglerClient client(job, {0, 1, 2});
  auto reader = BatchReader::Open(job, kSchema, 0, 1, 2, nullptr);
  REQUIRE(reader.ok());
  StepSync sync(job, &client, nullptr, 1);
  WaitTime waited;
  StepPipeline pipeline(&client, &sync, reader->get(), LayoutOf(job), &waited);
  REQUIRE_FALSE(pipeline.pipelined());
  const int64_t end = GENERATE(10, 3);
  INFO("training runs " << end << " steps");
  std::vector<int64_t> caught_up;
  REQUIRE(pipeline.Start(0).ok());
  int64_t step = 0;
  const absl::StatusOr<bool> pulled =
      pipeline.AwaitRows(&step, [&](int64_t next) -> absl::StatusOr<int64_t> {
        caught_up.push_back(next);
        return end;
      });
  REQUIRE(pulled.ok());
  // Step 0 ended (EndStep says 2 is applied): the dense collectives of steps 1 and 2 are joined
  // (catch_up(3)), and the same batch is pulled again for step 3, unless training ends there.
  CHECK(client.ended == std::vector<int64_t>{0});
  CHECK(caught_up == std::vector<int64_t>{3});
  CHECK(step == 3);
  CHECK(*pulled == (end > 3));
  if (*pulled) {
    CHECK(client.pulled == std::vector<int64_t>{0, 3});
    CHECK(pipeline.batch().size == 2);
    CHECK(pipeline.current()->emb == std::vector<float>(2 * 2 * kDim, 0.0f));
  } else {
    CHECK(client.pulled == std::vector<int64_t>{0});
  }
  REQUIRE(pipeline.Finish().ok());
}

TEST_CASE(
    "StepPipeline pulls the batch read ahead again when a SYNC straggler's step ends "
    "past the cluster's",
    "[worker][step_pipeline]") {
  auto dir = testing::ScopedTempDir::Create("step_pipeline");
  REQUIRE(dir.ok());
  const config::Job job = CountingJob(config::Training::SYNC, WriteData((*dir)->path()));
  // The quorum applied steps 1 and 2 without this worker, while it pushed step 0.
  StragglerClient client(job, {1, 2});
  auto reader = BatchReader::Open(job, kSchema, 0, 1, 2, nullptr);
  REQUIRE(reader.ok());
  StepSync sync(job, &client, nullptr, 1);
  WaitTime waited;
  StepPipeline pipeline(&client, &sync, reader->get(), LayoutOf(job), &waited);
  REQUIRE(pipeline.overlap() == StepPipeline::Overlap::kPullAhead);
  const auto no_catch_up = [](int64_t) -> absl::StatusOr<int64_t> {
    FAIL("the pull of the step continued with is not refused");
    return 0;
  };
  const int64_t end = GENERATE(10, 3);
  INFO("training runs " << end << " steps");
  REQUIRE(pipeline.Start(0).ok());
  int64_t step = 0;
  REQUIRE(*pipeline.AwaitRows(&step, no_catch_up));
  REQUIRE(pipeline.BeginPush(0, std::vector<float>(pipeline.current()->emb.size(), -1.0f)).ok());
  REQUIRE(pipeline.PullAhead(1, end).ok());  // refused: step 1 was applied without us
  absl::StatusOr<int64_t> next = pipeline.EndPush(end);
  REQUIRE(next.ok());
  CHECK(*next == 3);  // EndStep(0) said step 2 is applied
  CHECK(client.ended == std::vector<int64_t>{0});
  REQUIRE(pipeline.Advance(*next, end).ok());
  if (end > 3) {
    // The batch read ahead, pulled again for step 3.
    CHECK(client.pulled == std::vector<int64_t>{0, 1, 3});
    step = *next;
    REQUIRE(*pipeline.AwaitRows(&step, no_catch_up));
    CHECK(step == 3);
    CHECK(pipeline.batch().size == 2);
  } else {
    CHECK(client.pulled == std::vector<int64_t>{0, 1});
  }
  REQUIRE(pipeline.Finish().ok());
}

TEST_CASE("StepPipeline without pipelining reads and pulls each step after the step before",
          "[worker][step_pipeline]") {
  auto dir = testing::ScopedTempDir::Create("step_pipeline");
  REQUIRE(dir.ok());
  const config::Job job = CountingJob(config::Training::SYNC, WriteData((*dir)->path()));
  StragglerClient client(job, {});
  auto reader = BatchReader::Open(job, kSchema, 0, 1, 2, nullptr);
  REQUIRE(reader.ok());
  StepSync sync(job, &client, nullptr, 1);
  WaitTime waited;
  StepPipeline pipeline(&client, &sync, reader->get(), LayoutOf(job), &waited, nullptr,
                        /*pipeline=*/false);
  REQUIRE(pipeline.overlap() == StepPipeline::Overlap::kNone);
  const auto no_catch_up = [](int64_t) -> absl::StatusOr<int64_t> {
    FAIL("no step was applied without this worker");
    return 0;
  };
  REQUIRE(pipeline.Start(0).ok());
  int64_t step = 0;
  REQUIRE(*pipeline.AwaitRows(&step, no_catch_up));
  REQUIRE(pipeline.BeginPush(0, std::vector<float>(pipeline.current()->emb.size(), -1.0f)).ok());
  REQUIRE(pipeline.PullAhead(1, 2).ok());
  CHECK(client.pulled == std::vector<int64_t>{0});  // nothing pulled ahead
  REQUIRE(*pipeline.EndPush(2) == 1);
  REQUIRE(pipeline.Advance(1, 2).ok());
  CHECK(client.pulled == std::vector<int64_t>{0, 1});  // after the step ended
  CHECK(client.ended == std::vector<int64_t>{0});
  REQUIRE(pipeline.Finish().ok());
}

TEST_CASE("StepPipeline leaves the rows unpooled for a device and pushes the rows' gradients",
          "[worker][step_pipeline]") {
  const auto mode = GENERATE(config::Training::SYNC, config::Training::ASYNC);
  INFO(config::Training::Mode_Name(mode));
  auto dir = testing::ScopedTempDir::Create("step_pipeline_rows");
  REQUIRE(dir.ok());
  // Two tables, one a field: the pull is not direct (each table's distinct keys are pulled).
  config::Job job = CountingJob(mode, WriteData((*dir)->path()));
  *job.add_tables() = job.tables(0);
  job.mutable_tables(1)->set_name("emb2");
  job.mutable_model()->clear_shared_table();
  auto client = testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  auto reader = BatchReader::Open(job, kSchema, 0, 1, 2, nullptr);
  REQUIRE(reader.ok());
  StepSync sync(job, client->get(), nullptr, 1);
  WaitTime waited;
  StepPipeline pipeline(client->get(), &sync, reader->get(), LayoutOf(job), &waited);
  pipeline.set_pool_on_device(true);
  REQUIRE(pipeline.layout().tables().size() == 2);

  const auto no_catch_up = [](int64_t) -> absl::StatusOr<int64_t> { return 0; };
  constexpr int64_t kSteps = 3;
  REQUIRE(pipeline.Start(0).ok());
  int64_t step = 0;
  std::vector<uint64_t> keys;
  while (step < kSteps) {
    INFO("step " << step);
    absl::StatusOr<bool> pulled = pipeline.AwaitRows(&step, no_catch_up);
    REQUIRE(pulled.ok());
    REQUIRE(*pulled);
    StepData* d = pipeline.current();
    CHECK(!d->direct);
    CHECK(!d->pooled);
    keys = d->batch.keys;
    REQUIRE(d->rows.size() == 2);
    for (const std::vector<float>& rows : d->rows) {
      REQUIRE(rows.size() == kDim);  // one distinct key a table
      if (mode == config::Training::SYNC) {
        for (float v : rows) CHECK(v == 2.0f * step);
      }
    }
    REQUIRE(pipeline.Prefetch(step + 1, kSteps).ok());
    // What a device computes from a gradient of -1 on every pooled float: -2 for each table's one
    // key (two samples read it).
    std::vector<std::vector<float>> row_grads;
    SpreadGrads(pipeline.layout(), d->batch.size, d->tables,
                std::vector<float>(size_t(d->batch.size) * pipeline.layout().width(), -1.0f).data(),
                &row_grads);
    CHECK(row_grads[0] == std::vector<float>(kDim, -2.0f));
    REQUIRE(pipeline.BeginPushRows(step, &row_grads).ok());
    REQUIRE(pipeline.PullAhead(step + 1, kSteps).ok());
    absl::StatusOr<int64_t> next = pipeline.EndPush(kSteps);
    REQUIRE(next.ok());
    step = *next;
    REQUIRE(pipeline.Advance(step, kSteps).ok());
  }
  REQUIRE(pipeline.Finish().ok());
  // Every push applied, once: both tables' rows counted 2 a step.
  (*client)->SetClock(kSteps);
  for (int t = 0; t < 2; ++t) {
    std::vector<float> row(kDim);
    REQUIRE((*client)->Pull(t == 0 ? "emb" : "emb2", {keys[t]}, absl::MakeSpan(row)).ok());
    for (float v : row) CHECK(v == 2.0f * kSteps);
  }
}

}  // namespace
}  // namespace worker
}  // namespace ps

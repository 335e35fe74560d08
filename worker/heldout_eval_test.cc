#include "worker/heldout_eval.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/testing/local/local_client.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/classifier_metrics.h"
#include "worker/data/criteo_reader.h"
#include "worker/model/model_spec.h"
#include "worker/testing/tiny_model.h"

namespace ps {
namespace worker {
namespace {

// A tiny DLRM over one shared table, with rows initialised at random so predictions differ.
config::Job TinyJob(const std::string& eval_path) {
  config::Job job;
  job.set_name("eval");
  config::Table* t = AddTinyModel(&job);
  t->mutable_initializer()->set_kind(config::Initializer::UNIFORM);
  t->mutable_initializer()->set_low(-0.5f);
  t->mutable_initializer()->set_high(0.5f);
  job.mutable_data()->add_eval_paths(eval_path);
  job.mutable_training()->set_mode(config::Training::ASYNC);
  return job;
}

// `lines` Criteo-format lines with 2 integer and 3 categorical features, seeded.
void WriteData(const std::string& path, int lines) {
  std::ofstream out(path);
  uint64_t x = 12345;
  for (int i = 0; i < lines; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out << ((x >> 60) & 1) << "\t" << ((x >> 40) % 50) << "\t" << i % 9;
    for (int f = 0; f < 3; ++f) out << "\t" << absl::StrFormat("%08x", (x >> (8 * f)) % 97);
    out << "\n";
  }
}

TEST_CASE("the held-out figures are those of the model on every line", "[worker][heldout_eval]") {
  auto dir = ps::testing::ScopedTempDir::Create("heldout_eval");
  REQUIRE(dir.ok());
  const std::string path = absl::StrCat((*dir)->path(), "/heldout.tsv");
  WriteData(path, 5000);  // more than one batch of 4096
  const config::Job job = TinyJob(path);
  auto client = ps::testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  auto shape = ModelSpec::FromJob(job);
  REQUIRE(shape.ok());
  auto model = CreateModel(*shape, 7, Backend::kCpu);
  REQUIRE(model.ok());

  const absl::StatusOr<HeldoutMetrics> got = EvaluateHeldout(job, client->get(), model->get(), -1);
  REQUIRE(got.ok());
  CHECK(got->samples == 5000);

  // The same by hand, one sample at a time.
  auto reader = CriteoReader::Open({path}, 0, 1, {2, 3});
  REQUIRE(reader.ok());
  Batch batch;
  std::vector<float> probs, labels;
  while (true) {
    auto n = (*reader)->Next(1, &batch);
    REQUIRE(n.ok());
    if (*n == 0) break;
    std::vector<float> emb(3 * 4);
    REQUIRE((*client)->Pull("emb", batch.keys, absl::MakeSpan(emb)).ok());
    float p = 0;
    (*model)->Predict(1, batch.dense.data(), emb.data(), &p);
    probs.push_back(p);
    labels.push_back(batch.labels[0]);
  }
  CHECK(got->auc == Approx(Auc(probs, labels)).epsilon(1e-9));
  CHECK(got->logloss == Approx(LogLoss(probs, labels)).epsilon(1e-6));
  CHECK(got->auc != 0.5);  // the random rows tell the samples apart
}

TEST_CASE("without eval_paths nothing is evaluated", "[worker][heldout_eval]") {
  config::Job job = TinyJob("unused");
  job.mutable_data()->clear_eval_paths();
  auto client = ps::testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  auto model = CreateModel(*ModelSpec::FromJob(job), 7, Backend::kCpu);
  REQUIRE(model.ok());
  const auto got = EvaluateHeldout(job, client->get(), model->get(), -1);
  REQUIRE(got.ok());
  CHECK(got->samples == 0);
  CHECK(std::isnan(got->auc));
}

TEST_CASE("a missing held-out file is NOT_FOUND", "[worker][heldout_eval]") {
  const config::Job job = TinyJob("/nonexistent/heldout.tsv");
  auto client = ps::testing::LocalClient::Create(job, {});
  REQUIRE(client.ok());
  auto model = CreateModel(*ModelSpec::FromJob(job), 7, Backend::kCpu);
  REQUIRE(model.ok());
  CHECK(EvaluateHeldout(job, client->get(), model->get(), -1).status().code() ==
        absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace worker
}  // namespace ps

// Each model family trains end to end through real daemons on data of its own teacher: a
// delimited log with a header, single- and multi-valued fields (SUM and MEAN pooled), written by
// the family's teacher (worker/tools/teacher_data.h); a ps_coordinator, two ps_server and two
// ps_worker processes train it in SYNC mode. Every family must beat the constant predictor
// (AUC 0.5, and the log loss of the base rate) by the margins below, and cannot beat its teacher
// by more than float noise.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/temp_dir.h"
#include "worker/tools/teacher_data.h"

namespace ps {
namespace {

// The margins over the constant predictor: a learned model ranks clicks clearly better than
// chance and predicts them better than the base rate.
constexpr double kMinAuc = 0.62;
constexpr double kMinLoglossGain = 0.01;

std::string JobText(const std::string& type, const std::string& dir) {
  std::string model;
  if (type == "DLRM") model = "type: DLRM bottom_mlp: [16, 8] dot_interaction: true";
  if (type == "WIDE_DEEP") {
    model = R"(type: WIDE_DEEP linear_table: "lin" wide { fields: "user" } wide { fields: "ad" }
               wide { fields: ["user", "ad"] } wide { fields: "history" })";
  }
  if (type == "DEEPFM") model = R"(type: DEEPFM linear_table: "lin")";
  if (type == "DCN_V2") model = "type: DCN_V2 cross_layers: 2 cross_rank: 8";
  return absl::StrCat(R"job(name: "family_)job", type, R"job("
tables {
  name: "emb"
  dim: 8
  optimizer { type: "adagrad" learning_rate: 0.1 initial_accumulator: 0.01 }
}
tables {
  name: "lin"
  dim: 1
  optimizer { type: "adagrad" learning_rate: 0.1 initial_accumulator: 0.01 }
}
model { )job",
                      model, R"job( top_mlp: [32, 16] shared_table: "emb" }
data {
  format: DELIMITED
  train_paths: ")job",
                      dir, R"job(/train.tsv"
  eval_paths: ")job",
                      dir, R"job(/heldout.tsv"
  schema {
    header: true
    label: "click"
    dense { column: "price" transform: LOG1P }
    dense { column: "age" transform: LOG1P }
    sparse { column: "user" }
    sparse { column: "ad" }
    sparse { column: "site" }
    sparse { column: "device" }
    sparse { column: "history" separator: "|" max_values: 10 pooling: MEAN }
    sparse { column: "tags" separator: "|" max_values: 4 }
  }
}
training {
  mode: SYNC
  batch_size: 256
  epochs: 3
  dense_optimizer { type: "adam" learning_rate: 0.002 }
  seed: 3
}
cluster { num_shards: 8 num_servers: 2 num_workers: 2 }
)job");
}

TEST_CASE("every model family beats the constant predictor on its teacher's data",
          "[integration][model_families]") {
  const std::string type = GENERATE("DLRM", "WIDE_DEEP", "DEEPFM", "DCN_V2");
  CAPTURE(type);
  const std::string dir = absl::StrCat(testing::TempDir(), "/family_", type);
  REQUIRE(system(absl::StrCat("mkdir -p '", dir, "'").c_str()) == 0);
  const std::string job_path = absl::StrCat(dir, "/job.pbtxt");
  std::ofstream(job_path) << JobText(type, dir);
  absl::StatusOr<config::Job> job = LoadJobFile(job_path);
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  worker::TeacherDataOptions data_options;
  data_options.cardinality = 300;
  data_options.seed = 11;
  auto teacher = worker::TeacherData::Create(*job, data_options);
  REQUIRE(teacher.ok());
  REQUIRE((*teacher)->Write(worker::TeacherData::kTrainStream, 200000, dir + "/train.tsv").ok());
  absl::StatusOr<worker::TeacherFileStats> heldout =
      (*teacher)->Write(worker::TeacherData::kHeldoutStream, 20000, dir + "/heldout.tsv");
  REQUIRE(heldout.ok());

  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  auto workers = (*cluster)->RunWorkers({{"--progress_s=5"}, {"--progress_s=5"}}, absl::Minutes(8));
  INFO(workers.status().ToString());
  REQUIRE(workers.ok());
  const std::string result = testing::ResultJson((*workers)[0].stdout_text);
  const double base = static_cast<double>(heldout->positives) / heldout->rows;
  const double constant_logloss = -(base * std::log(base) + (1 - base) * std::log(1 - base));
  std::printf("%s: %s\nteacher AUC %.6f log loss %.6f; constant log loss %.6f\n", type.c_str(),
              result.c_str(), heldout->teacher_auc, heldout->teacher_logloss, constant_logloss);
  INFO(result << "\nteacher AUC " << heldout->teacher_auc);
  const double auc = testing::JsonField(result, "heldout_auc");
  CHECK(testing::JsonField(result, "heldout_samples") == 20000);
  CHECK(testing::JsonField(result, "skipped_lines") == 0);
  CHECK(auc > kMinAuc);
  CHECK(testing::JsonField(result, "heldout_logloss") < constant_logloss - kMinLoglossGain);
  CHECK(auc <= heldout->teacher_auc + 0.01);
  CHECK((*cluster)->Terminate(absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace ps

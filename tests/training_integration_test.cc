// The main job in miniature, for real: synthetic data from a known teacher, a ps_coordinator, two
// ps_server and two ps_worker processes on loopback, sync training; the held-out AUC must come
// within 0.02 of the teacher's.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cuda_kernels/device.h"
#include "tests/testing/eventually.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/synthetic.h"

namespace ps {
namespace {

TEST_CASE("a cluster trains to within 0.02 of the teacher's held-out AUC", "[integration][training]") {
  const std::string dir = testing::TempDir();
  worker::SyntheticOptions data_options;
  data_options.cardinalities = {200};
  data_options.seed = 5;
  auto data = worker::SyntheticData::Create(data_options);
  REQUIRE(data.ok());
  const std::string train = absl::StrCat(dir, "/train.tsv");
  const std::string heldout = absl::StrCat(dir, "/heldout.tsv");
  REQUIRE(worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream, 250000, train, false).ok());
  const auto teacher = worker::WriteSyntheticFile(**data, worker::SyntheticData::kHeldoutStream, 40000, heldout,
                                                  /*exact_auc=*/true);
  REQUIRE(teacher.ok());

  const std::string job_path = absl::StrCat(dir, "/training_job.pbtxt");
  {
    std::ofstream job(job_path);
    job << R"pb(name: "training_test"
tables {
  name: "emb"
  dim: 8
  initializer { kind: ZEROS }
  optimizer { type: "adagrad" learning_rate: 0.1 initial_accumulator: 0.01 }
}
model { bottom_mlp: [32, 8] top_mlp: [32] shared_table: "emb" }
data { train_paths: ")pb" << train << R"pb(" eval_paths: ")pb" << heldout << R"pb(" }
training {
  mode: SYNC
  batch_size: 256
  epochs: 2
  dense_optimizer { type: "adam" learning_rate: 0.002 }
  seed: 3
}
cluster { num_shards: 16 num_servers: 2 num_workers: 2 }
)pb";
  }
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  auto workers = (*cluster)->RunWorkers({{"--progress_s=2"}, {"--progress_s=2"}}, absl::Minutes(8));
  INFO(workers.status().ToString());
  REQUIRE(workers.ok());
  const std::string result_line = testing::ResultJson((*workers)[0].stdout_text);
  std::printf("worker 0: %s\nteacher AUC %.6f\n", result_line.c_str(), teacher->teacher_auc);
  INFO("worker 0: " << result_line << "\nteacher AUC " << teacher->teacher_auc);
  const double auc = testing::JsonField(result_line, "heldout_auc");
  CHECK(testing::JsonField(result_line, "heldout_samples") == 40000);
  CHECK(testing::JsonField(result_line, "skipped_lines") == 0);
  // The step breakdown adds up to the mean step (issue 38), on every worker.
  for (const testing::ProcessResult& worker : *workers) {
    const absl::Status breakdown =
        testing::CheckStepBreakdown(testing::ResultJson(worker.stdout_text));
    CHECK(breakdown.ToString() == "OK");
  }
  CHECK(auc > teacher->teacher_auc - 0.02);
  CHECK(auc <= teacher->teacher_auc + 0.01);  // a learner cannot beat the truth by much
  CHECK((*cluster)->Terminate(absl::Seconds(10)).ok());
}

TEST_CASE("a worker refuses a collective it cannot have", "[integration][training]") {
  const std::string dir = testing::TempDir();
  const std::string job_path = absl::StrCat(dir, "/collective_job.pbtxt");
  // The coordinator checks that the data can be read; no worker gets as far as reading it.
  std::ofstream(absl::StrCat(dir, "/unread.tsv")) << "1\n";
  std::ofstream(job_path) << R"pb(name: "collective_test"
tables { name: "emb" dim: 8 }
model { bottom_mlp: [8] top_mlp: [8] shared_table: "emb" }
data { train_paths: ")pb" << dir << R"pb(/unread.tsv" }
training { mode: SYNC batch_size: 16 }
cluster { num_shards: 4 num_servers: 1 num_workers: 1 }
)pb";
  testing::LocalClusterOptions options;
  options.servers = 1;
  auto cluster = testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());

  // RunWorkers reports a worker's exit code and stderr in its error.
  const absl::Status bad_flag =
      (*cluster)->RunWorkers({{"--collective=mpi"}}, absl::Minutes(1)).status();
  INFO(bad_flag.ToString());
  CHECK_THAT(std::string(bad_flag.message()), Catch::StartsWith("worker 0 exited with 2:"));
  CHECK_THAT(std::string(bad_flag.message()),
             Catch::Contains("--collective must be auto, gloo or nccl, got \"mpi\""));

  if (cuda::DeviceCount() == 0) {
    const absl::Status nccl =
        (*cluster)->RunWorkers({{"--collective=nccl"}}, absl::Minutes(1)).status();
    INFO(nccl.ToString());
    CHECK_THAT(std::string(nccl.message()), Catch::StartsWith("worker 0 exited with 1:"));
    CHECK_THAT(std::string(nccl.message()),
               Catch::Contains("NCCL AllReduce: FAILED_PRECONDITION: no CUDA device"));
    // A registered worker's failure fails the job: the cluster stops on its own, not cleanly.
    CHECK(testing::Eventually(
        [&] {
          return absl::StrContains((*cluster)->coordinator().ReadLog(),
                                   "ps_coordinator: the job failed: worker 0 (member ");
        },
        absl::Seconds(30), absl::Milliseconds(20)));
    CHECK_FALSE((*cluster)->Terminate(absl::Seconds(10)).ok());
  } else {
    std::printf("a CUDA device is present: not checking NCCL's refusal without one\n");
    CHECK((*cluster)->Terminate(absl::Seconds(10)).ok());
  }
}

}  // namespace
}  // namespace ps

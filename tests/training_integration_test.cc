// The main job in miniature, for real: synthetic data from a known teacher, a ps_coordinator, two
// ps_server and two ps_worker processes on loopback, sync training; the held-out AUC must come
// within 0.02 of the teacher's.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/testing/daemon.h"
#include "worker/data/synthetic.h"

namespace ps {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// The value of "key":number in a one-line JSON object, or NaN.
double JsonField(const std::string& json, const std::string& key) {
  const std::string needle = absl::StrCat("\"", key, "\":");
  const size_t at = json.find(needle);
  if (at == std::string::npos) return std::nan("");
  const size_t end = json.find_first_of(",}", at);
  double value = 0;
  if (!absl::SimpleAtod(json.substr(at + needle.size(), end - at - needle.size()), &value)) {
    return std::nan("");
  }
  return value;
}

TEST_CASE("a cluster trains to within 0.02 of the teacher's held-out AUC", "[integration][training]") {
  const std::string dir = TempDir();
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
  auto coordinator = testing::Daemon::Start("server/coordinator/ps_coordinator",
                                            {absl::StrCat("--job=", job_path)});
  REQUIRE(coordinator.ok());
  std::vector<std::unique_ptr<testing::Daemon>> servers;
  for (int i = 0; i < 2; ++i) {
    auto server = testing::Daemon::Start(
        "server/ps_server", {absl::StrCat("--coordinator=", (*coordinator)->address())});
    REQUIRE(server.ok());
    servers.push_back(std::move(*server));
  }
  std::vector<absl::StatusOr<testing::ProcessResult>> results(2, absl::UnknownError("not run"));
  std::vector<std::thread> workers;
  for (int rank = 0; rank < 2; ++rank) {
    workers.emplace_back([&, rank] {
      results[rank] = testing::RunProcess(
          "worker/ps_worker",
          {absl::StrCat("--coordinator=", (*coordinator)->address()),
           absl::StrCat("--rank=", rank), "--progress_s=2"},
          absl::Minutes(8));
    });
  }
  for (auto& w : workers) w.join();
  for (int rank = 0; rank < 2; ++rank) {
    REQUIRE(results[rank].ok());
    INFO("worker " << rank << " stderr:\n" << results[rank]->stderr_text);
    REQUIRE(results[rank]->exit_code == 0);
  }
  std::string result_line;
  for (absl::string_view line : absl::StrSplit(results[0]->stdout_text, '\n')) {
    if (absl::StartsWith(line, "RESULT ")) result_line = std::string(line.substr(7));
  }
  std::printf("worker 0: %s\nteacher AUC %.6f\n", result_line.c_str(), teacher->teacher_auc);
  INFO("worker 0: " << result_line << "\nteacher AUC " << teacher->teacher_auc);
  const double auc = JsonField(result_line, "heldout_auc");
  CHECK(JsonField(result_line, "heldout_samples") == 40000);
  CHECK(JsonField(result_line, "skipped_lines") == 0);
  CHECK(auc > teacher->teacher_auc - 0.02);
  CHECK(auc <= teacher->teacher_auc + 0.01);  // a learner cannot beat the truth by much
  for (auto& s : servers) CHECK(s->Terminate(absl::Seconds(10)).ok());
  CHECK((*coordinator)->Terminate(absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace ps

// Training through a SIGKILL: 3 servers with replication_factor 2 and 2 sync workers; one server
// is killed halfway (a replica or a primary, every server holds both). The job finishes, and its
// parameters are those of the same job run without the kill, within the equivalence test's bound.
#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "proto/ps.grpc.pb.h"
#include "tests/testing/eventually.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/synthetic.h"
#include "worker/model/dlrm.h"

namespace ps {
namespace {

constexpr int kBatch = 32;
constexpr int kSteps = 160;

struct Parameters {
  std::vector<float> dense;
  std::vector<float> rows;
};

// Trains on a fresh cluster; with `kill` >= 0, SIGKILLs that server once the slowest worker
// finished half the steps. Returns the dense master copy and the rows of `keys`.
Parameters Train(int kill, const std::string& data, const std::vector<uint64_t>& keys,
                 const std::string& name) {
  const std::string job_path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream(job_path) << absl::StrFormat(R"pb(name: "%s"
tables {
  name: "emb"
  dim: 4
  initializer { kind: UNIFORM low: -0.1 high: 0.1 }
  optimizer { type: "adagrad" learning_rate: 0.05 }
}
model { bottom_mlp: [8, 4] top_mlp: [8] shared_table: "emb" }
data { train_paths: "%s" }
training {
  mode: SYNC
  batch_size: %d
  steps: %d
  dense_optimizer { type: "adam" learning_rate: 0.01 }
  dense_push_every: 0
  seed: 3
}
cluster { num_shards: 12 num_servers: 3 num_workers: 2 replication_factor: 2 }
)pb",
                                             name, data, kBatch, kSteps);
  testing::LocalClusterOptions cluster_options;
  cluster_options.servers = 3;
  auto cluster = testing::LocalCluster::Start(job_path, cluster_options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  const std::string address = (*cluster)->coordinator().address();
  std::atomic<bool> killed{false};
  std::thread killer;
  if (kill >= 0) {
    killer = std::thread([&] {
      // Sync mode reports no clocks: the servers' applied step says how far training is.
      auto stub = rpc::ParameterServer::NewStub(grpc::CreateChannel(
          (*cluster)->servers()[0]->address(), grpc::InsecureChannelCredentials()));
      const bool halfway = testing::Eventually(
          [&] {
            grpc::ClientContext context;
            context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
            rpc::ServerStatus status;
            return stub->GetStatus(&context, rpc::ServerStatusRequest(), &status).ok() &&
                   status.applied_step() >= kSteps / 2;
          },
          absl::Minutes(2), absl::Milliseconds(1));
      if (!halfway) return;
      (*cluster)->servers()[kill]->Kill();
      killed.store(true);
    });
  }
  absl::StatusOr<std::vector<testing::ProcessResult>> results = (*cluster)->RunWorkers(
      std::vector<std::vector<std::string>>(2, {"--progress_s=60"}), absl::Minutes(5));
  if (killer.joinable()) killer.join();
  INFO(results.status().ToString());
  REQUIRE(results.ok());
  for (const testing::ProcessResult& r : *results) {
    INFO(r.stderr_text);
    CHECK(r.exit_code == 0);
  }
  if (kill >= 0) CHECK(killed.load());
  ClientOptions options;
  options.coordinator = address;
  auto client = Client::Connect(options);
  REQUIRE(client.ok());
  auto shape = worker::DlrmShape::FromJob((*client)->job());
  REQUIRE(shape.ok());
  auto model = worker::Dlrm::Create(*shape, 3);
  REQUIRE(model.ok());
  Parameters p;
  p.dense.resize((*model)->num_params());
  REQUIRE((*client)->PullDense("dense/model", absl::MakeSpan(p.dense)).ok());
  p.rows.resize(keys.size() * 4);
  const absl::Status pulled = (*client)->Pull("emb", keys, absl::MakeSpan(p.rows));
  INFO(pulled.ToString());
  REQUIRE(pulled.ok());
  return p;
}

double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max({std::fabs(double{a[i]}), std::fabs(double{b[i]}), 1e-3});
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / scale);
  }
  return worst;
}

TEST_CASE("sync training with a server killed halfway ends where it would have without",
          "[integration][failover][sync]") {
  const int victim = GENERATE(1, 2);
  CAPTURE(victim);
  worker::SyntheticOptions data_options;
  data_options.cardinalities = {200};
  data_options.seed = 21;
  auto data = worker::SyntheticData::Create(data_options);
  REQUIRE(data.ok());
  const std::string path = absl::StrCat(testing::TempDir(), "/failover_training.tsv");
  REQUIRE(worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream,
                                     2 * kBatch * kSteps, path, false)
              .ok());
  std::vector<uint64_t> keys;
  {
    auto reader = worker::CriteoReader::Open({path}, 0, 1);
    REQUIRE(reader.ok());
    worker::Batch batch;
    while (*(*reader)->Next(1024, &batch) > 0) {
      keys.insert(keys.end(), batch.keys.begin(), batch.keys.begin() + batch.size * 26);
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  }
  const Parameters reference = Train(-1, path, keys, "uninterrupted");
  const Parameters survived = Train(victim, path, keys, absl::StrCat("killed_", victim));
  const double dense = MaxRelativeDifference(reference.dense, survived.dense);
  const double rows = MaxRelativeDifference(reference.rows, survived.rows);
  std::printf("server %d killed: max relative difference dense %.3g, embeddings %.3g\n", victim,
              dense, rows);
  CHECK(dense <= 1e-4);
  CHECK(rows <= 1e-4);
}

}  // namespace
}  // namespace ps

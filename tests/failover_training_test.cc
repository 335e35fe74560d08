// Training through a SIGKILL: 3 servers with replication_factor 2 and 2 sync workers; one server
// is killed halfway (a replica or a primary, every server holds both). The job finishes, and its
// parameters are those of the same job run without the kill, within the equivalence test's bound.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
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
#include "tests/testing/model_parameters.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/synthetic.h"
#include "worker/model/dlrm.h"

namespace ps {
namespace {

constexpr int kBatch = 32;
constexpr int kSteps = 160;

// Trains on a fresh cluster; with `kill` >= 0, SIGKILLs that server once the slowest worker
// finished half the steps. Returns the dense master copy and the rows of `keys`.
testing::ModelParameters Train(int kill, const std::string& data, const std::vector<uint64_t>& keys,
                               const std::string& name) {
  const std::string job_path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream(job_path) << absl::StrFormat(
      R"pb(name: "%s"
           tables {
             name: "emb"
             dim: 4
             initializer { kind: UNIFORM low: -0.1 high: 0.1 }
             optimizer { type: "adagrad" learning_rate: 0.05 }
           }
           model {
             bottom_mlp: [ 8, 4 ]
             top_mlp: [ 8 ]
             shared_table: "emb"
           }
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
  absl::StatusOr<testing::ModelParameters> parameters =
      testing::PullModelParameters(address, "emb", keys);
  INFO(parameters.status().ToString());
  REQUIRE(parameters.ok());
  return *parameters;
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
  absl::StatusOr<std::vector<uint64_t>> keys_or = testing::KeysOfFile(path);
  REQUIRE(keys_or.ok());
  const std::vector<uint64_t> keys = *keys_or;
  const testing::ModelParameters reference = Train(-1, path, keys, "uninterrupted");
  const testing::ModelParameters survived =
      Train(victim, path, keys, absl::StrCat("killed_", victim));
  const double dense = testing::MaxRelativeDifference(reference.dense, survived.dense);
  const double rows = testing::MaxRelativeDifference(reference.rows, survived.rows);
  std::printf("server %d killed: max relative difference dense %.3g, embeddings %.3g\n", victim,
              dense, rows);
  CHECK(dense <= 1e-4);
  CHECK(rows <= 1e-4);
}

}  // namespace
}  // namespace ps

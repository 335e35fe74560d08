// Checkpoints taken from a running cluster of real processes: every server writes its primaries'
// shard files, the coordinator writes the manifest last, and the files hold exactly what the
// servers serve, optimizer state included.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ps_client.h"
#include "common/checkpoint_catalog.h"
#include "common/job_config.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/checkpoint/shard_file.h"
#include "server/storage/embedding_table.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

constexpr char kTable[] = "emb";
constexpr uint32_t kDim = 8;

std::string WriteJob(const std::string& name, const std::string& dir) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream job(path);
  job << absl::StrFormat(
      R"pb(name: "%s"
           tables {
             name: "%s"
             dim: %d
             initializer { kind: NORMAL }
             optimizer { type: "adagrad" learning_rate: 0.1 }
           }
           training { mode: ASYNC }
           cluster {
             num_shards: 8
             num_servers: 2
             num_workers: 1
             checkpoint_dir: "%s"
             checkpoint_keep: 2
           }
      )pb",
      name, kTable, kDim, dir);
  return path;
}

absl::StatusOr<rpc::CheckpointResponse> TakeCheckpoint(const std::string& coordinator) {
  auto stub = rpc::Coordinator::NewStub(
      grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  rpc::CheckpointRequest request;
  request.set_step(-1);
  rpc::CheckpointResponse response;
  const grpc::Status status = stub->StartCheckpoint(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return response;
}

TEST_CASE("a checkpoint of a running cluster holds every row exactly, and the newest are kept",
          "[checkpoint][integration]") {
  const std::string dir = absl::StrCat(testing::TempDir(), "/checkpoints");
  const std::string job_path = WriteJob("checkpoint_async", dir);
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  const std::string coordinator = (*cluster)->coordinator().address();
  ClientOptions options;
  options.coordinator = coordinator;
  auto client = Client::Connect(options);
  REQUIRE(client.ok());

  std::mt19937_64 rng(5);
  std::vector<uint64_t> keys(2000);
  for (uint64_t& k : keys) k = rng();
  std::vector<float> grads(keys.size() * kDim);
  for (int round = 0; round < 3; ++round) {
    for (float& g : grads) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    REQUIRE((*client)->Push(kTable, keys, grads).ok());
  }
  std::vector<float> served(keys.size() * kDim);
  REQUIRE((*client)->Pull(kTable, keys, absl::MakeSpan(served)).ok());

  absl::StatusOr<rpc::CheckpointResponse> taken = TakeCheckpoint(coordinator);
  INFO(taken.status().ToString());
  REQUIRE(taken.ok());
  CHECK(taken->id() == 1);
  CHECK(taken->step() == -1);
  CHECK(taken->bytes() > keys.size() * 2 * kDim * sizeof(float));

  // The manifest names a file for every shard; read back, they hold the served rows and the
  // optimizer's state, bit for bit.
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> list = ListCheckpoints(dir);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 1);
  const rpc::CheckpointManifest& manifest = list->front();
  CHECK(manifest.job_name() == "checkpoint_async");
  CHECK(manifest.mode() == "ASYNC");
  REQUIRE(manifest.shards_size() == 8);
  REQUIRE(manifest.tables_size() == 1);
  absl::StatusOr<config::Job> job = LoadJobFile(job_path);
  REQUIRE(job.ok());
  std::vector<std::unique_ptr<server::TableSpec>> tables;
  tables.push_back(
      std::move(server::TableSpec::Create(job->tables(0), job->training().seed())).value());
  std::map<uint64_t, std::vector<float>> rows;
  for (const rpc::CheckpointShardFile& file : manifest.shards()) {
    absl::StatusOr<server::ShardCut> cut =
        server::ReadShardFile(taken->path() + "/" + file.file(), tables, &file);
    INFO(cut.status().ToString());
    REQUIRE(cut.ok());
    CHECK(cut->shard == file.shard());
    for (const rpc::ShardRecord& r : cut->records) {
      if (!r.has_rows()) continue;
      const size_t n = r.rows().keys().size() / 8;
      for (size_t i = 0; i < n; ++i) {
        uint64_t id;
        std::memcpy(&id, r.rows().keys().data() + 8 * i, 8);
        std::vector<float> row(2 * kDim);
        std::memcpy(row.data(), r.rows().values().data() + i * row.size() * 4, row.size() * 4);
        rows[id] = row;
      }
    }
  }
  REQUIRE(rows.size() == keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float>& row = rows.at(keys[i]);
    for (uint32_t j = 0; j < kDim; ++j) {
      CHECK(std::memcmp(&row[j], &served[i * kDim + j], sizeof(float)) == 0);
      CHECK(row[kDim + j] > 0.0f);  // adagrad's accumulator, written with the row
    }
  }

  // checkpoint_keep: 2. A folder without a manifest (a checkpoint that crashed) is not listed,
  // and removed by the next checkpoint after it.
  std::filesystem::create_directory(dir + "/" + CheckpointFolderName(2));
  REQUIRE(TakeCheckpoint(coordinator).ok());
  REQUIRE(TakeCheckpoint(coordinator).ok());
  std::vector<std::string> partial;
  list = ListCheckpoints(dir, &partial);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 2);
  CHECK(list->at(0).id() == 3);
  CHECK(list->at(1).id() == 4);
  CHECK(partial.empty());
  CHECK_FALSE(std::filesystem::exists(dir + "/" + CheckpointFolderName(1)));
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
}

}  // namespace
}  // namespace ps

#include "tests/testing/checkpoints.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <random>

#include "common/checkpoint_catalog.h"
#include "common/coordinator_client.h"
#include "common/hash.h"
#include "common/job_config.h"
#include "server/checkpoint/shard_file.h"
#include "server/storage/embedding_table.h"

namespace ps {
namespace testing {

absl::StatusOr<rpc::CheckpointResponse> TakeCheckpoint(const std::string& coordinator,
                                                       int64_t step) {
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Connect(coordinator, absl::Seconds(10));
  if (!client.ok()) return client.status();
  return (*client)->Checkpoint(step, {}, absl::Minutes(1));
}

std::unique_ptr<Client> ConnectClient(const LocalCluster& cluster) {
  return ConnectClient(cluster.coordinator().address());
}

std::unique_ptr<Client> ConnectClient(const std::string& coordinator) {
  ClientOptions options;
  options.coordinator = coordinator;
  options.connect_timeout = absl::Seconds(30);
  auto client = Client::Connect(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  return std::move(client).value();
}

std::vector<uint64_t> RandomKeys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = rng();
  return keys;
}

CheckpointStore ReadCheckpointStore(const std::string& folder, const std::string& job_path) {
  absl::StatusOr<config::Job> job = LoadJobFile(job_path);
  REQUIRE(job.ok());
  std::vector<std::unique_ptr<server::TableSpec>> tables;
  for (const config::Table& t : job->tables()) {
    tables.push_back(std::move(server::TableSpec::Create(t, job->training().seed())).value());
  }
  absl::StatusOr<rpc::CheckpointManifest> read = ReadCheckpointManifest(folder);
  INFO(read.status().ToString());
  REQUIRE(read.ok());
  const rpc::CheckpointManifest& manifest = *read;
  CheckpointStore store;
  if (manifest.base_id() != 0) {
    store = ReadCheckpointStore(std::filesystem::path(folder).parent_path().string() + "/" +
                                    CheckpointFolderName(manifest.base_id()),
                                job_path);
  }
  store.dense.clear();
  store.windows.clear();
  for (const rpc::CheckpointShardFile& file : manifest.shards()) {
    absl::StatusOr<server::ShardCut> cut =
        server::ReadShardFile(folder + "/" + file.file(), tables, &file);
    INFO(cut.status().ToString());
    REQUIRE(cut.ok());
    store.sequences[cut->shard] = cut->sequence;
    if (!file.incremental()) {
      // A full file replaces the shard's rows (none of an older file may remain).
      for (auto it = store.rows.begin(); it != store.rows.end();) {
        const server::TableSpec& table =
            **std::find_if(tables.begin(), tables.end(),
                           [&](const auto& t) { return t->name == it->first.first; });
        const uint32_t shard = ShardOf(table.name_hash, it->first.second, manifest.shards_size());
        it = shard == cut->shard ? store.rows.erase(it) : std::next(it);
      }
    }
    for (const rpc::ShardRecord& r : cut->records) {
      if (r.has_rows()) {
        const server::TableSpec& table = *tables[r.rows().table()];
        const size_t row_bytes = table.row_floats() * sizeof(float);
        for (size_t i = 0; i < r.rows().keys().size() / 8; ++i) {
          uint64_t id;
          std::memcpy(&id, r.rows().keys().data() + 8 * i, 8);
          store.rows[{table.name, id}] = r.rows().values().substr(i * row_bytes, row_bytes);
        }
      } else if (r.has_dense()) {
        store.dense[{r.dense().name(), r.dense().chunk()}] = r.dense().SerializeAsString();
      } else if (r.has_window()) {
        store.windows[{cut->shard, r.window().worker_id()}] = r.window().SerializeAsString();
      }
    }
  }
  return store;
}

}  // namespace testing
}  // namespace ps

// Incremental checkpoints of real clusters (cluster.checkpoint_full_every): a full checkpoint and
// its increments restore exactly the state at any of them, the offline tools read the chain, and a
// chain whose base is gone is refused with nothing started.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ps_client.h"
#include "common/checkpoint_catalog.h"
#include "common/hash.h"
#include "common/job_config.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/checkpoint/shard_file.h"
#include "server/storage/embedding_table.h"
#include "tests/testing/checkpoints.h"
#include "tests/testing/daemon.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

constexpr uint32_t kDim = 8;
constexpr char kDense[] = "mlp";
constexpr size_t kDenseFloats = 1000;
constexpr char kPsCtl[] = "client/ps_ctl";

// A job of tables "emb" (adagrad) and "wide" (sgd, dim 1) on 2 servers and 8 shards, dense chunks
// of 100 floats, a full checkpoint every 4 into `dir`, keeping 10. Returns the job file's path.
std::string WriteJob(const std::string& name, const std::string& dir, const std::string& mode) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream(path) << absl::StrFormat(
      R"pb(name: "%s"
           tables {
             name: "emb"
             dim: %d
             initializer { kind: NORMAL }
             optimizer { type: "adagrad" learning_rate: 0.1 }
           }
           tables {
             name: "wide"
             dim: 1
             optimizer { type: "sgd" learning_rate: 0.5 }
           }
           training {
             mode: %s
             dense_optimizer { type: "adagrad" learning_rate: 0.05 }
           }
           cluster {
             num_shards: 8
             num_servers: 2
             num_workers: 1
             dense_chunk_floats: 100
             checkpoint_dir: "%s"
             checkpoint_keep: 10
             checkpoint_full_every: 4
           }
      )pb",
      name, kDim, mode, dir);
  return path;
}

rpc::CheckpointManifest ManifestOf(const std::string& folder) {
  absl::StatusOr<rpc::CheckpointManifest> manifest = ReadCheckpointManifest(folder);
  INFO(manifest.status().ToString());
  REQUIRE(manifest.ok());
  return *std::move(manifest);
}

// Pushes two rounds of random gradients for `keys` to both tables, and one to the dense tensor.
void Train(Client* client, const std::vector<uint64_t>& keys, uint64_t seed, bool assign_dense) {
  std::mt19937_64 rng(seed);
  std::vector<float> grads(keys.size() * kDim), wide(keys.size());
  std::vector<float> dense(kDenseFloats);
  for (int round = 0; round < 2; ++round) {
    for (float& g : grads) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    for (float& g : wide) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    REQUIRE(client->Push("emb", keys, grads).ok());
    REQUIRE(client->Push("wide", keys, wide).ok());
  }
  for (float& g : dense) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
  REQUIRE(
      client->PushDense(kDense, dense, assign_dense ? DenseUpdate::kAssign : DenseUpdate::kGradient)
          .ok());
}

struct Served {
  std::vector<float> emb, wide, dense;
  bool operator==(const Served& o) const {
    return emb.size() == o.emb.size() &&
           std::memcmp(emb.data(), o.emb.data(), emb.size() * 4) == 0 &&
           std::memcmp(wide.data(), o.wide.data(), wide.size() * 4) == 0 &&
           std::memcmp(dense.data(), o.dense.data(), dense.size() * 4) == 0;
  }
};

Served Pull(Client* client, const std::vector<uint64_t>& keys) {
  Served s{std::vector<float>(keys.size() * kDim), std::vector<float>(keys.size()),
           std::vector<float>(kDenseFloats)};
  REQUIRE(client->Pull("emb", keys, absl::MakeSpan(s.emb)).ok());
  REQUIRE(client->Pull("wide", keys, absl::MakeSpan(s.wide)).ok());
  REQUIRE(client->PullDense(kDense, absl::MakeSpan(s.dense)).ok());
  return s;
}

// A cluster's chain in `dir`: checkpoint 1 full after training 3000 keys; 2, 3 and 4 increments,
// each after training 200 of those keys and 100 new ones; then 5, taken with nothing changed,
// full (the fourth after 1). keys[i] and served[i] are the keys trained and what the cluster
// served when checkpoint i + 1 was taken.
struct Chain {
  std::string dir, job_path;
  std::vector<std::string> folders;  // of checkpoints 1 to 5
  std::vector<std::vector<uint64_t>> keys;
  std::vector<Served> served;
};

Chain BuildChain(const std::string& name) {
  Chain chain;
  chain.dir = absl::StrCat(testing::TempDir(), "/", name);
  std::filesystem::remove_all(chain.dir);
  chain.job_path = WriteJob(name, chain.dir, "ASYNC");
  auto cluster = testing::LocalCluster::Start(chain.job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
  std::vector<uint64_t> keys = testing::RandomKeys(3000, 7);
  for (int i = 0; i < 5; ++i) {
    if (i == 0) Train(client.get(), keys, 11, /*assign_dense=*/true);
    if (i > 0 && i < 4) {
      std::vector<uint64_t> changed(keys.begin() + 300 * i, keys.begin() + 300 * i + 200);
      const std::vector<uint64_t> added = testing::RandomKeys(100, 100 + i);
      changed.insert(changed.end(), added.begin(), added.end());
      keys.insert(keys.end(), added.begin(), added.end());
      Train(client.get(), changed, 20 + i, /*assign_dense=*/false);
    }
    chain.keys.push_back(keys);
    chain.served.push_back(Pull(client.get(), keys));
    absl::StatusOr<rpc::CheckpointResponse> taken =
        testing::TakeCheckpoint((*cluster)->coordinator().address());
    INFO(taken.status().ToString());
    REQUIRE(taken.ok());
    REQUIRE(taken->id() == static_cast<uint64_t>(i + 1));
    chain.folders.push_back(taken->path());
  }
  client.reset();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());

  // 1 and 5 are full; 2 to 4 hold, in every shard's file, only the rows of the keys trained since
  // the previous one (both tables), on it.
  uint64_t full_rows = 0;
  for (int i = 0; i < 5; ++i) {
    const rpc::CheckpointManifest m = ManifestOf(chain.folders[i]);
    const bool incremental = i > 0 && i < 4;
    CHECK(m.base_id() == (incremental ? static_cast<uint64_t>(i) : 0));
    uint64_t rows = 0, dense = 0;
    for (const rpc::CheckpointShardFile& f : m.shards()) {
      CHECK(f.incremental() == incremental);
      CHECK(f.base_id() == m.base_id());
      rows += f.rows();
      dense += f.dense_chunks();
    }
    CHECK(dense == kDenseFloats / 100);  // every chunk, in every checkpoint
    if (i == 0) full_rows = rows;
    CHECK(rows == (incremental ? 2u * 300 : 2u * chain.keys[i].size()));
    if (incremental) CHECK(rows < full_rows / 5);
  }
  return chain;
}

// Restores `folder` into a fresh cluster of the same job, checks that it serves `served` for
// `keys`, and returns the store of a checkpoint the restored cluster takes at once.
testing::CheckpointStore RestoreAndCheckpoint(const Chain& chain, const std::string& folder,
                                              const std::vector<uint64_t>& keys,
                                              const Served& served) {
  testing::LocalClusterOptions options;
  options.coordinator_args = {"--restore=" + folder};
  auto cluster = testing::LocalCluster::Start(chain.job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
  CHECK(Pull(client.get(), keys) == served);
  absl::StatusOr<rpc::CheckpointResponse> again =
      testing::TakeCheckpoint((*cluster)->coordinator().address());
  INFO(again.status().ToString());
  REQUIRE(again.ok());
  // A restored cluster's shards were cut for no checkpoint: its first checkpoint is full.
  const rpc::CheckpointManifest m = ManifestOf(again->path());
  CHECK(m.base_id() == 0);
  for (const rpc::CheckpointShardFile& f : m.shards()) CHECK_FALSE(f.incremental());
  client.reset();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
  return testing::ReadCheckpointStore(again->path(), chain.job_path);
}

TEST_CASE("a full checkpoint plus 3 increments restores exactly the state at the last one",
          "[checkpoint][incremental][integration]") {
  const Chain chain = BuildChain("incremental_last");
  // Checkpoint 5 is a full one of the same state as 4: the reference.
  const testing::CheckpointStore at_last =
      testing::ReadCheckpointStore(chain.folders[4], chain.job_path);
  CHECK(at_last.rows.size() == 2 * chain.keys[3].size());
  CHECK(at_last.dense.size() == kDenseFloats / 100);
  CHECK_FALSE(at_last.windows.empty());
  CHECK(testing::ReadCheckpointStore(chain.folders[3], chain.job_path) ==
        at_last);  // the chain, read here
  CHECK(chain.served[3] == chain.served[4]);

  // Restored from the increment: the same rows (with optimizer state), dense chunks, windows and
  // sequences, and the same rows pulled, bit for bit.
  const testing::CheckpointStore restored =
      RestoreAndCheckpoint(chain, chain.folders[3], chain.keys[3], chain.served[3]);
  CHECK(restored.rows == at_last.rows);
  CHECK(restored.dense == at_last.dense);
  CHECK(restored.windows == at_last.windows);
  CHECK(restored.sequences == at_last.sequences);

  // The offline tools read the chain: show counts the rows as restored, export gives them.
  absl::StatusOr<testing::ProcessResult> show =
      testing::RunProcess(kPsCtl, {"checkpoint", "show", chain.folders[3]});
  REQUIRE(show.ok());
  INFO(show->stdout_text << show->stderr_text);
  CHECK(show->exit_code == 0);
  CHECK_THAT(
      show->stdout_text,
      Catch::Contains("incremental on checkpoint 3; restored with its chain 4 <- 3 <- 2 <- 1"));
  CHECK_THAT(show->stdout_text, Catch::Contains(absl::StrFormat("%-20s %-6u %-10s %d", "emb", kDim,
                                                                "adagrad", chain.keys[3].size())));
  const std::string out = absl::StrCat(testing::TempDir(), "/incremental_emb.npy");
  absl::StatusOr<testing::ProcessResult> exported =
      testing::RunProcess(kPsCtl, {"export", "--checkpoint=" + chain.folders[3], "--table=emb",
                                   "--out=" + out, "--format=npy"});
  REQUIRE(exported.ok());
  INFO(exported->stdout_text << exported->stderr_text);
  REQUIRE(exported->exit_code == 0);
  std::ifstream in(out, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t item = 8 + 4 * kDim;
  REQUIRE(bytes.size() >= chain.keys[3].size() * item);
  std::map<uint64_t, std::string> exported_rows;
  for (size_t r = 0, at = bytes.size() - chain.keys[3].size() * item; r < chain.keys[3].size();
       ++r, at += item) {
    uint64_t id;
    std::memcpy(&id, bytes.data() + at, 8);
    exported_rows[id] = bytes.substr(at + 8, 4 * kDim);
  }
  REQUIRE(exported_rows.size() == chain.keys[3].size());
  for (size_t i = 0; i < chain.keys[3].size(); ++i) {
    CHECK(std::memcmp(exported_rows.at(chain.keys[3][i]).data(), &chain.served[3].emb[i * kDim],
                      4 * kDim) == 0);
  }
  std::filesystem::remove_all(chain.dir);
}

TEST_CASE("a checkpoint in the middle of a chain restores exactly the state at it",
          "[checkpoint][incremental][integration]") {
  const Chain chain = BuildChain("incremental_middle");
  const testing::CheckpointStore at_second =
      testing::ReadCheckpointStore(chain.folders[1], chain.job_path);
  CHECK(at_second.rows.size() == 2 * chain.keys[1].size());
  CHECK_FALSE(at_second == testing::ReadCheckpointStore(chain.folders[3], chain.job_path));
  const testing::CheckpointStore restored =
      RestoreAndCheckpoint(chain, chain.folders[1], chain.keys[1], chain.served[1]);
  CHECK(restored.rows == at_second.rows);
  CHECK(restored.dense == at_second.dense);
  CHECK(restored.windows == at_second.windows);
  CHECK(restored.sequences == at_second.sequences);
  std::filesystem::remove_all(chain.dir);
}

TEST_CASE("an increment whose base is missing is refused, naming it, and nothing starts",
          "[checkpoint][incremental][integration]") {
  const Chain chain = BuildChain("incremental_missing");
  std::filesystem::remove_all(chain.folders[1]);  // checkpoint 2, which 3 and 4 build on
  testing::LocalClusterOptions options;
  options.coordinator_args = {"--restore=" + chain.folders[3]};
  auto cluster = testing::LocalCluster::Start(chain.job_path, options);
  REQUIRE_FALSE(cluster.ok());
  CHECK_THAT(std::string(cluster.status().message()), Catch::Contains("exited with status 1"));
  CHECK_THAT(std::string(cluster.status().message()), Catch::Contains("DATA_LOSS"));
  CHECK_THAT(std::string(cluster.status().message()),
             Catch::Contains("checkpoint 3 builds on checkpoint 2 (" + chain.folders[1] +
                             "), which is missing"));

  // The tools refuse it too; the full checkpoints are untouched.
  const std::string out = absl::StrCat(testing::TempDir(), "/incremental_missing.tsv");
  absl::StatusOr<testing::ProcessResult> exported = testing::RunProcess(
      kPsCtl, {"export", "--checkpoint=" + chain.folders[3], "--table=emb", "--out=" + out});
  REQUIRE(exported.ok());
  CHECK(exported->exit_code == 1);
  CHECK_THAT(exported->stderr_text, Catch::Contains("builds on checkpoint 2"));
  CHECK_FALSE(std::filesystem::exists(out));
  absl::StatusOr<testing::ProcessResult> show =
      testing::RunProcess(kPsCtl, {"checkpoint", "show", chain.folders[3]});
  REQUIRE(show.ok());
  CHECK(show->exit_code == 1);
  CHECK_THAT(show->stdout_text, Catch::Contains("CHAIN BROKEN"));
  CHECK(RestoreAndCheckpoint(chain, chain.folders[4], chain.keys[4], chain.served[4]) ==
        testing::ReadCheckpointStore(chain.folders[4], chain.job_path));
  std::filesystem::remove_all(chain.dir);
}

// Sync steps from the client: step s pushes gradients drawn from s to a quarter of the keys.
void SyncSteps(Client* client, const std::vector<uint64_t>& keys, int64_t from, int64_t to) {
  const size_t quarter = keys.size() / 4;
  std::vector<float> grads(quarter * kDim);
  for (int64_t step = from; step < to; ++step) {
    std::mt19937_64 rng(100 + step);
    for (float& g : grads) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    const std::vector<uint64_t> some(keys.begin() + (step % 4) * quarter,
                                     keys.begin() + (step % 4 + 1) * quarter);
    client->SetClock(step);
    REQUIRE(client->Push("emb", some, grads).ok());
    absl::StatusOr<int64_t> applied = client->EndStep(step);
    INFO(applied.status().ToString());
    REQUIRE(applied.ok());
  }
  client->SetClock(-1);
}

TEST_CASE("a sync job restored from an increment carries on as if never stopped",
          "[checkpoint][incremental][integration][sync]") {
  const std::string dir = absl::StrCat(testing::TempDir(), "/incremental_sync");
  std::filesystem::remove_all(dir);
  const std::string job_path = WriteJob("incremental_sync", dir, "SYNC");
  const std::vector<uint64_t> keys = testing::RandomKeys(2000, 3);
  std::vector<float> uninterrupted(keys.size() * kDim);
  std::string folder;
  {
    auto cluster = testing::LocalCluster::Start(job_path, {});
    REQUIRE(cluster.ok());
    std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
    // Steps 0-3 touch every key: checkpoint 1 (full) at 4, then 2 and 3 (increments) at 5 and 6.
    SyncSteps(client.get(), keys, 0, 4);
    for (int64_t boundary : {4, 5, 6}) {
      if (boundary > 4) SyncSteps(client.get(), keys, boundary - 1, boundary);
      absl::StatusOr<rpc::CheckpointResponse> taken =
          testing::TakeCheckpoint((*cluster)->coordinator().address(), boundary);
      INFO(taken.status().ToString());
      REQUIRE(taken.ok());
      CHECK(taken->step() == boundary);
      folder = taken->path();
    }
    const rpc::CheckpointManifest m = ManifestOf(folder);
    CHECK(m.base_id() == 2);
    uint64_t rows = 0;
    for (const rpc::CheckpointShardFile& f : m.shards()) rows += f.rows();
    CHECK(rows == keys.size() / 4);  // step 5's quarter of the keys
    SyncSteps(client.get(), keys, 6, 10);
    REQUIRE(client->Pull("emb", keys, absl::MakeSpan(uninterrupted)).ok());
    client.reset();
    REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
  }
  testing::LocalClusterOptions options;
  options.coordinator_args = {"--restore=" + folder};
  auto cluster = testing::LocalCluster::Start(job_path, options);
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
  CHECK(client->start_step() == 6);
  SyncSteps(client.get(), keys, 6, 10);
  std::vector<float> resumed(keys.size() * kDim);
  REQUIRE(client->Pull("emb", keys, absl::MakeSpan(resumed)).ok());
  CHECK(std::memcmp(resumed.data(), uninterrupted.data(), resumed.size() * 4) == 0);
  client.reset();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ps

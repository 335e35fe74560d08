// Restoring checkpoints into fresh clusters of real processes: the same store bit for bit, onto
// other numbers of servers and shards, a sync job carried on as if never stopped, damaged or
// unfitting checkpoints refused, and checkpoints whose servers or coordinator were killed
// mid-way leaving the previous one to restore.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ps_client.h"
#include "common/checkpoint_catalog.h"
#include "common/job_config.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/checkpoint/shard_file.h"
#include "server/storage/embedding_table.h"
#include "tests/testing/checkpoints.h"
#include "tests/testing/daemon.h"
#include "tests/testing/eventually.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

constexpr uint32_t kDim = 8;
constexpr char kDense[] = "mlp";
constexpr size_t kDenseFloats = 1000;

struct JobShape {
  std::string mode = "ASYNC";
  int servers = 2;
  int shards = 8;
  uint32_t emb_dim = kDim;
};

// A job of tables "emb" (adagrad) and "wide" (sgd, dim 1), dense chunks of 100 floats,
// checkpoints in `dir`. Returns the job file's path.
std::string WriteJob(const std::string& name, const std::string& dir, const JobShape& shape) {
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
             num_shards: %d
             num_servers: %d
             num_workers: 1
             dense_chunk_floats: 100
             checkpoint_dir: "%s"
           }
      )pb",
      name, shape.emb_dim, shape.mode, shape.shards, shape.servers, dir);
  return path;
}

// Pushes three rounds of random gradients to both tables and the dense tensor.
void Train(Client* client, const std::vector<uint64_t>& keys, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> grads(keys.size() * kDim), wide(keys.size());
  std::vector<float> dense(kDenseFloats);
  for (int round = 0; round < 3; ++round) {
    for (float& g : grads) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    for (float& g : wide) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    for (float& g : dense) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    REQUIRE(client->Push("emb", keys, grads).ok());
    REQUIRE(client->Push("wide", keys, wide).ok());
    REQUIRE(
        client->PushDense(kDense, dense, round == 0 ? DenseUpdate::kAssign : DenseUpdate::kGradient)
            .ok());
  }
}

struct Served {
  std::vector<float> emb, wide, dense;
  bool operator==(const Served& o) const {
    return std::memcmp(emb.data(), o.emb.data(), emb.size() * 4) == 0 &&
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

// A trained cluster's checkpoint: its folder, its job and what the cluster served at the cut.
struct Trained {
  std::string dir, job_path, folder;
  std::vector<uint64_t> keys;
  Served served;
};

Trained TrainAndCheckpoint(const std::string& name, const JobShape& shape, size_t keys) {
  Trained t;
  t.dir = absl::StrCat(testing::TempDir(), "/", name);
  t.job_path = WriteJob(name, t.dir, shape);
  testing::LocalClusterOptions options;
  options.servers = shape.servers;
  auto cluster = testing::LocalCluster::Start(t.job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
  t.keys = testing::RandomKeys(keys, 7);
  Train(client.get(), t.keys, 11);
  t.served = Pull(client.get(), t.keys);
  absl::StatusOr<rpc::CheckpointResponse> taken =
      testing::TakeCheckpoint((*cluster)->coordinator().address());
  INFO(taken.status().ToString());
  REQUIRE(taken.ok());
  t.folder = taken->path();
  client.reset();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
  return t;
}

TEST_CASE("a checkpoint restored into a fresh cluster is the same store, bit for bit",
          "[checkpoint][restore][integration]") {
  const Trained a = TrainAndCheckpoint("restore_same", JobShape{}, 3000);

  testing::LocalClusterOptions options;
  options.coordinator_args = {"--restore=" + a.dir};  // the checkpoint_dir: its newest
  auto cluster = testing::LocalCluster::Start(a.job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
  CHECK(client->start_step() == 0);  // not sync
  CHECK(Pull(client.get(), a.keys) == a.served);

  // Checkpointed again at once, it holds what the first held: rows with their optimizer state,
  // dense chunks, exactly-once windows and every shard's applied sequence.
  absl::StatusOr<rpc::CheckpointResponse> again =
      testing::TakeCheckpoint((*cluster)->coordinator().address());
  REQUIRE(again.ok());
  CHECK(again->id() == 2);
  const testing::CheckpointStore before = testing::ReadCheckpointStore(a.folder, a.job_path);
  const testing::CheckpointStore after = testing::ReadCheckpointStore(again->path(), a.job_path);
  CHECK(before.rows.size() == 2 * a.keys.size());
  CHECK(before.dense.size() == kDenseFloats / 100);
  CHECK_FALSE(before.windows.empty());
  CHECK(after.rows == before.rows);
  CHECK(after.dense == before.dense);
  CHECK(after.windows == before.windows);
  CHECK(after.sequences == before.sequences);

  // The restored job's client has an id of its own, so its pushes meet no old window entry.
  std::vector<float> grads(a.keys.size() * kDim, 0.5f);
  REQUIRE(client->Push("emb", a.keys, grads).ok());
  CHECK(Pull(client.get(), a.keys).emb != a.served.emb);
  client.reset();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
}

TEST_CASE("a checkpoint restores onto other numbers of servers and shards",
          "[checkpoint][restore][integration]") {
  const Trained a = TrainAndCheckpoint("restore_reshard", JobShape{}, 3000);
  const testing::CheckpointStore before = testing::ReadCheckpointStore(a.folder, a.job_path);
  const JobShape shape =
      GENERATE(JobShape{"ASYNC", 3, 8}, JobShape{"ASYNC", 3, 12}, JobShape{"ASYNC", 1, 5});
  const std::string job_path = WriteJob(
      absl::StrCat("restore_reshard_", shape.servers, "_", shape.shards), a.dir + "_b", shape);
  testing::LocalClusterOptions options;
  options.servers = shape.servers;
  options.coordinator_args = {"--restore=" + a.folder};
  auto cluster = testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
  CHECK(Pull(client.get(), a.keys) == a.served);
  absl::StatusOr<rpc::CheckpointResponse> again =
      testing::TakeCheckpoint((*cluster)->coordinator().address());
  REQUIRE(again.ok());
  const testing::CheckpointStore after = testing::ReadCheckpointStore(again->path(), job_path);
  CHECK(after.sequences.size() == static_cast<size_t>(shape.shards));
  CHECK(after.rows == before.rows);  // every row with its optimizer state
  CHECK(after.dense == before.dense);
  client.reset();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
  std::filesystem::remove_all(a.dir + "_b");
}

// Sync steps from the client: each pushes gradients drawn from the step's number.
void SyncSteps(Client* client, const std::vector<uint64_t>& keys, int64_t from, int64_t to) {
  std::vector<float> grads(keys.size() * kDim);
  for (int64_t step = from; step < to; ++step) {
    std::mt19937_64 rng(100 + step);
    for (float& g : grads) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    client->SetClock(step);
    REQUIRE(client->Push("emb", keys, grads).ok());
    absl::StatusOr<int64_t> applied = client->EndStep(step);
    INFO(applied.status().ToString());
    REQUIRE(applied.ok());
  }
  client->SetClock(-1);
}

TEST_CASE("a sync job restored at its checkpoint's step carries on as if never stopped",
          "[checkpoint][restore][integration][sync]") {
  constexpr int64_t kSteps = 4;
  const std::string dir = absl::StrCat(testing::TempDir(), "/restore_sync");
  const std::string job_path = WriteJob("restore_sync", dir, JobShape{"SYNC", 2, 8});
  const std::vector<uint64_t> keys = testing::RandomKeys(1000, 3);
  std::vector<float> uninterrupted(keys.size() * kDim);
  std::string folder;
  {
    auto cluster = testing::LocalCluster::Start(job_path, {});
    REQUIRE(cluster.ok());
    std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
    SyncSteps(client.get(), keys, 0, kSteps);
    absl::StatusOr<rpc::CheckpointResponse> taken =
        testing::TakeCheckpoint((*cluster)->coordinator().address(), kSteps);
    INFO(taken.status().ToString());
    REQUIRE(taken.ok());
    CHECK(taken->step() == kSteps);
    folder = taken->path();
    SyncSteps(client.get(), keys, kSteps, 2 * kSteps);
    REQUIRE(client->Pull("emb", keys, absl::MakeSpan(uninterrupted)).ok());
    client.reset();
    REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
  }
  testing::LocalClusterOptions options;
  options.coordinator_args = {"--restore=" + folder};
  auto cluster = testing::LocalCluster::Start(job_path, options);
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
  CHECK(client->start_step() == kSteps);
  SyncSteps(client.get(), keys, kSteps, 2 * kSteps);
  std::vector<float> resumed(keys.size() * kDim);
  REQUIRE(client->Pull("emb", keys, absl::MakeSpan(resumed)).ok());
  CHECK(std::memcmp(resumed.data(), uninterrupted.data(), resumed.size() * 4) == 0);
  client.reset();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
}

TEST_CASE("a truncated or unfitting checkpoint is refused and nothing starts",
          "[checkpoint][restore][integration]") {
  const Trained a = TrainAndCheckpoint("restore_refused", JobShape{}, 500);
  absl::StatusOr<rpc::CheckpointManifest> manifest = ReadCheckpointManifest(a.folder);
  REQUIRE(manifest.ok());
  const std::string file = a.folder + "/" + manifest->shards(3).file();
  std::string job_path = a.job_path;
  std::string want;
  SECTION("a truncated file") {
    std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
    want = "bytes, the manifest says";
  }
  SECTION("another dim") {
    JobShape shape;
    shape.emb_dim = 16;
    job_path = WriteJob("restore_refused_dim16", a.dir, shape);
    want = "table \"emb\" has dim 8 in checkpoint";
  }
  testing::LocalClusterOptions options;
  options.coordinator_args = {"--restore=" + a.folder};
  auto cluster = testing::LocalCluster::Start(job_path, options);
  REQUIRE_FALSE(cluster.ok());
  CHECK_THAT(std::string(cluster.status().message()), Catch::Contains("exited with status 1"));
  CHECK_THAT(std::string(cluster.status().message()), Catch::Contains(want));
}

TEST_CASE("a checkpoint file with a flipped byte fails the restore, naming the checksum",
          "[checkpoint][restore][integration]") {
  // Its size is right, so the quick check passes and the coordinator starts; reading the files
  // for their checksums (while servers would load) finds it, and the coordinator exits with 1.
  // No server serves a shard before that read has passed (server_checkpoint_test).
  const Trained a = TrainAndCheckpoint("restore_flipped", JobShape{}, 500);
  absl::StatusOr<rpc::CheckpointManifest> manifest = ReadCheckpointManifest(a.folder);
  REQUIRE(manifest.ok());
  const std::string file = a.folder + "/" + manifest->shards(3).file();
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c;
    f.read(&c, 1);
    f.seekp(100);
    c ^= 0x01;
    f.write(&c, 1);
  }
  absl::StatusOr<std::unique_ptr<testing::Daemon>> coordinator = testing::Daemon::Launch(
      "server/coordinator/ps_coordinator",
      {"--job=" + a.job_path, "--restore=" + a.folder, "--listen=127.0.0.1:0"});
  REQUIRE(coordinator.ok());
  const absl::StatusOr<int> exited = (*coordinator)->Wait(absl::Seconds(30));
  REQUIRE(exited.ok());
  CHECK(*exited == 1);
  const std::string log = (*coordinator)->ReadLog();
  CHECK_THAT(log, Catch::Contains("cannot restore from " + a.folder));
  CHECK_THAT(log, Catch::Contains(file));
  CHECK_THAT(log, Catch::Contains("checksum"));
}

// Waits until server `server`'s first shard file of the checkpoint after `previous` exists.
std::string AwaitWriting(const std::string& dir, uint64_t previous) {
  const std::string folder = dir + "/" + CheckpointFolderName(previous + 1);
  REQUIRE(testing::Eventually([&] { return std::filesystem::exists(folder + "/shard-00000.sst"); },
                              absl::Seconds(30)));
  return folder;
}

TEST_CASE("a server or the coordinator killed mid-checkpoint leaves the previous one to restore",
          "[checkpoint][restore][integration][crash]") {
  const bool kill_coordinator = GENERATE(false, true);
  const std::string name = kill_coordinator ? "crash_coordinator" : "crash_server";
  const std::string dir = absl::StrCat(testing::TempDir(), "/", name);
  const std::string job_path = WriteJob(name, dir, JobShape{});
  const std::vector<uint64_t> keys = testing::RandomKeys(20000, 9);
  Served at_first;
  std::string partial;
  {
    auto cluster = testing::LocalCluster::Start(job_path, {});
    REQUIRE(cluster.ok());
    std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
    Train(client.get(), keys, 1);
    at_first = Pull(client.get(), keys);
    REQUIRE(testing::TakeCheckpoint((*cluster)->coordinator().address()).ok());
    Train(client.get(), keys, 2);
    CHECK_FALSE(Pull(client.get(), keys) == at_first);

    // Server 1 is stopped, so the second checkpoint cannot complete; once server 0 is writing its
    // shards, the victim is killed.
    const pid_t stopped = (*cluster)->servers()[1]->pid();
    REQUIRE((*cluster)->servers()[1]->Pause().ok());
    absl::StatusOr<rpc::CheckpointResponse> second;
    std::thread taker(
        [&] { second = testing::TakeCheckpoint((*cluster)->coordinator().address()); });
    partial = AwaitWriting(dir, 1);
    if (kill_coordinator) {
      REQUIRE(::kill((*cluster)->coordinator().pid(), SIGKILL) == 0);
    } else {
      (*cluster)->servers()[0]->Kill();
    }
    REQUIRE(::kill(stopped, SIGCONT) == 0);
    taker.join();
    CHECK_FALSE(second.ok());
    client.reset();
    (void)(*cluster)->Terminate(absl::Seconds(20));  // some of it is dead already
  }
  // The newest complete checkpoint is the first; its folder without a manifest is not one.
  std::vector<std::string> partials;
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> list = ListCheckpoints(dir, &partials);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 1);
  CHECK(list->front().id() == 1);
  if (kill_coordinator) CHECK(partials == std::vector<std::string>{partial});

  testing::LocalClusterOptions options;
  options.coordinator_args = {"--restore=" + dir};
  auto cluster = testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);
  CHECK(Pull(client.get(), keys) == at_first);
  client.reset();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
}

}  // namespace
}  // namespace ps

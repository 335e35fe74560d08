// The disk tier on real daemons (issue 35): ps_servers with a memory budget far below what the
// rows need and a --tier_dir each, driven through the client library. Every acknowledged push is
// there after rows went to the tier and came back, and after a kill -9 of a server whose rows
// are partly in its tier (replication 2, SYNC replication; SYNC and ASYNC training); a checkpoint
// taken with rows in the tiers restores onto a cluster of another size, bit for bit; a small disk
// cap holds; bad tier settings stop ps_server at start, naming the flag.
#include <google/protobuf/struct.pb.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ps_client.h"
#include "common/job_config.h"
#include "server/storage/embedding_table.h"
#include "tests/testing/checkpoints.h"
#include "tests/testing/daemon.h"
#include "tests/testing/eventually.h"
#include "tests/testing/server_status.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

constexpr uint32_t kDim = 128;
constexpr int64_t kBudgetMb = 160;
constexpr float kLearningRate = 0.5f;

// One table of 512-byte rows (sgd, so that the expected rows are computed here), checkpoints in
// `dir`.
std::string Job(int servers, int shards, const std::string& dir,
                const std::string& mode = "ASYNC") {
  return absl::StrFormat(
      R"pb(name: "tiered"
           tables {
             name: "emb"
             dim: %d
             initializer { kind: UNIFORM low: -0.1 high: 0.1 }
             optimizer { type: "sgd" learning_rate: %f }
           }
           training { seed: 23 mode: %s }
           cluster {
             num_shards: %d
             num_servers: %d
             num_workers: 1
             replication_factor: %d
             replication_mode: SYNC
             checkpoint_dir: "%s"
           }
      )pb",
      kDim, kLearningRate, mode, shards, servers, servers > 1 ? 2 : 1, dir);
}

struct Cluster {
  std::unique_ptr<testing::Daemon> coordinator;
  std::vector<std::unique_ptr<testing::Daemon>> servers;
  std::vector<std::string> tier_dirs;
  std::unique_ptr<Client> client;
};

// A coordinator on `job` (with `coordinator_args`) and `servers` ps_servers, each with the
// budget and a tier of its own capped at `tier_gb`.
Cluster StartCluster(const std::string& job, const std::string& name, int servers,
                     double tier_gb = 1, std::vector<std::string> coordinator_args = {}) {
  Cluster cluster;
  auto coordinator = testing::StartCoordinator(job, name, std::move(coordinator_args));
  INFO(coordinator.status().ToString());
  REQUIRE(coordinator.ok());
  cluster.coordinator = std::move(*coordinator);
  for (int i = 0; i < servers; ++i) {
    cluster.tier_dirs.push_back(absl::StrCat(testing::TempDir(), "/", name, "_tier", i));
    auto server = testing::Daemon::Start(
        "server/ps_server",
        {absl::StrCat("--coordinator=", cluster.coordinator->address()),
         absl::StrCat("--memory_budget_mb=", kBudgetMb), "--tier_dir=" + cluster.tier_dirs.back(),
         absl::StrCat("--tier_max_disk_gb=", tier_gb)});
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    cluster.servers.push_back(std::move(*server));
  }
  cluster.client = testing::ConnectClient(cluster.coordinator->address());
  return cluster;
}

// The table's initial rows for `keys`, as the job's initializer gives them.
std::vector<float> InitialRows(const std::string& job_text, const std::vector<uint64_t>& keys) {
  const absl::StatusOr<config::Job> job = ParseJob(job_text, "job");
  REQUIRE(job.ok());
  auto spec = server::TableSpec::Create(job->tables(0), job->training().seed());
  REQUIRE(spec.ok());
  std::vector<float> rows(keys.size() * kDim);
  for (size_t i = 0; i < keys.size(); ++i) {
    (*spec)->initializer->Fill(keys[i], kDim, rows.data() + i * kDim);
  }
  return rows;
}

// Gradient j of key i in round `round`: a few values, exact in float.
float Grad(size_t i, size_t j, int round) {
  return static_cast<float>(static_cast<int>((i * 7 + j * 3 + round) % 9) - 4) / 16.0f;
}

// Pushes round `round` in batches, applying it to `expected` as sgd does. With `step` (a sync
// job), each batch is a step of its own: *step, then the next.
void PushRound(Client& client, const std::vector<uint64_t>& keys, int round,
               std::vector<float>* expected, int64_t* step = nullptr) {
  constexpr size_t kBatch = 2000;
  std::vector<float> grads;
  for (size_t first = 0; first < keys.size(); first += kBatch) {
    const size_t n = std::min(kBatch, keys.size() - first);
    grads.resize(n * kDim);
    for (size_t i = 0; i < n; ++i) {
      for (uint32_t j = 0; j < kDim; ++j) {
        grads[i * kDim + j] = Grad(first + i, j, round);
        (*expected)[(first + i) * kDim + j] -= kLearningRate * grads[i * kDim + j];
      }
    }
    if (step != nullptr) client.SetClock(*step);
    const absl::Status pushed =
        client.Push("emb", absl::MakeConstSpan(keys).subspan(first, n), grads);
    INFO(pushed.ToString());
    REQUIRE(pushed.ok());
    if (step == nullptr) continue;
    absl::StatusOr<int64_t> applied = client.EndStep((*step)++);
    INFO(applied.status().ToString());
    REQUIRE(applied.ok());
  }
  client.SetClock(-1);
}

// Every key's row as the cluster serves it equals `expected`, bit for bit.
void CheckServed(Client& client, const std::vector<uint64_t>& keys,
                 const std::vector<float>& expected) {
  constexpr size_t kBatch = 4000;
  std::vector<float> rows;
  size_t wrong = 0;
  for (size_t first = 0; first < keys.size(); first += kBatch) {
    const size_t n = std::min(kBatch, keys.size() - first);
    rows.resize(n * kDim);
    const absl::Status pulled =
        client.Pull("emb", absl::MakeConstSpan(keys).subspan(first, n), absl::MakeSpan(rows));
    INFO(pulled.ToString());
    REQUIRE(pulled.ok());
    for (size_t i = 0; i < n; ++i) {
      wrong += std::memcmp(&rows[i * kDim], &expected[(first + i) * kDim], kDim * 4) != 0;
    }
  }
  CHECK(wrong == 0);
}

rpc::ServerStatus StatusOf(const testing::Daemon& server) {
  absl::StatusOr<rpc::ServerStatus> status = testing::ServerStatusOf(server);
  INFO(status.status().ToString());
  REQUIRE(status.ok());
  return *status;
}

// Bytes in `dir` as the file system holds them.
uint64_t DiskBytes(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec)) bytes += entry.file_size(ec);
  }
  return bytes;
}

TEST_CASE("rows in the tier come back bit for bit, also after a kill -9 of their primary",
          "[integration][tier]") {
  const std::string mode = GENERATE("SYNC", "ASYNC");
  const bool sync = mode == "SYNC";
  CAPTURE(mode);
  const std::string name = absl::StrCat("tier_kill_", mode);
  const std::string job = Job(2, 8, absl::StrCat(testing::TempDir(), "/", name), mode);
  Cluster cluster = StartCluster(job, name, 2);
  Client& client = *cluster.client;
  // 250k rows of 512 bytes on each server (every row has a copy on both): about 130 MB, where
  // the budget leaves the table about half of that.
  const std::vector<uint64_t> keys = testing::RandomKeys(250000, 5);
  std::vector<float> expected = InitialRows(job, keys);
  int64_t step = 0;
  int64_t* const steps = sync ? &step : nullptr;
  PushRound(client, keys, 1, &expected, steps);
  PushRound(client, keys, 2, &expected, steps);
  for (const auto& server : cluster.servers) {
    const rpc::ServerStatus status = StatusOf(*server);
    INFO("server " << status.server_id() << ": resident " << status.resident_bytes() << ", peak "
                   << status.peak_resident_bytes() << ", tier rows " << status.tables(0).tier_rows()
                   << ", rows " << status.tables(0).rows() << ", primary rows "
                   << status.tables(0).primary_rows() << ", cap per copy "
                   << status.tables(0).max_rows_per_copy() << ", refused at the cap "
                   << status.tables(0).full_refused() << ", demoted " << status.tables(0).demoted()
                   << ", allowance " << status.memory_allowance_bytes());
    REQUIRE(status.tables(0).tier_rows() > 0);
    CHECK(status.tables(0).demoted() > 0);
    CHECK(status.tables(0).evicted_budget() == 0);  // demoted, never dropped
    CHECK(status.peak_resident_bytes() <= status.memory_budget_bytes());
    CHECK(status.tier_disk_bytes() > 0);
    CHECK(status.tier_disk_bytes() <= status.tier_max_disk_bytes());
  }
  // Read back through promotions (and the demotions they cause), twice.
  CheckServed(client, keys, expected);
  CheckServed(client, keys, expected);
  uint64_t promoted = 0;
  for (const auto& server : cluster.servers) promoted += StatusOf(*server).tables(0).promoted();
  CHECK(promoted > 0);

  // A third round, then kill -9 a server: the other serves every shard from its copies, their
  // rows partly in its own tier.
  PushRound(client, keys, 3, &expected, steps);
  cluster.servers[0]->Kill();
  CheckServed(client, keys, expected);
  const rpc::ServerStatus survivor = StatusOf(*cluster.servers[1]);
  CHECK(survivor.tables(0).tier_rows() > 0);
  // Through the failover and the pulls that follow (every shard's primary now, promoting from
  // its tier), within the issue's bound on the peak, 1.05 of the budget (seen: 1.004 in one
  // clean-clone run, within the budget in the others).
  CHECK(survivor.peak_resident_bytes() <= survivor.memory_budget_bytes() * 105 / 100);
}

TEST_CASE("a checkpoint taken with rows in the tiers restores onto a cluster of another size",
          "[integration][tier]") {
  const std::string dir = testing::TempDir() + "/tier_restore_checkpoints";
  const std::string job = Job(2, 8, dir);
  const std::vector<uint64_t> keys = testing::RandomKeys(200000, 9);
  std::vector<float> expected = InitialRows(job, keys);
  std::string folder;
  {
    Cluster cluster = StartCluster(job, "tier_restore_a", 2);
    PushRound(*cluster.client, keys, 1, &expected);
    REQUIRE(StatusOf(*cluster.servers[0]).tables(0).tier_rows() > 0);
    absl::StatusOr<rpc::CheckpointResponse> taken =
        testing::TakeCheckpoint(cluster.coordinator->address());
    INFO(taken.status().ToString());
    REQUIRE(taken.ok());
    folder = taken->path();
    cluster.client.reset();
    for (auto& server : cluster.servers) CHECK(server->Terminate(absl::Seconds(30)).ok());
  }
  // One server: the rows that do not fit its budget go to its tier as they are restored.
  const std::string other = Job(1, 8, dir + "_b");
  Cluster cluster = StartCluster(other, "tier_restore_b", 1, 1, {"--restore=" + folder});
  // (The pulls wait for the restore.)
  CheckServed(*cluster.client, keys, expected);
  const rpc::ServerStatus restored = StatusOf(*cluster.servers[0]);
  CHECK(restored.tables(0).tier_rows() > 0);
  CHECK(restored.tables(0).tier_rows() + restored.tables(0).rows() == keys.size());
  INFO("resident " << restored.resident_bytes() << ", rows " << restored.tables(0).rows()
                   << ", cap per copy " << restored.tables(0).max_rows_per_copy());
  CHECK(restored.peak_resident_bytes() <= restored.memory_budget_bytes());
}

TEST_CASE("the tier's disk cap holds: past it rows leaving memory are dropped and counted",
          "[integration][tier]") {
  const std::string job = Job(1, 4, testing::TempDir() + "/tier_cap_checkpoints");
  // 40 MiB of disk for about 100 MB of rows beyond the budget.
  constexpr double kCapGb = 40.0 / 1024;
  Cluster cluster = StartCluster(job, "tier_cap", 1, kCapGb);
  const std::vector<uint64_t> keys = testing::RandomKeys(300000, 13);
  std::vector<float> expected = InitialRows(job, keys);
  PushRound(*cluster.client, keys, 1, &expected);
  const uint64_t cap = static_cast<uint64_t>(kCapGb * (1 << 30));
  const rpc::ServerStatus status = StatusOf(*cluster.servers[0]);
  INFO("tier rows " << status.tables(0).tier_rows() << ", disk " << status.tier_disk_bytes()
                    << ", refused " << status.tier_refused_rows());
  CHECK(status.tier_max_disk_bytes() == cap);
  CHECK(status.tables(0).tier_rows() > 0);
  CHECK(status.tier_refused_rows() > 0);
  CHECK(status.tables(0).evicted_budget() > 0);
  CHECK(status.tier_disk_bytes() <= cap);
  CHECK(DiskBytes(cluster.tier_dirs[0]) <= cap);
  CHECK(status.peak_resident_bytes() <= status.memory_budget_bytes());
  // ps_ctl tables --json shows the tier.
  absl::StatusOr<google::protobuf::Struct> parsed =
      testing::CtlTablesJson(cluster.coordinator->address());
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  const auto& table = parsed->fields().at("tables").list_value().values(0).struct_value().fields();
  CHECK(table.at("tier_rows").number_value() > 0);
  CHECK(table.at("demoted").number_value() >= table.at("tier_rows").number_value());
  CHECK(parsed->fields().at("tier_max_disk_bytes").number_value() == static_cast<double>(cap));
  CHECK(parsed->fields().at("tier_refused_rows").number_value() > 0);
  // The server still answers every pull.
  std::vector<float> rows(1000 * kDim);
  CHECK(
      cluster.client->Pull("emb", absl::MakeConstSpan(keys).subspan(0, 1000), absl::MakeSpan(rows))
          .ok());
}

TEST_CASE("bad tier settings stop ps_server at start, naming the flag", "[integration][tier]") {
  const std::string file = testing::TempDir() + "/tier_not_a_dir";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fclose(f);
  }
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{"--memory_budget_mb=200", "--tier_dir=" + file + "/tier", "--tier_max_disk_gb=1"},
       "--tier_dir"},
      {{"--tier_dir=" + testing::TempDir() + "/tier_ok", "--tier_max_disk_gb=1"},
       "--memory_budget_mb"},
      {{"--memory_budget_mb=200", "--tier_dir=" + testing::TempDir() + "/tier_ok"},
       "--tier_max_disk_gb"},
      {{"--memory_budget_mb=200", "--tier_max_disk_gb=1"}, "--tier_dir"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--coordinator=127.0.0.1:1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    absl::StatusOr<testing::ProcessResult> run = testing::RunProcess("server/ps_server", args);
    REQUIRE(run.ok());
    INFO(run->stderr_text);
    CHECK(run->exit_code == 2);
    CHECK_THAT(run->stderr_text, Catch::Contains(c.names));
  }
}

}  // namespace
}  // namespace ps

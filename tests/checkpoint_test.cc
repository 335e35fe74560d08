// Checkpoints taken from a running cluster of real processes: every server writes its primaries'
// shard files, the coordinator writes the manifest last, and the files hold exactly what the
// servers serve, optimizer state included. The offline tools (ps_ctl checkpoint show, ps_ctl
// export) read them back as they are.
#include <grpcpp/grpcpp.h>

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
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/ps_client.h"
#include "common/checkpoint_catalog.h"
#include "common/half.h"
#include "common/job_config.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/checkpoint/shard_file.h"
#include "server/storage/embedding_table.h"
#include "tests/testing/checkpoints.h"
#include "tests/testing/daemon.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/synthetic.h"

namespace ps {
namespace {

constexpr char kTable[] = "emb";
constexpr uint32_t kDim = 8;
constexpr char kPsCtl[] = "client/ps_ctl";

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

TEST_CASE("a checkpoint of a running cluster holds every row exactly, and the newest are kept",
          "[checkpoint][integration]") {
  const std::string dir = absl::StrCat(testing::TempDir(), "/checkpoints");
  const std::string job_path = WriteJob("checkpoint_async", dir);
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  const std::string coordinator = (*cluster)->coordinator().address();
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);

  std::mt19937_64 rng(5);
  std::vector<uint64_t> keys(2000);
  for (uint64_t& k : keys) k = rng();
  std::vector<float> grads(keys.size() * kDim);
  for (int round = 0; round < 3; ++round) {
    for (float& g : grads) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    REQUIRE(client->Push(kTable, keys, grads).ok());
  }
  std::vector<float> served(keys.size() * kDim);
  REQUIRE(client->Pull(kTable, keys, absl::MakeSpan(served)).ok());

  absl::StatusOr<rpc::CheckpointResponse> taken = testing::TakeCheckpoint(coordinator);
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
  REQUIRE(testing::TakeCheckpoint(coordinator).ok());
  REQUIRE(testing::TakeCheckpoint(coordinator).ok());
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

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The rows of ps_ctl export's TSV: id, then the floats.
std::map<uint64_t, std::vector<float>> ParseTsv(const std::string& text) {
  std::map<uint64_t, std::vector<float>> rows;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> fields = absl::StrSplit(line, '\t');
    std::vector<float> row;
    for (size_t i = 1; i < fields.size(); ++i)
      row.push_back(std::strtof(fields[i].c_str(), nullptr));
    rows[std::strtoull(fields[0].c_str(), nullptr, 10)] = row;
  }
  return rows;
}

// The rows of ps_ctl export's .npy: a structured array [('id', '<u8'), ('emb', '<f4', (dim,))].
std::map<uint64_t, std::vector<float>> ParseNpy(const std::string& bytes, uint32_t dim) {
  REQUIRE(bytes.size() > 10);
  REQUIRE(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const size_t data = 10 + (static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8);
  CHECK(data % 64 == 0);
  const std::string header = bytes.substr(10, data - 10);
  const std::string prefix = absl::StrCat("{'descr': [('id', '<u8'), ('emb', '<f4', (", dim,
                                          ",))], 'fortran_order': False, 'shape': (");
  REQUIRE(header.substr(0, prefix.size()) == prefix);
  const size_t n = std::strtoull(header.c_str() + prefix.size(), nullptr, 10);
  const size_t item = sizeof(uint64_t) + dim * sizeof(float);
  REQUIRE(bytes.size() == data + n * item);
  std::map<uint64_t, std::vector<float>> rows;
  uint64_t previous = 0;
  for (size_t r = 0; r < n; ++r) {
    const char* p = bytes.data() + data + r * item;
    uint64_t id;
    std::memcpy(&id, p, sizeof(id));
    CHECK((r == 0 || id > previous));  // sorted by id
    previous = id;
    std::vector<float> row(dim);
    std::memcpy(row.data(), p + sizeof(id), dim * sizeof(float));
    rows[id] = row;
  }
  return rows;
}

TEST_CASE(
    "ps_ctl shows a checkpoint and exports a table's served rows bit for bit, and refuses a "
    "damaged one",
    "[checkpoint][integration][export]") {
  const std::string dir = absl::StrCat(testing::TempDir(), "/export_checkpoints");
  const std::string job_path = WriteJob("checkpoint_export", dir);
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  const std::string coordinator = (*cluster)->coordinator().address();
  std::unique_ptr<Client> client = testing::ConnectClient(**cluster);

  std::mt19937_64 rng(11);
  std::vector<uint64_t> keys(1500);
  for (uint64_t& k : keys) k = rng() >> (rng() % 64);  // ids of every size
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<float> grads(keys.size() * kDim);
  for (int round = 0; round < 2; ++round) {
    for (float& g : grads) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
    REQUIRE(client->Push(kTable, keys, grads).ok());
  }
  std::vector<float> served(keys.size() * kDim);
  REQUIRE(client->Pull(kTable, keys, absl::MakeSpan(served)).ok());
  absl::StatusOr<rpc::CheckpointResponse> taken = testing::TakeCheckpoint(coordinator);
  INFO(taken.status().ToString());
  REQUIRE(taken.ok());
  const std::string folder = taken->path();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());  // the tools need no server

  absl::StatusOr<testing::ProcessResult> show =
      testing::RunProcess(kPsCtl, {"checkpoint", "show", folder});
  REQUIRE(show.ok());
  INFO(show->stdout_text << show->stderr_text);
  CHECK(show->exit_code == 0);
  CHECK_THAT(show->stdout_text, Catch::Contains("checkpoint 1 of job \"checkpoint_export\""));
  CHECK_THAT(show->stdout_text, Catch::Contains("mode ASYNC, step -1"));
  CHECK_THAT(show->stdout_text, Catch::Contains(absl::StrFormat("%-20s %-6u %-10s %d", kTable, kDim,
                                                                "adagrad", keys.size())));
  for (int shard = 0; shard < 8; ++shard) {
    CHECK_THAT(show->stdout_text, Catch::Contains(absl::StrFormat("shard-%05d.sst", shard)));
  }
  CHECK_THAT(show->stdout_text, !Catch::Contains("DAMAGED"));

  // Both formats hold exactly the embeddings the servers served, without the optimizer's state.
  for (const std::string format : {"tsv", "npy"}) {
    const std::string out = absl::StrCat(testing::TempDir(), "/emb.", format);
    absl::StatusOr<testing::ProcessResult> exported = testing::RunProcess(
        kPsCtl, {"export", "--checkpoint=" + folder, absl::StrCat("--table=", kTable),
                 "--out=" + out, "--format=" + format});
    REQUIRE(exported.ok());
    INFO(format << ": " << exported->stdout_text << exported->stderr_text);
    REQUIRE(exported->exit_code == 0);
    CHECK_THAT(exported->stdout_text, Catch::Contains(absl::StrCat("exported ", keys.size())));
    const std::string bytes = ReadBytes(out);
    const std::map<uint64_t, std::vector<float>> rows =
        format == "tsv" ? ParseTsv(bytes) : ParseNpy(bytes, kDim);
    REQUIRE(rows.size() == keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::vector<float>& row = rows.at(keys[i]);
      REQUIRE(row.size() == kDim);
      CHECK(std::memcmp(row.data(), &served[i * kDim], kDim * sizeof(float)) == 0);
    }
    if (format == "tsv") {  // sorted by id, as the keys are
      std::vector<uint64_t> ids;
      for (absl::string_view line : absl::StrSplit(bytes, '\n', absl::SkipEmpty())) {
        ids.push_back(
            std::strtoull(std::string(line.substr(0, line.find('\t'))).c_str(), nullptr, 10));
      }
      CHECK(ids == keys);
    }
  }

  // An unknown table is named with those there are; a folder without a manifest is refused.
  const std::string out = absl::StrCat(testing::TempDir(), "/refused.tsv");
  absl::StatusOr<testing::ProcessResult> refused = testing::RunProcess(
      kPsCtl, {"export", "--checkpoint=" + folder, "--table=deep", "--out=" + out});
  REQUIRE(refused.ok());
  CHECK(refused->exit_code == 1);
  CHECK_THAT(refused->stderr_text, Catch::Contains("no table \"deep\" (it has: emb)"));
  const std::string partial = dir + "/" + CheckpointFolderName(99);
  std::filesystem::create_directory(partial);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"checkpoint", "show", partial},
        std::vector<std::string>{"export", "--checkpoint=" + partial, "--table=emb",
                                 "--out=" + out}}) {
    refused = testing::RunProcess(kPsCtl, args);
    REQUIRE(refused.ok());
    CHECK(refused->exit_code == 1);
    CHECK_THAT(refused->stderr_text, Catch::Contains("is not a complete checkpoint"));
  }

  // One flipped byte in one shard file: export fails before writing anything, show names the file.
  const std::string shard = folder + "/shard-00003.sst";
  std::string bytes = ReadBytes(shard);
  REQUIRE(bytes.size() > 100);
  bytes[bytes.size() / 2] ^= 0x04;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  for (const std::string format : {"tsv", "npy"}) {
    refused = testing::RunProcess(kPsCtl, {"export", "--checkpoint=" + folder, "--table=emb",
                                           "--out=" + out, "--format=" + format});
    REQUIRE(refused.ok());
    CHECK(refused->exit_code == 1);
    CHECK_THAT(refused->stderr_text, Catch::Contains("DATA_LOSS"));
    CHECK_THAT(refused->stderr_text, Catch::Contains(shard));
    CHECK_FALSE(std::filesystem::exists(out));
    CHECK_FALSE(std::filesystem::exists(out + ".tmp"));
  }
  show = testing::RunProcess(kPsCtl, {"checkpoint", "show", folder});
  REQUIRE(show.ok());
  CHECK(show->exit_code == 1);
  CHECK_THAT(show->stdout_text, Catch::Contains("DAMAGED: DATA_LOSS: checkpoint file " + shard));
  CHECK_THAT(show->stderr_text, Catch::Contains("1 of 8 shard files are damaged"));
}

// --- Compact rows: FP16 and BF16 tables (server/README.md#compact-rows) ---

// Whether every float of `values` is what a table of `type` stores (encoding it changes nothing).
bool AllStorable(const std::vector<float>& values, config::Table::ValueType type) {
  for (const float x : values) {
    const float stored = type == config::Table::FP16
                             ? Fp16ToFloat(FloatToFp16(x, Fp16Overflow::kSaturate))
                             : Bf16ToFloat(FloatToBf16(x));
    if (std::memcmp(&stored, &x, sizeof(x)) != 0) return false;
  }
  return true;
}

TEST_CASE(
    "an FP16 table round-trips bit for bit through a checkpoint, its export, a failover "
    "(replication 2) and a restore",
    "[checkpoint][integration][compact]") {
  // "half": FP16 with row-wise Adagrad (a row of 8 weights and 1 accumulator); "brain": BF16
  // with Adagrad and an odd dim (padded rows).
  const std::string dir = absl::StrCat(testing::TempDir(), "/compact_checkpoints");
  const std::string job_path = absl::StrCat(testing::TempDir(), "/compact.pbtxt");
  std::ofstream(job_path) << absl::StrFormat(
      R"pb(name: "compact"
           tables {
             name: "half"
             dim: 8
             value_type: FP16
             initializer { kind: NORMAL }
             optimizer { type: "rowwise_adagrad" learning_rate: 0.1 }
           }
           tables {
             name: "brain"
             dim: 5
             value_type: BF16
             initializer { kind: NORMAL }
             optimizer { type: "adagrad" learning_rate: 0.1 }
           }
           training { mode: ASYNC }
           cluster {
             num_shards: 8
             num_servers: 3
             num_workers: 1
             replication_factor: 2
             replication_mode: SYNC
             checkpoint_dir: "%s"
           }
      )pb",
      dir);
  const std::vector<uint64_t> keys = testing::RandomKeys(2000, 3);
  struct Served {
    std::vector<float> half, brain;
  };
  auto pull = [&](Client* client) {
    Served s{std::vector<float>(keys.size() * 8), std::vector<float>(keys.size() * 5)};
    REQUIRE(client->Pull("half", keys, absl::MakeSpan(s.half)).ok());
    REQUIRE(client->Pull("brain", keys, absl::MakeSpan(s.brain)).ok());
    return s;
  };
  auto same = [](const Served& a, const Served& b) {
    return std::memcmp(a.half.data(), b.half.data(), a.half.size() * 4) == 0 &&
           std::memcmp(a.brain.data(), b.brain.data(), a.brain.size() * 4) == 0;
  };
  auto connect = [](const testing::LocalCluster& cluster) {
    ClientOptions options;
    options.coordinator = cluster.coordinator().address();
    options.retry_timeout = absl::Seconds(30);
    options.request_timeout = absl::Seconds(5);
    auto client = Client::Connect(options);
    INFO(client.status().ToString());
    REQUIRE(client.ok());
    return std::move(client).value();
  };

  std::string folder;
  Served at_checkpoint;
  testing::CheckpointStore stored;
  testing::LocalClusterOptions three;
  three.servers = 3;
  {
    auto cluster = testing::LocalCluster::Start(job_path, three);
    INFO(cluster.status().ToString());
    REQUIRE(cluster.ok());
    std::unique_ptr<Client> client = connect(**cluster);
    std::mt19937_64 rng(17);
    std::vector<float> half(keys.size() * 8), brain(keys.size() * 5);
    for (int round = 0; round < 3; ++round) {
      for (float& g : half) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
      for (float& g : brain) g = static_cast<float>(rng() % 2000) / 1000.0f - 1.0f;
      REQUIRE(client->Push("half", keys, half).ok());
      REQUIRE(client->Push("brain", keys, brain).ok());
    }
    at_checkpoint = pull(client.get());
    CHECK(AllStorable(at_checkpoint.half, config::Table::FP16));
    CHECK(AllStorable(at_checkpoint.brain, config::Table::BF16));
    CHECK_FALSE(AllStorable(at_checkpoint.half, config::Table::BF16));  // fp16 has more bits

    // The checkpoint holds fp32 rows: the served weights exactly, then the fp32 state.
    absl::StatusOr<rpc::CheckpointResponse> taken =
        testing::TakeCheckpoint((*cluster)->coordinator().address());
    INFO(taken.status().ToString());
    REQUIRE(taken.ok());
    folder = taken->path();
    stored = testing::ReadCheckpointStore(folder, job_path);
    REQUIRE(stored.rows.size() == 2 * keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string& row = stored.rows.at({"half", keys[i]});
      REQUIRE(row.size() == (8 + 1) * sizeof(float));
      CHECK(std::memcmp(row.data(), &at_checkpoint.half[i * 8], 8 * sizeof(float)) == 0);
      const std::string& wide = stored.rows.at({"brain", keys[i]});
      REQUIRE(wide.size() == (5 + 5) * sizeof(float));
      CHECK(std::memcmp(wide.data(), &at_checkpoint.brain[i * 5], 5 * sizeof(float)) == 0);
    }

    // Failover: the primary of a third of the shards is killed; the replicas, which were sent
    // fp32 rows and re-encoded them, serve the same bits, and go on training.
    (*cluster)->servers()[0]->Kill();
    CHECK(same(pull(client.get()), at_checkpoint));
    for (float& g : half) g = 0.25f;
    REQUIRE(client->Push("half", keys, half).ok());
    const Served after = pull(client.get());
    CHECK_FALSE(same(after, at_checkpoint));
    CHECK(AllStorable(after.half, config::Table::FP16));
    client.reset();
    (void)(*cluster)->Terminate(absl::Seconds(20));  // one server is dead already
  }

  // The export holds the served embeddings, bit for bit.
  const std::string out = absl::StrCat(testing::TempDir(), "/half.npy");
  absl::StatusOr<testing::ProcessResult> exported = testing::RunProcess(
      kPsCtl, {"export", "--checkpoint=" + folder, "--table=half", "--out=" + out,
               "--format=npy"});
  REQUIRE(exported.ok());
  INFO(exported->stdout_text << exported->stderr_text);
  REQUIRE(exported->exit_code == 0);
  const std::map<uint64_t, std::vector<float>> rows = ParseNpy(ReadBytes(out), 8);
  REQUIRE(rows.size() == keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    CHECK(std::memcmp(rows.at(keys[i]).data(), &at_checkpoint.half[i * 8], 8 * 4) == 0);
  }

  // A fresh cluster restored from the checkpoint serves the same bits, and its own checkpoint
  // holds the same rows, optimizer state included.
  testing::LocalClusterOptions options;
  options.servers = 3;
  options.coordinator_args = {"--restore=" + folder};
  auto cluster = testing::LocalCluster::Start(job_path, options);
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  std::unique_ptr<Client> client = connect(**cluster);
  CHECK(same(pull(client.get()), at_checkpoint));
  absl::StatusOr<rpc::CheckpointResponse> again =
      testing::TakeCheckpoint((*cluster)->coordinator().address());
  INFO(again.status().ToString());
  REQUIRE(again.ok());
  CHECK(testing::ReadCheckpointStore(again->path(), job_path).rows == stored.rows);
  client.reset();
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST_CASE("a training job checkpoints every k steps and once it is done",
          "[checkpoint][integration][training]") {
  const std::string dir = absl::StrCat(testing::TempDir(), "/periodic");
  worker::SyntheticOptions data_options;
  data_options.cardinalities = {100};
  data_options.seed = 2;
  auto data = worker::SyntheticData::Create(data_options);
  REQUIRE(data.ok());
  const std::string train = absl::StrCat(testing::TempDir(), "/periodic_train.tsv");
  REQUIRE(
      worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream, 20000, train, false)
          .ok());
  const std::string job_path = absl::StrCat(testing::TempDir(), "/periodic.pbtxt");
  std::ofstream(job_path) << absl::StrFormat(
      R"pb(name: "periodic"
           tables {
             name: "emb"
             dim: 8
             optimizer { type: "adagrad" }
           }
           model {
             bottom_mlp: [ 16, 8 ]
             top_mlp: [ 16 ]
             shared_table: "emb"
           }
           data { train_paths: "%s" }
           training { mode: SYNC batch_size: 128 steps: 100 }
           cluster {
             num_shards: 8
             num_servers: 2
             num_workers: 1
             checkpoint_dir: "%s"
             checkpoint_every_steps: 10
             checkpoint_keep: 20
           })pb",
      train, dir);
  auto cluster = testing::LocalCluster::Start(job_path, {});
  INFO(cluster.status().ToString());
  REQUIRE(cluster.ok());
  auto workers = (*cluster)->RunWorkers({{}}, absl::Minutes(5));
  INFO(workers.status().ToString());
  REQUIRE(workers.ok());
  const std::string result = testing::ResultJson(workers->at(0).stdout_text);
  INFO(result);

  // The periodic checkpoints, then the end-of-training one at boundary 100, which the worker
  // reports. A periodic checkpoint is due at marks 10, 20, ..., 90; a worker quicker than the
  // request moves it to a later boundary, and one still being written when the next mark passes skips
  // that mark (checkpoint_scheduler.h). So how many periodic ones there are depends on the
  // machine's speed (on a loaded machine the worker may outrun several requests: hence 9 marks),
  // and what holds on any machine is: at least one, the k-th at step >= 10k.
  absl::StatusOr<std::vector<rpc::CheckpointManifest>> list = ListCheckpoints(dir);
  REQUIRE(list.ok());
  REQUIRE(list->size() >= 2);
  const rpc::CheckpointManifest& last = list->back();
  CHECK(last.step() == 100);
  CHECK_THAT(result, Catch::Contains(absl::StrCat("\"checkpoint\":\"", dir, "/",
                                                  CheckpointFolderName(last.id()), "\"")));
  for (size_t i = 0; i + 1 < list->size(); ++i) {
    INFO("periodic checkpoint " << i << " at step " << list->at(i).step());
    CHECK(list->at(i).step() >= 10 * static_cast<int64_t>(i + 1));
    CHECK(list->at(i).step() <= 100);
    CHECK(list->at(i).id() < list->at(i + 1).id());
  }
  // Each holds the worker's state at its boundary, the periodic ones asked of the worker.
  for (const rpc::CheckpointManifest& m : *list) {
    REQUIRE(m.workers_size() == 1);
    const std::string folder = absl::StrCat(dir, "/", CheckpointFolderName(m.id()));
    rpc::CheckpointWorkerState state;
    std::ifstream in(absl::StrCat(folder, "/", m.workers(0).file()), std::ios::binary);
    REQUIRE(state.ParseFromIstream(&in));
    CHECK(state.step() == m.step());
    CHECK(state.params().size() > 0);
  }
  REQUIRE((*cluster)->Terminate(absl::Seconds(20)).ok());
}

}  // namespace
}  // namespace ps

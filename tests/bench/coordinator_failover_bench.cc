// coordinator_failover_bench: coordinators that fail over through etcd, measured with real
// processes on loopback: 3 etcd members (Debian's etcd, 50 ms raft heartbeat, 500 ms election
// timeout, so that it grants --lease_ttl_s=1), 3 ps_coordinator --etcd, 3 ps_servers
// (replication_factor 2, SYNC replication) and 2 ps_workers training in SYNC mode. The job has a
// checkpoint_dir (no periodic checkpoints), so that every sync step reports its clock to the
// coordinator and waits for the answer: a step cannot complete without a leader.
//
// Three runs of the same job (--steps steps of --batch samples per worker, a small DLRM over
// ps_datagen's data):
//   single:  one coordinator keeping its state in RocksDB (--data_dir), no kills;
//   etcd:    the three etcd-backed coordinators, no kills;
//   kills:   the same, the leading coordinator killed with SIGKILL --kills times (each time it is
//            started again as a standby once another leads, and training runs on for --settle_ms
//            before the next kill).
// One JSON line per run, then one with the figures:
//   takeover_ms_p50, takeover_ms_max: from the kill to the first sync step completed under the new
//     leader (seen as a coordinator answering with a worker's clock 2 steps past the largest
//     clock seen before the kill);
//   acked_lost: parameters (embedding rows of every key of the data, and the dense master copy)
//     that differ between the kills run and the etcd run: every acknowledged update of a sync
//     job is in its final parameters, which are the same bit for bit whatever the coordinators
//     did, so any difference is an update lost (or applied twice);
//   steps_per_s_ratio_vs_single: the etcd run's sync steps per second over the single run's;
//   etcd_writes_per_step: etcd's raft index (every write the cluster committed) over the etcd run,
//     per step.
//
//   bazel build -c opt //tests/bench:coordinator_failover_bench
//   bazel-out/k8-opt/bin/tests/bench/coordinator_failover_bench --bin_dir=bazel-out/k8-opt/bin
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator/etcd_client.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/measure.h"
#include "tests/testing/model_parameters.h"
#include "tests/testing/runfiles.h"
#include "tests/testing/temp_dir.h"

ABSL_FLAG(std::string, bin_dir, "", "folder holding server/, server/coordinator/, worker/");
ABSL_FLAG(int, kills, 10, "leaders killed in the kills run");
ABSL_FLAG(int, steps, 4000, "sync steps of each run");
ABSL_FLAG(int, batch, 64, "samples per worker and step");
ABSL_FLAG(int, lease_ttl_s, 1, "the coordinators' --lease_ttl_s");
ABSL_FLAG(int, settle_ms, 1000, "training between a takeover and the next kill");
ABSL_FLAG(int64_t, rows, -1, "training rows ps_datagen writes (-1: as many as the steps read)");

namespace ps {
namespace {

std::string g_self;

std::string BinDir() {
  return testing::FindBinDir(absl::GetFlag(FLAGS_bin_dir), g_self, "worker/ps_worker", "bazel-bin");
}

void Fail(const std::string& what) {
  std::fprintf(stderr, "coordinator_failover_bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Must(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Fail(absl::StrCat(what, ": ", v.status().ToString()));
  return std::move(*v);
}

std::string JobText(const std::string& name, const std::string& train) {
  return absl::StrFormat(
      R"pb(name: "%s"
           tables {
             name: "emb"
             dim: 8
             initializer { kind: UNIFORM low: -0.05 high: 0.05 }
             optimizer { type: "adagrad" learning_rate: 0.05 }
           }
           model {
             bottom_mlp: [ 16, 8 ]
             top_mlp: [ 16 ]
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
           cluster {
             num_shards: 12
             num_servers: 3
             num_workers: 2
             replication_factor: 2
             replication_mode: SYNC
             checkpoint_dir: "%s/%s_checkpoints"
             checkpoint_at_end: false
           }
      )pb",
      name, train, absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_steps), testing::TempDir(),
      name);
}

uint64_t RaftIndex(const std::string& endpoints) {
  auto etcd = Must(coordinator::EtcdClient::Create(endpoints), "etcd client");
  uint64_t index = 0;
  for (const auto& h : etcd->CheckEndpoints(absl::Seconds(1))) {
    index = std::max(index, h.raft_index);
  }
  return index;
}

struct RunResult {
  double seconds = 0;
  double steps_per_s = 0;
  uint64_t etcd_writes = 0;
  std::vector<double> takeover_ms;
  testing::ModelParameters parameters;
};

RunResult RunJob(const std::string& setup, const std::string& train,
                 const std::vector<uint64_t>& keys, int kills) {
  const std::string name = absl::StrCat("bench_", setup);
  const std::string job_path = absl::StrCat(testing::TempDir(), "/", name, ".pbtxt");
  std::ofstream(job_path) << JobText(name, train);
  std::unique_ptr<testing::EtcdCluster> etcd;
  testing::LocalClusterOptions options;
  options.bin_dir = BinDir();
  options.servers = 3;
  if (setup == "single") {
    options.coordinator_args = {absl::StrCat("--data_dir=", testing::TempDir(), "/", name, "_db")};
  } else {
    etcd = Must(testing::EtcdCluster::Start(3), "etcd");
    options.coordinators = 3;
    options.etcd = etcd->endpoints();
    options.coordinator_args = {absl::StrCat("--lease_ttl_s=", absl::GetFlag(FLAGS_lease_ttl_s))};
  }
  auto cluster = Must(testing::LocalCluster::Start(job_path, options), "cluster");
  const uint64_t raft_before = etcd ? RaftIndex(etcd->endpoints()) : 0;

  RunResult result;
  std::atomic<bool> done{false};
  absl::Notification release;
  std::vector<double>& takeover = result.takeover_ms;
  std::thread killer;
  if (kills > 0) {
    killer = std::thread([&] {
      for (int k = 0; k < kills && !done; ++k) {
        // Training runs a while under the current leader first.
        int64_t before = -1;
        const absl::Time settle_end =
            absl::Now() + absl::Milliseconds(absl::GetFlag(FLAGS_settle_ms));
        while (!done && (absl::Now() < settle_end || before < 0)) {
          std::optional<rpc::ClusterStatus> s = cluster->LeaderStatus(absl::Milliseconds(200));
          if (s.has_value()) before = std::max(before, s->clocks().max_clock());
        }
        if (done) break;
        const int leader = cluster->LeaderIndex();
        if (leader < 0) continue;
        const absl::Time killed = absl::Now();
        cluster->KillCoordinator(leader);
        while (!done) {
          std::optional<rpc::ClusterStatus> s = cluster->LeaderStatus(absl::Milliseconds(200));
          if (s.has_value() && s->clocks().max_clock() >= before + 2) {
            takeover.push_back(absl::ToDoubleMilliseconds(absl::Now() - killed));
            break;
          }
        }
        if (!cluster->RestartCoordinator(leader).ok()) Fail("restarting a coordinator");
      }
      // The coordinators started again die with this thread (Daemon): it lives until the end.
      release.WaitForNotification();
    });
  }
  const absl::Time start = absl::Now();
  auto workers =
      Must(cluster->RunWorkers(std::vector<std::vector<std::string>>(2, {"--progress_s=600"}),
                               absl::Minutes(20)),
           "workers");
  done = true;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const std::string rank0 = testing::ResultJson(workers[0].stdout_text);
  const double steps = testing::JsonField(rank0, "steps");
  const double seconds = testing::JsonField(rank0, "seconds");
  result.steps_per_s = seconds > 0 ? steps / seconds : 0;
  if (etcd) result.etcd_writes = RaftIndex(etcd->endpoints()) - raft_before;
  result.parameters =
      Must(testing::PullModelParameters(cluster->coordinator_addresses(), "emb", keys),
           "pulling the parameters");
  release.Notify();
  if (killer.joinable()) killer.join();
  absl::PrintF(
      "{\"bench\":\"coordinator_failover\",\"run\":\"%s\",\"steps\":%d,\"seconds\":%.2f,"
      "\"steps_per_s\":%.1f,\"etcd_writes\":%d,\"kills\":%d}\n",
      setup, static_cast<int64_t>(steps), seconds, result.steps_per_s,
      static_cast<int64_t>(result.etcd_writes), static_cast<int>(takeover.size()));
  std::fflush(stdout);
  return result;
}

int64_t Differences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::max(a.size(), b.size()));
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

int Main() {
  const std::string train = testing::TempDir() + "/train.tsv";
  testing::DatagenOptions datagen;
  datagen.bin_dir = BinDir();
  datagen.train_path = train;
  datagen.heldout_path = testing::TempDir() + "/heldout.tsv";
  datagen.rows = absl::GetFlag(FLAGS_rows) >= 0
                     ? absl::GetFlag(FLAGS_rows)
                     : 2 * int64_t{absl::GetFlag(FLAGS_batch)} * absl::GetFlag(FLAGS_steps);
  datagen.heldout_rows = 1000;
  Must(testing::RunDatagen(datagen, absl::Minutes(5)), "ps_datagen");
  const std::vector<uint64_t> keys = Must(testing::KeysOfFile(train), "keys");

  const RunResult single = RunJob("single", train, keys, 0);
  const RunResult steady = RunJob("etcd", train, keys, 0);
  const RunResult killed = RunJob("kills", train, keys, absl::GetFlag(FLAGS_kills));
  const int64_t lost = Differences(steady.parameters.rows, killed.parameters.rows) +
                       Differences(steady.parameters.dense, killed.parameters.dense);
  absl::PrintF(
      "{\"bench\":\"coordinator_failover\",\"run\":\"figures\",\"lease_ttl_s\":%d,\"kills\":%d,"
      "\"takeover_ms_p50\":%.0f,\"takeover_ms_max\":%.0f,\"acked_lost\":%d,"
      "\"parameters_compared\":%d,\"steps_per_s_single\":%.1f,\"steps_per_s_etcd\":%.1f,"
      "\"steps_per_s_ratio_vs_single\":%.3f,\"etcd_writes_per_step\":%.4f}\n",
      absl::GetFlag(FLAGS_lease_ttl_s), static_cast<int>(killed.takeover_ms.size()),
      testing::Percentile(killed.takeover_ms, 0.5), testing::Percentile(killed.takeover_ms, 1.0),
      lost, static_cast<int64_t>(steady.parameters.rows.size() + steady.parameters.dense.size()),
      single.steps_per_s, steady.steps_per_s, steady.steps_per_s / single.steps_per_s,
      static_cast<double>(steady.etcd_writes) / absl::GetFlag(FLAGS_steps));
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ps::g_self = ps::testing::SelfPath(argv[0]);
  auto scratch = ps::testing::UseScopedTempDir("coordinator_failover_bench");
  if (!scratch.ok()) {
    std::fprintf(stderr, "coordinator_failover_bench: %s\n", scratch.status().ToString().c_str());
    return 1;
  }
  return ps::Main();
}

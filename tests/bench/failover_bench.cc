// Replication and failover, measured across real processes on loopback. One JSON line per
// measurement:
//
//  - "failover": a coordinator and 3 servers (replication_factor 2, SYNC); client threads push +1
//    to probe keys while a primary is killed with SIGKILL, --kills times (each time a server is
//    restarted at its address and the cluster heals before the next kill). failover_ms_p50 / _max:
//    from the SIGKILL to the first acknowledged push to a shard the victim was primary of, as a
//    client sees it; acked_lost: acknowledged pushes missing afterwards (and applied_twice).
//  - "catchup": 2 servers (replication 2) hold --catchup_rows rows of dim 16 with Adagrad; one is
//    killed and restarted, and fills copies of every shard from snapshots: rows and MB per second
//    from the first copy catching up to the last caught up.
//  - "throughput": ps_bench at 100k keys x 16 (2 servers, 1 worker) with replication_factor 1, 2
//    SYNC and 2 ASYNC, --runs rounds alternating; medians and push/pull ratios against 1. On one
//    host the client calls an unreplicated server in shared memory while the replication stream
//    crosses a socket, so replication_factor 1 also runs with --shared_memory=false (as a client
//    on another host does), and each line gives its ratios against that baseline too
//    (*_ratio_vs_rf1_sockets).
//
//   bazel build -c opt //tests/bench:failover_bench
//   bazel-out/k8-opt/bin/tests/bench/failover_bench --bin_dir=bazel-out/k8-opt/bin
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "common/hash.h"
#include "tests/testing/daemon.h"
#include "tests/testing/measure.h"
#include "tests/testing/runfiles.h"
#include "tests/testing/temp_dir.h"

ABSL_FLAG(std::string, bin_dir, "", "folder holding server/, server/coordinator/, tests/bench/");
ABSL_FLAG(int, kills, 10, "primaries killed in the failover measurement");
ABSL_FLAG(int64_t, catchup_rows, 2000000, "rows a restarted server copies (0: skip)");
ABSL_FLAG(int, runs, 3, "rounds of the throughput comparison (0: skip)");
ABSL_FLAG(
    int, iters, 100,
    "timed pulls and pushes of each ps_bench run (runs of 20 moved the ratios by up to 0.07 here)");

namespace ps {
namespace {

std::string g_self;
constexpr int kShards = 12;
constexpr int kProbes = 240;

std::string BinDir() {
  return testing::FindBinDir(absl::GetFlag(FLAGS_bin_dir), g_self, "server/ps_server", "bazel-bin");
}

void Fail(const std::string& what) {
  std::fprintf(stderr, "failover_bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Must(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Fail(absl::StrCat(what, ": ", v.status().ToString()));
  return std::move(*v);
}

// A coordinator and servers started from --bin_dir, in a temporary folder removed at the end.
class Cluster {
 public:
  Cluster(const std::string& job_text, int servers) {
    std::string dir = testing::TempDir() + "/cluster.XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) Fail("mkdtemp");
    dir_ = dir;
    const std::string job = dir_ + "/job.pbtxt";
    std::ofstream(job) << job_text;
    coordinator_ = Must(
        testing::Daemon::Start(BinDir() + "/server/coordinator/ps_coordinator", {"--job=" + job}),
        "coordinator");
    for (int i = 0; i < servers; ++i) servers_.push_back(StartServer(0));
  }
  ~Cluster() {
    servers_.clear();
    coordinator_.reset();
    std::system(absl::StrCat("rm -rf ", dir_).c_str());
  }

  std::unique_ptr<testing::Daemon> StartServer(int port) {
    return Must(testing::Daemon::Start(BinDir() + "/server/ps_server",
                                       {"--coordinator=" + coordinator_->address(),
                                        absl::StrCat("--listen=127.0.0.1:", port)}),
                "server");
  }
  void Restart(int i) { servers_[i] = StartServer(servers_[i]->port()); }

  std::string address() const { return coordinator_->address(); }
  testing::Daemon& server(int i) { return *servers_[i]; }

  std::unique_ptr<Client> Connect() {
    ClientOptions options;
    options.coordinator = address();
    options.retry_timeout = absl::Seconds(60);
    options.request_timeout = absl::Seconds(10);
    return Must(Client::Connect(options), "client");
  }

  rpc::ClusterStatus Status() {
    auto client = Must(CoordinatorClient::Connect(address(), absl::Seconds(5)), "coordinator");
    return Must(client->GetStatus(), "status");
  }

  // Every shard has `copies` live copies, none catching up.
  bool Healed(int copies) {
    const rpc::ClusterStatus status = Status();
    if (status.shard_map().shards_size() == 0) return false;
    for (const rpc::ShardAssignment& a : status.shard_map().shards()) {
      if (a.lost() || a.catching_up_size() > 0 || a.replicas_size() + 1 != copies) return false;
    }
    return true;
  }

 private:
  std::string dir_;
  std::unique_ptr<testing::Daemon> coordinator_;
  std::vector<std::unique_ptr<testing::Daemon>> servers_;
};

void Failover() {
  const int kills = absl::GetFlag(FLAGS_kills);
  Cluster cluster(
      absl::StrFormat(
          R"pb(
            name: "failover_bench"
            tables {
              name: "probe"
              dim: 1
              initializer { kind: ZEROS }
              optimizer { type: "sgd" learning_rate: 1 }
            }
            training { mode: ASYNC }
            cluster { num_shards: %d num_servers: 3 replication_factor: 2 replication_mode: SYNC }
          )pb",
          kShards),
      3);
  // Probe keys by shard, so that a push can aim at a victim's shard.
  const uint64_t table = NameHash("probe");
  std::vector<std::vector<uint64_t>> by_shard(kShards);
  for (uint64_t k = 0; k < kProbes; ++k) by_shard[ShardOf(table, k, kShards)].push_back(k);

  absl::Mutex mu;
  std::vector<int64_t> acked(kProbes, 0);
  absl::Status error;
  std::atomic<bool> stop{false};
  std::vector<std::thread> storm;
  std::vector<std::unique_ptr<Client>> clients;
  for (int t = 0; t < 3; ++t) clients.push_back(cluster.Connect());
  for (int t = 0; t < 3; ++t) {
    storm.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      const float grad = -1.0f;
      while (!stop.load()) {
        const uint64_t key = rng() % kProbes;
        const absl::Status s = clients[t]->Push("probe", {key}, absl::MakeConstSpan(&grad, 1));
        absl::MutexLock lock(&mu);
        if (!s.ok()) {
          if (error.ok()) error = s;
          return;
        }
        ++acked[key];
      }
    });
  }
  std::unique_ptr<Client> prober = cluster.Connect();
  std::vector<double> failover_ms;
  std::mt19937_64 rng(99);
  for (int k = 0; k < kills; ++k) {
    const int victim = k % 3;
    std::vector<uint32_t> shards;
    const rpc::ClusterStatus status = cluster.Status();
    for (const rpc::ShardAssignment& a : status.shard_map().shards()) {
      if (a.primary() == static_cast<uint32_t>(victim)) shards.push_back(a.shard());
    }
    if (shards.empty()) Fail("the victim is primary of nothing");
    // A random moment: the storm runs a little first.
    absl::SleepFor(absl::Milliseconds(50 + rng() % 200));
    const uint64_t key = by_shard[shards[rng() % shards.size()]].front();
    const absl::Time killed = absl::Now();
    cluster.server(victim).Kill();
    const float grad = -1.0f;
    const absl::Status s = prober->Push("probe", {key}, absl::MakeConstSpan(&grad, 1));
    const absl::Time pushed = absl::Now();
    if (!s.ok()) Fail(absl::StrCat("push after the kill: ", s.ToString()));
    {
      absl::MutexLock lock(&mu);
      ++acked[key];
    }
    failover_ms.push_back(absl::ToDoubleMilliseconds(pushed - killed));
    cluster.Restart(victim);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!cluster.Healed(2)) {
      if (absl::Now() > deadline) Fail("the cluster did not heal within 60 s");
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  stop.store(true);
  for (std::thread& t : storm) t.join();
  if (!error.ok()) Fail(absl::StrCat("a push of the storm failed: ", error.ToString()));
  std::vector<uint64_t> keys(kProbes);
  for (int i = 0; i < kProbes; ++i) keys[i] = i;
  std::vector<float> values(kProbes);
  const absl::Status pulled = prober->Pull("probe", keys, absl::MakeSpan(values));
  if (!pulled.ok()) Fail(pulled.ToString());
  int64_t lost = 0, twice = 0, total = 0;
  for (int i = 0; i < kProbes; ++i) {
    const int64_t have = static_cast<int64_t>(values[i]);
    total += acked[i];
    lost += std::max<int64_t>(0, acked[i] - have);
    twice += std::max<int64_t>(0, have - acked[i]);
  }
  absl::PrintF(
      "{\"bench\":\"failover\",\"kills\":%d,\"replication_factor\":2,\"replication_mode\":\"SYNC\","
      "\"failover_ms_p50\":%.1f,\"failover_ms_max\":%.1f,\"acked_pushes\":%d,\"acked_lost\":%d,"
      "\"applied_twice\":%d}\n",
      kills, testing::Percentile(failover_ms, 0.5), testing::Percentile(failover_ms, 1.0), total,
      lost, twice);
  std::fflush(stdout);
}

void Catchup() {
  const int64_t rows = absl::GetFlag(FLAGS_catchup_rows);
  if (rows <= 0) return;
  Cluster cluster(absl::StrFormat(R"pb(
                                    name: "catchup_bench"
                                    tables {
                                      name: "emb"
                                      dim: 16
                                      initializer { kind: UNIFORM low: -0.01 high: 0.01 }
                                      optimizer { type: "adagrad" learning_rate: 0.01 }
                                      capacity_hint: %d
                                    }
                                    training { mode: ASYNC }
                                    cluster {
                                      num_shards: 64
                                      num_servers: 2
                                      replication_factor: 2
                                      max_message_bytes: 268435456
                                    }
                                  )pb",
                                  rows),
                  2);
  std::unique_ptr<Client> client = cluster.Connect();
  constexpr int64_t kBatch = 100000;
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> grads(kBatch * 16, 0.01f);
  for (int64_t at = 0; at < rows; at += kBatch) {
    const int64_t n = std::min(kBatch, rows - at);
    keys.resize(n);
    for (int64_t i = 0; i < n; ++i) keys[i] = static_cast<uint64_t>(at + i) * 2654435761u;
    const absl::Status s =
        client->Push("emb", keys, absl::MakeConstSpan(grads.data(), size_t(n) * 16));
    if (!s.ok()) Fail(absl::StrCat("loading rows: ", s.ToString()));
  }
  // Server 1 dies: server 0 is primary of everything; server 1 comes back and copies it all.
  cluster.server(1).Kill();
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (cluster.Status().failovers() == 0) {
    if (absl::Now() > deadline) Fail("no failover");
    // A push that reaches the dead server reports it.
    (void)client->Push("emb", keys, absl::MakeConstSpan(grads.data(), keys.size() * 16));
  }
  cluster.Restart(1);
  absl::Time first_catching = absl::InfiniteFuture();
  while (true) {
    const absl::Time now = absl::Now();
    const rpc::ClusterStatus status = cluster.Status();
    bool catching = false;
    for (const rpc::ShardAssignment& a : status.shard_map().shards()) {
      catching = catching || a.catching_up_size() > 0;
    }
    if (catching && first_catching == absl::InfiniteFuture()) first_catching = now;
    if (!catching && first_catching != absl::InfiniteFuture()) break;
    if (now > deadline) Fail("the restarted server did not catch up");
    absl::SleepFor(absl::Milliseconds(5));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - first_catching);
  // A row of dim 16 with Adagrad: 32 floats, and its key.
  const double mb = static_cast<double>(rows) * (32 * 4 + 8) / 1e6;
  absl::PrintF(
      "{\"bench\":\"catchup\",\"rows\":%d,\"dim\":16,\"optimizer\":\"adagrad\",\"seconds\":%.3f,"
      "\"catchup_rows_per_s\":%.0f,\"catchup_mb_per_s\":%.1f}\n",
      rows, seconds, rows / seconds, mb / seconds);
  std::fflush(stdout);
}

// ps_bench's push and pull M keys/s for one configuration.
std::map<std::string, double> PsBench(int replication, const std::string& mode,
                                      bool shared_memory) {
  const std::string bin = BinDir();
  testing::ProcessResult r =
      Must(testing::RunProcess(
               bin + "/tests/bench/ps_bench",
               {"--bin_dir=" + bin, "--servers=2", "--workers=1", "--keys=100000", "--dim=16",
                absl::StrCat("--iters=", absl::GetFlag(FLAGS_iters)),
                absl::StrCat("--replication_factor=", replication), "--replication_mode=" + mode,
                absl::StrCat("--shared_memory=", shared_memory ? "true" : "false")},
               absl::Minutes(5)),
           "ps_bench");
  if (r.exit_code != 0) Fail("ps_bench failed: " + r.stderr_text);
  std::map<std::string, double> rate;
  for (absl::string_view line : absl::StrSplit(r.stdout_text, '\n')) {
    for (const char* op : {"pull", "push"}) {
      if (line.find(absl::StrCat("\"op\":\"", op, "\"")) == absl::string_view::npos) continue;
      const size_t at = line.find("\"mkeys_per_s\":");
      double v = 0;
      if (at != absl::string_view::npos &&
          absl::SimpleAtod(line.substr(at + 14, line.find(',', at) - at - 14), &v)) {
        rate[op] = v;
      }
    }
  }
  return rate;
}

void Throughput() {
  const int runs = absl::GetFlag(FLAGS_runs);
  if (runs <= 0) return;
  struct Config {
    int replication;
    std::string mode;
    bool shared_memory;
    std::vector<double> pull, push;
  };
  std::vector<Config> configs = {{1, "SYNC", true, {}, {}},
                                 {1, "SYNC", false, {}, {}},
                                 {2, "SYNC", true, {}, {}},
                                 {2, "ASYNC", true, {}, {}}};
  for (int run = 0; run < runs; ++run) {
    for (Config& c : configs) {
      std::map<std::string, double> rate = PsBench(c.replication, c.mode, c.shared_memory);
      c.pull.push_back(rate["pull"]);
      c.push.push_back(rate["push"]);
    }
  }
  const double pull1 = testing::Percentile(configs[0].pull, 0.5);
  const double push1 = testing::Percentile(configs[0].push, 0.5);
  const double pull1_sockets = testing::Percentile(configs[1].pull, 0.5);
  const double push1_sockets = testing::Percentile(configs[1].push, 0.5);
  for (const Config& c : configs) {
    const double pull = testing::Percentile(c.pull, 0.5);
    const double push = testing::Percentile(c.push, 0.5);
    absl::PrintF(
        "{\"bench\":\"throughput\",\"keys\":100000,\"dim\":16,\"servers\":2,\"workers\":1,"
        "\"replication_factor\":%d,\"replication_mode\":\"%s\",\"shared_memory\":%s,"
        "\"runs\":%d,\"pull_mkeys_per_s\":%.3f,\"push_mkeys_per_s\":%.3f,"
        "\"pull_ratio_vs_rf1\":%.3f,\"push_ratio_vs_rf1\":%.3f,"
        "\"pull_ratio_vs_rf1_sockets\":%.3f,\"push_ratio_vs_rf1_sockets\":%.3f,"
        "\"push_runs\":\"%s\"}\n",
        c.replication, c.replication == 1 ? "none" : c.mode.c_str(),
        c.shared_memory ? "true" : "false", runs, pull, push, pull / pull1, push / push1,
        pull / pull1_sockets, push / push1_sockets,
        absl::StrJoin(c.push, " ",
                      [](std::string* out, double v) { absl::StrAppendFormat(out, "%.2f", v); }));
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ps::g_self = ps::testing::SelfPath(argv[0]);
  // What its daemons and workers write goes into one folder, removed at the end.
  auto scratch = ps::testing::UseScopedTempDir("failover_bench");
  if (!scratch.ok()) {
    std::fprintf(stderr, "failover_bench: %s\n", scratch.status().ToString().c_str());
    return 1;
  }
  ps::Failover();
  ps::Catchup();
  ps::Throughput();
  return 0;
}

// ps_bench: pull and push throughput of a real cluster on this machine, and the servers' memory.
//
// Starts a ps_coordinator, --servers ps_server processes and --workers worker processes (this
// binary again, with --role=worker), which pull and push --keys unique random keys of dimension
// --dim per request, --iters times each, in step. Prints one JSON line per operation:
//   {"op":"pull","servers":1,"workers":1,"keys":100000,"dim":16,"handler":"store",
//    "mkeys_per_s":...,"value_mb_per_s":...,"p50_ms":...,"p99_ms":...}
// --empty_handler: the same against servers that touch no storage (the transport's ceiling).
// --memory --rows=N: loads N rows into one server and prints its resident bytes per row.
// --metrics=on: the servers and the coordinator serve /metrics, scraped every second; compare:
// --rounds runs each way, alternating, then {"bench":"metrics_overhead",...,"pull_ratio":...}.
// --security=on: mutual TLS and bearer tokens on every channel (credentials made by
// deploy/make_credentials.sh); compare: as --metrics=compare, then
// {"bench":"security_overhead",...}.
//
//   bazel run -c opt //tests/bench:ps_bench -- --servers=1 --workers=1 --keys=100000 --dim=16
#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "common/grpc/security_flags.h"
#include "common/optimizer.h"
#include "common/process_tuning.h"
#include "proto/job.pb.h"
#include "tests/testing/credentials.h"
#include "tests/testing/daemon.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/measure.h"
#include "tests/testing/ports.h"
#include "tests/testing/runfiles.h"
#include "tests/testing/temp_dir.h"

ABSL_FLAG(int, servers, 1, "server processes");
ABSL_FLAG(int, workers, 1, "worker processes");
ABSL_FLAG(int, keys, 100000, "unique keys per request");
ABSL_FLAG(int, dim, 16, "floats per row");
ABSL_FLAG(int, iters, 20, "timed requests per operation and worker");
ABSL_FLAG(int, warmup, 0, "untimed requests per operation before (0: one per key set)");
ABSL_FLAG(int, key_sets, 4, "distinct key sets each worker cycles through");
ABSL_FLAG(std::string, optimizer, "adagrad", "sgd, adagrad, rowwise_adagrad, adam or ftrl");
ABSL_FLAG(bool, empty_handler, false, "servers touch no storage (transport ceiling)");
ABSL_FLAG(int, lookup_threads, -1,
          "the servers' --lookup_threads (threads serving one large request's shards side by "
          "side; -1: their default, cores - 1)");
ABSL_FLAG(bool, memory, false, "measure the resident bytes per row of one server");
ABSL_FLAG(int64_t, rows, 10000000, "--memory: rows to load");
ABSL_FLAG(int, channels, 2, "gRPC channels per server in each worker");
ABSL_FLAG(int, inflight, 1,
          "calls each worker keeps in flight with the asynchronous API (1: blocking calls)");
ABSL_FLAG(int, max_keys_per_request, 32768, "client's split size");
ABSL_FLAG(int, send_threads, -1,
          "client's threads starting a call's requests (ClientOptions.send_threads; -1: "
          "automatic)");
ABSL_FLAG(bool, shared_memory, true,
          "payloads in the shared memory the servers lend (ClientOptions.shared_memory; they are "
          "on this host); false: through the sockets");
ABSL_FLAG(bool, shared_memory_calls, true,
          "with --shared_memory: pulls and pushes made in the shared memory itself "
          "(ClientOptions.shared_memory_calls); false: RPCs with their payloads there");
ABSL_FLAG(int, replication_factor, 1, "copies of each shard (needs that many --servers)");
ABSL_FLAG(std::string, replication_mode, "SYNC", "SYNC or ASYNC (with --replication_factor > 1)");
ABSL_FLAG(std::string, metrics, "off",
          "the servers' and coordinator's Prometheus endpoints: off, on (scraped every "
          "--scrape_ms by this process, as Prometheus would), or compare (--rounds runs each, "
          "alternating off and on, then a line with the medians and on/off ratios)");
ABSL_FLAG(int, scrape_ms, 1000, "--metrics=on: milliseconds between scrapes of each endpoint");
ABSL_FLAG(std::string, security, "off",
          "gRPC security of every channel: off (plaintext), on (mutual TLS and bearer tokens), "
          "or compare (--rounds runs each, alternating off and on, then a line with the medians "
          "and on/off ratios)");
ABSL_FLAG(std::string, credentials_script, "",
          "--security: deploy/make_credentials.sh (default: found in the runfiles or the "
          "workspace)");
ABSL_FLAG(int, rounds, 3, "--metrics=compare, --security=compare: runs of each configuration");
ABSL_FLAG(std::string, bin_dir, "", "folder holding server/ and server/coordinator/ binaries");
// Internal: how the parent starts its workers.
ABSL_FLAG(std::string, role, "", "internal: 'worker'");
ABSL_FLAG(std::string, coordinator, "",
          "internal: host:port, or several comma-separated: the job's coordinators");
ABSL_FLAG(int, rank, 0, "internal: worker rank");

namespace ps {
namespace {

std::string g_self;  // this binary's path

// --bin_dir, else this binary's runfiles (under `bazel run`), else bazel-bin.
std::string BinDir() {
  return testing::FindBinDir(absl::GetFlag(FLAGS_bin_dir), g_self, "server/ps_server", "bazel-bin");
}

std::string WriteJob(int servers, int workers, int64_t capacity_hint) {
  const std::string path = testing::TempDir() + "/job.pbtxt";
  std::ofstream out(path);
  out << absl::StrFormat(R"pb(
                           name: "bench"
                           tables {
                             name: "bench"
                             dim: %d
                             initializer { kind: UNIFORM low: -0.01 high: 0.01 }
                             optimizer { type: "%s" learning_rate: 0.01 }
                             capacity_hint: %d
                           }
                           training { mode: ASYNC }
                           cluster {
                             num_shards: 64
                             num_servers: %d
                             num_workers: %d
                             max_message_bytes: 268435456
                             replication_factor: %d %s
                           }
                         )pb",
                         absl::GetFlag(FLAGS_dim), absl::GetFlag(FLAGS_optimizer), capacity_hint,
                         servers, workers, absl::GetFlag(FLAGS_replication_factor),
                         absl::GetFlag(FLAGS_replication_factor) > 1
                             ? "replication_mode: " + absl::GetFlag(FLAGS_replication_mode)
                             : std::string());
  return path;
}

ClientOptions WorkerOptions(const std::string& coordinator,
                            std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr) {
  ClientOptions options;
  options.coordinator = coordinator;
  options.credentials = std::move(credentials);
  options.channels_per_server = absl::GetFlag(FLAGS_channels);
  options.max_keys_per_request = absl::GetFlag(FLAGS_max_keys_per_request);
  options.send_threads = absl::GetFlag(FLAGS_send_threads);
  options.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  options.shared_memory_calls = absl::GetFlag(FLAGS_shared_memory_calls);
  return options;
}

// A worker: pulls, then pushes, in step with the others; prints its timings as lines
// `op seconds latency_ms...`.
int RunWorker() {
  const std::string coordinator_address = absl::GetFlag(FLAGS_coordinator);
  const int rank = absl::GetFlag(FLAGS_rank);
  const int workers = absl::GetFlag(FLAGS_workers);
  // The parent's --security=on passes the workers --tls_* and --token_file.
  const absl::StatusOr<grpc_util::Security> security =
      grpc_util::SecurityFromFlags(grpc_util::TokenRole::kWorker);
  if (!security.ok()) {
    std::fprintf(stderr, "worker %d: %s\n", rank, security.status().ToString().c_str());
    return 1;
  }
  const std::shared_ptr<grpc::ChannelCredentials> credentials = security->ChannelCredentials();
  auto client = Client::Connect(WorkerOptions(coordinator_address, credentials));
  if (!client.ok()) {
    std::fprintf(stderr, "worker %d: %s\n", rank, client.status().ToString().c_str());
    return 1;
  }
  auto coordinator =
      CoordinatorClient::Connect(coordinator_address, absl::Seconds(30), credentials);
  if (!coordinator.ok()) return 1;
  const int k = absl::GetFlag(FLAGS_keys);
  const int dim = absl::GetFlag(FLAGS_dim);
  std::mt19937_64 rng(12345 + rank);
  std::vector<std::vector<uint64_t>> sets(absl::GetFlag(FLAGS_key_sets));
  for (auto& set : sets) {
    set.resize(k);
    for (auto& key : set) key = rng();
  }
  const int inflight = std::max(1, absl::GetFlag(FLAGS_inflight));
  std::vector<std::vector<float>> values(inflight, std::vector<float>(size_t(k) * dim));
  std::vector<float> grads(size_t(k) * dim);
  for (auto& g : grads) g = 0.001f * static_cast<float>(rng() % 1000);

  int barrier = 0;
  auto sync = [&]() -> bool {
    const std::string prefix = absl::StrCat("bench/barrier/", barrier++, "/");
    if (!(*coordinator)->KvSet(absl::StrCat(prefix, rank), "1").ok()) return false;
    std::vector<std::string> keys;
    for (int r = 0; r < workers; ++r) keys.push_back(absl::StrCat(prefix, r));
    return (*coordinator)->KvWait(keys, absl::Seconds(120)).ok();
  };

  const int warmup =
      absl::GetFlag(FLAGS_warmup) > 0 ? absl::GetFlag(FLAGS_warmup) : static_cast<int>(sets.size());
  for (const char* op : {"pull", "push"}) {
    const bool pull = std::string(op) == "pull";
    auto start_one = [&](int i) {
      const std::vector<uint64_t>& keys = sets[i % sets.size()];
      return pull ? (*client)->PullAsync("bench", keys, absl::MakeSpan(values[i % inflight]))
                  : (*client)->PushAsync("bench", keys, grads);
    };
    auto once = [&](int i) { return start_one(i).get(); };
    for (int i = 0; i < warmup; ++i) {
      const absl::Status s = once(i);
      if (!s.ok()) {
        std::fprintf(stderr, "worker %d: %s\n", rank, s.ToString().c_str());
        return 1;
      }
    }
    if (!sync()) return 1;
    std::vector<double> latencies;
    const absl::Time start = absl::Now();
    const int iters = absl::GetFlag(FLAGS_iters);
    // A window of `inflight` calls: call i is started when call i - inflight has finished.
    std::deque<std::pair<absl::Time, std::future<absl::Status>>> window;
    for (int i = 0; i < iters || !window.empty(); ++i) {
      if (i < iters) {
        const absl::Time t0 = absl::Now();
        window.emplace_back(t0, start_one(i));
      }
      if (static_cast<int>(window.size()) < inflight && i + 1 < iters) continue;
      const absl::Status s = window.front().second.get();
      if (!s.ok()) {
        std::fprintf(stderr, "worker %d: %s\n", rank, s.ToString().c_str());
        return 1;
      }
      latencies.push_back(absl::ToDoubleMilliseconds(absl::Now() - window.front().first));
      window.pop_front();
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    std::printf("%s %.9f %s\n", op, seconds, absl::StrJoin(latencies, " ").c_str());
    if (!sync()) return 1;
  }
  std::fflush(stdout);
  return 0;
}

struct WorkerProcess {
  pid_t pid = 0;
  std::string out_path;
};

WorkerProcess SpawnWorker(const std::string& coordinator, int rank,
                          const std::vector<std::string>& security_flags) {
  WorkerProcess w;
  w.out_path = absl::StrFormat("%s/worker_%d.out", testing::TempDir(), rank);
  std::vector<std::string> args = {
      g_self,
      "--role=worker",
      absl::StrCat("--coordinator=", coordinator),
      absl::StrCat("--rank=", rank),
      absl::StrCat("--workers=", absl::GetFlag(FLAGS_workers)),
      absl::StrCat("--keys=", absl::GetFlag(FLAGS_keys)),
      absl::StrCat("--dim=", absl::GetFlag(FLAGS_dim)),
      absl::StrCat("--iters=", absl::GetFlag(FLAGS_iters)),
      absl::StrCat("--warmup=", absl::GetFlag(FLAGS_warmup)),
      absl::StrCat("--key_sets=", absl::GetFlag(FLAGS_key_sets)),
      absl::StrCat("--channels=", absl::GetFlag(FLAGS_channels)),
      absl::StrCat("--inflight=", absl::GetFlag(FLAGS_inflight)),
      absl::StrCat("--max_keys_per_request=", absl::GetFlag(FLAGS_max_keys_per_request)),
      absl::StrCat("--send_threads=", absl::GetFlag(FLAGS_send_threads)),
      absl::StrCat("--shared_memory=", absl::GetFlag(FLAGS_shared_memory) ? "true" : "false"),
      absl::StrCat("--shared_memory_calls=",
                   absl::GetFlag(FLAGS_shared_memory_calls) ? "true" : "false"),
  };
  args.insert(args.end(), security_flags.begin(), security_flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, w.out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (posix_spawn(&w.pid, g_self.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
    w.pid = 0;
  }
  posix_spawn_file_actions_destroy(&actions);
  return w;
}

int RunMemory() {
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const std::string job = WriteJob(1, 1, rows);
  testing::LocalClusterOptions options;
  options.bin_dir = BinDir();
  options.servers = 1;
  auto cluster = testing::LocalCluster::Start(job, options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "%s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const testing::Daemon& server = *(*cluster)->servers()[0];
  auto client = Client::Connect(WorkerOptions((*cluster)->coordinator().address()));
  if (!client.ok()) return 1;
  const uint64_t rss_before = testing::ResidentBytesOf(server.pid());
  const int dim = absl::GetFlag(FLAGS_dim);
  const int64_t batch = 100000;
  std::vector<uint64_t> keys;
  std::vector<float> values;
  std::mt19937_64 rng(7);
  for (int64_t done = 0; done < rows; done += batch) {
    const int64_t n = std::min(batch, rows - done);
    keys.resize(n);
    for (int64_t i = 0; i < n; ++i) keys[i] = done + i;
    values.resize(n * dim);
    const absl::Status s = (*client)->Pull("bench", keys, absl::MakeSpan(values));
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  const uint64_t rss = testing::ResidentBytesOf(server.pid());
  config::Optimizer opt;
  opt.set_type(absl::GetFlag(FLAGS_optimizer));
  auto optimizer = Optimizer::Create(opt);
  if (!optimizer.ok()) return 1;
  const double raw = (dim + (*optimizer)->StateFloats(dim)) * sizeof(float);
  const double per_row = static_cast<double>(rss) / rows;
  absl::PrintF(
      "{\"bench\":\"memory\",\"rows\":%d,\"dim\":%d,\"optimizer\":\"%s\",\"raw_bytes_per_row\":%."
      "1f,"
      "\"bytes_per_row\":%.2f,\"overhead_ratio\":%.4f,\"rss_bytes\":%d,\"rss_before_load\":%d}\n",
      rows, dim, absl::GetFlag(FLAGS_optimizer), raw, per_row, per_row / raw, rss, rss_before);
  std::fflush(stdout);
  client->reset();
  (void)(*cluster)->Terminate(absl::Seconds(10));
  std::remove(job.c_str());
  return 0;
}

// Scrapes every endpoint every `interval` on its own thread until destroyed, as Prometheus
// would; counts the scrapes answered.
class Scraper {
 public:
  Scraper(std::vector<int> ports, absl::Duration interval) {
    thread_ = std::thread([this, ports, interval] {
      absl::MutexLock lock(&mu_);
      while (!stop_) {
        mu_.Unlock();
        for (const int port : ports) {
          httplib::Client client("127.0.0.1", port);
          auto response = client.Get("/metrics");
          if (response && response->status == 200) ++scraped_;
        }
        mu_.Lock();
        mu_.AwaitWithTimeout(absl::Condition(&stop_), interval);
      }
    });
  }
  ~Scraper() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  int scraped() const { return scraped_.load(); }

 private:
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> scraped_{0};
  std::thread thread_;
};

// The credentials of --security=on, made on first use in a temporary folder that is removed at
// exit; null (after a message) if they cannot be made.
const testing::TestCredentials* Credentials() {
  static std::unique_ptr<testing::ScopedTempDir> dir;
  static std::unique_ptr<testing::TestCredentials> made;
  if (made != nullptr) return made.get();
  absl::StatusOr<std::unique_ptr<testing::ScopedTempDir>> created =
      testing::ScopedTempDir::Create("ps_bench_credentials");
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return nullptr;
  }
  const std::string script =
      testing::FindWorkspaceFile(absl::GetFlag(FLAGS_credentials_script), g_self,
                                 "server/ps_server", "deploy/make_credentials.sh");
  absl::StatusOr<testing::TestCredentials> credentials =
      testing::MakeTestCredentials((*created)->path(), script);
  if (!credentials.ok()) {
    std::fprintf(stderr, "%s\n", credentials.status().ToString().c_str());
    return nullptr;
  }
  dir = *std::move(created);
  made = std::make_unique<testing::TestCredentials>(*std::move(credentials));
  return made.get();
}

// One run: the cluster, the workers' timed pulls and pushes, a JSON line per operation. The
// keys per second of each operation, summed over the workers; empty when the run failed.
//
// `secure`: the daemons serve mutual TLS and check tokens, the workers present a client
// certificate and a worker token (credentials made once, in a folder removed at exit).
std::map<std::string, double> RunThroughput(bool metrics, bool secure) {
  const int servers = absl::GetFlag(FLAGS_servers);
  const int workers = absl::GetFlag(FLAGS_workers);
  const std::string job = WriteJob(servers, workers, 0);
  testing::LocalClusterOptions options;
  options.bin_dir = BinDir();
  options.servers = servers;
  if (absl::GetFlag(FLAGS_empty_handler)) options.server_args.push_back("--empty_handler");
  options.server_args.push_back(
      absl::StrCat("--lookup_threads=", absl::GetFlag(FLAGS_lookup_threads)));
  std::vector<std::string> worker_security;
  if (secure) {
    const testing::TestCredentials* c = Credentials();
    if (c == nullptr) return {};
    for (std::vector<std::string>* args : {&options.server_args, &options.coordinator_args}) {
      args->insert(
          args->end(),
          {absl::StrCat("--tls_cert=", c->node_cert), absl::StrCat("--tls_key=", c->node_key),
           absl::StrCat("--tls_ca=", c->ca), absl::StrCat("--token_file=", c->tokens)});
    }
    worker_security = {absl::StrCat("--tls_cert=", c->client_cert),
                       absl::StrCat("--tls_key=", c->client_key), absl::StrCat("--tls_ca=", c->ca),
                       absl::StrCat("--token_file=", c->worker_token)};
  }
  if (metrics) {
    options.server_args.push_back("--metrics_listen=127.0.0.1:0");
    options.coordinator_args.push_back("--metrics_listen=127.0.0.1:0");
  }
  auto cluster = testing::LocalCluster::Start(job, options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "%s\n", cluster.status().ToString().c_str());
    return {};
  }
  std::unique_ptr<Scraper> scraper;
  if (metrics) {
    std::vector<int> ports = {testing::MetricsPortInLog((*cluster)->coordinator().ReadLog())};
    for (const auto& server : (*cluster)->servers())
      ports.push_back(testing::MetricsPortInLog(server->ReadLog()));
    scraper = std::make_unique<Scraper>(ports, absl::Milliseconds(absl::GetFlag(FLAGS_scrape_ms)));
  }
  const std::string coordinator = (*cluster)->coordinator().address();
  std::vector<WorkerProcess> procs;
  for (int r = 0; r < workers; ++r) procs.push_back(SpawnWorker(coordinator, r, worker_security));
  bool ok = true;
  for (auto& p : procs) {
    int status = 0;
    if (p.pid == 0 || waitpid(p.pid, &status, 0) != p.pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      ok = false;
    }
  }
  const int scrapes = scraper == nullptr ? 0 : scraper->scraped();
  scraper.reset();
  if (!ok) {
    std::fprintf(stderr, "a worker failed\n");
    return {};
  }
  std::map<std::string, std::vector<double>> latencies;
  std::map<std::string, double> rate;  // keys per second, summed over workers
  const int k = absl::GetFlag(FLAGS_keys);
  const int dim = absl::GetFlag(FLAGS_dim);
  const int iters = absl::GetFlag(FLAGS_iters);
  for (auto& p : procs) {
    std::ifstream in(p.out_path);
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (parts.size() < 2) continue;
      double seconds = 0;
      if (!absl::SimpleAtod(parts[1], &seconds) || seconds <= 0) continue;
      rate[parts[0]] += static_cast<double>(k) * iters / seconds;
      for (size_t i = 2; i < parts.size(); ++i) {
        double ms = 0;
        if (absl::SimpleAtod(parts[i], &ms)) latencies[parts[0]].push_back(ms);
      }
    }
    std::remove(p.out_path.c_str());
  }
  for (const char* op : {"pull", "push"}) {
    const double keys_per_s = rate[op];
    absl::PrintF(
        "{\"op\":\"%s\",\"servers\":%d,\"workers\":%d,\"keys\":%d,\"dim\":%d,\"optimizer\":\"%s\","
        "\"handler\":\"%s\",\"inflight\":%d,\"iters\":%d,\"mkeys_per_s\":%.3f,\"value_mb_per_s\":%."
        "1f,"
        "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"replication_factor\":%d,\"replication_mode\":\"%s\","
        "\"metrics\":\"%s\",\"scrapes\":%d,\"security\":\"%s\",\"lookup_threads\":%d,"
        "\"send_threads\":%d,\"shared_memory\":%s,\"shared_memory_calls\":%s}\n",
        op, servers, workers, k, dim, absl::GetFlag(FLAGS_optimizer),
        absl::GetFlag(FLAGS_empty_handler) ? "empty" : "store", absl::GetFlag(FLAGS_inflight),
        iters, keys_per_s / 1e6, keys_per_s * dim * sizeof(float) / 1e6,
        testing::Percentile(latencies[op], 0.5), testing::Percentile(latencies[op], 0.99),
        absl::GetFlag(FLAGS_replication_factor),
        absl::GetFlag(FLAGS_replication_factor) > 1 ? absl::GetFlag(FLAGS_replication_mode)
                                                    : std::string("none"),
        metrics ? "on" : "off", scrapes, secure ? "mtls+tokens" : "plaintext",
        absl::GetFlag(FLAGS_lookup_threads), absl::GetFlag(FLAGS_send_threads),
        absl::GetFlag(FLAGS_shared_memory) ? "true" : "false",
        absl::GetFlag(FLAGS_shared_memory_calls) ? "true" : "false");
  }
  std::fflush(stdout);
  (void)(*cluster)->Terminate(absl::Seconds(10));
  std::remove(job.c_str());
  return rate;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

int RunThroughputs() {
  const std::string metrics = absl::GetFlag(FLAGS_metrics);
  const std::string security = absl::GetFlag(FLAGS_security);
  for (const auto& [flag, value] :
       {std::pair<const char*, std::string>{"metrics", metrics}, {"security", security}}) {
    if (value != "off" && value != "on" && value != "compare") {
      std::fprintf(stderr, "--%s must be off, on or compare, not %s\n", flag, value.c_str());
      return 2;
    }
  }
  if (metrics == "compare" && security == "compare") {
    std::fprintf(stderr, "compare one thing at a time: --metrics=compare or --security=compare\n");
    return 2;
  }
  if (metrics != "compare" && security != "compare") {
    return RunThroughput(metrics == "on", security == "on").empty() ? 1 : 0;
  }
  // Alternating, so that the machine's drift falls on both alike.
  const bool comparing_metrics = metrics == "compare";
  std::map<std::string, std::vector<double>> off, on;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const bool with : {false, true}) {
      const std::map<std::string, double> rate = comparing_metrics
                                                     ? RunThroughput(with, security == "on")
                                                     : RunThroughput(metrics == "on", with);
      if (rate.empty()) return 1;
      for (const auto& [op, keys_per_s] : rate) (with ? on : off)[op].push_back(keys_per_s);
    }
  }
  absl::PrintF(
      "{\"bench\":\"%s\",\"keys\":%d,\"rounds\":%d,\"pull_off_mkeys_per_s\":%.3f,"
      "\"pull_on_mkeys_per_s\":%.3f,\"pull_ratio\":%.3f,\"push_off_mkeys_per_s\":%.3f,"
      "\"push_on_mkeys_per_s\":%.3f,\"push_ratio\":%.3f}\n",
      comparing_metrics ? "metrics_overhead" : "security_overhead", absl::GetFlag(FLAGS_keys),
      absl::GetFlag(FLAGS_rounds), Median(off["pull"]) / 1e6, Median(on["pull"]) / 1e6,
      Median(on["pull"]) / Median(off["pull"]), Median(off["push"]) / 1e6, Median(on["push"]) / 1e6,
      Median(on["push"]) / Median(off["push"]));
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::TuneProcess();
  absl::ParseCommandLine(argc, argv);
  ps::g_self = ps::testing::SelfPath(argv[0]);
  if (absl::GetFlag(FLAGS_role) == "worker") return ps::RunWorker();
  // What its daemons and workers write goes into one folder, removed at the end.
  auto scratch = ps::testing::UseScopedTempDir("ps_bench");
  if (!scratch.ok()) {
    std::fprintf(stderr, "ps_bench: %s\n", scratch.status().ToString().c_str());
    return 1;
  }
  const ps::grpc_util::SecurityFiles internal = ps::grpc_util::SecurityFilesFromFlags();
  if (!internal.tls.cert_file.empty() || !internal.tls.key_file.empty() ||
      !internal.tls.ca_file.empty() || !internal.token_file.empty()) {
    std::fprintf(stderr,
                 "ps_bench: --tls_cert, --tls_key, --tls_ca and --token_file are its workers' "
                 "(internal); --security=on makes credentials for the whole cluster\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_memory)) return ps::RunMemory();
  return ps::RunThroughputs();
}

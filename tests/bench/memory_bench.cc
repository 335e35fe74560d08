// memory_bench: memory-bounded tables (issue 35) on a real ps_coordinator and one ps_server, a
// Zipf key stream pulled and pushed through the client library as a worker would, in batches.
//
// Runs, each on a fresh cluster, over the same stream (Zipf(--zipf) over --ids ids, --draws keys
// in batches of --batch, deduplicated by the client as any batch is):
//   unbounded   no budget, the table presized for the stream (capacity_hint): the reference
//               rates and latencies, the distinct keys D
//   resident10  a budget that holds D/10 rows: hit rate, pull and push rates against unbounded,
//               pull p99/p50 while evicting, peak RSS over the budget
//   resident5   a budget that holds D/20 rows: peak RSS over the budget, pull p99/p50
//   tier10      resident10's budget (plus the tier's own memory) with a disk tier
//               (--tier_dir): the RAM hit rate (re-referenced pulls whose row was in memory,
//               not promoted from the tier), the share of them answered with their row (not
//               the initial one), pull and push rates against unbounded, peak RSS over the
//               budget, pull p99/p50
//   admission   min_count 2, no budget: which keys got a row (a pull answering a row other than
//               the initial one: every push changes a row)
//   auc         the quickstart's model (1 server, 1 worker) trained on long-tail data
//               (ps_datagen --long_tail) without a budget, then with admission (min_count 2),
//               eviction (--policy) and a budget holding a quarter of the rows the unbounded
//               run's table held: the held-out AUCs and their difference
//   rows        --rows rows loaded into a table presized for them (capacity_hint), for FP32
//               adagrad, FP32 rowwise_adagrad and FP16 rowwise_adagrad: the table's bytes per row
//               (index, rows, state) and the server's resident set's growth per row
// The budget of a run is (the resident set of a server whose table is not presized, before any
// row + the rows it must hold x the bytes a row costs under a cap, TableShard::BytesPerRow) / 0.9
// (the keeper's reserve).
//
// A "hit" is a pull of a key pushed before whose row is not its initial one (it stayed resident);
// keys pulled for the first time are not counted (every server misses them).
//
// One JSON line per figure: {"bench":"memory","figure":NAME,"value":V,...}.
//
//   bazel run -c opt //tests/bench:memory_bench -- [--ids=4000000] [--draws=4000000]
#include <fcntl.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/ps_client.h"
#include "common/job_config.h"
#include "common/process_tuning.h"
#include "server/storage/embedding_table.h"
#include "server/storage/row_tier.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/measure.h"
#include "tests/testing/runfiles.h"
#include "tests/testing/server_status.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/zipf_sampler.h"

ABSL_FLAG(uint64_t, ids, 4000000, "the Zipf law's range of ids");
ABSL_FLAG(uint64_t, draws, 4000000, "keys in the stream");
ABSL_FLAG(double, zipf, 1.05, "the Zipf exponent");
ABSL_FLAG(int, batch, 4096, "keys per pull and push");
ABSL_FLAG(int, dim, 16, "floats per row");
ABSL_FLAG(uint64_t, rows, 1000000, "the rows run: rows loaded");
ABSL_FLAG(std::string, policy, "LRU", "the bounded runs' eviction policy: LRU or LFU");
ABSL_FLAG(int64_t, auc_rows, 500000, "the auc run: training rows (held-out: a tenth)");
ABSL_FLAG(int, auc_epochs, 1, "the auc run: epochs");
ABSL_FLAG(std::string, job, "", "the auc run's job (default deploy/jobs/quickstart.pbtxt)");
ABSL_FLAG(std::string, runs, "unbounded,resident10,resident5,tier10,admission,rows,auc",
          "which runs, comma-separated (unbounded is needed by the bounded ones)");
ABSL_FLAG(std::string, bin_dir, "", "folder holding server/ and server/coordinator/ binaries");

namespace ps {
namespace {

std::string g_self;

// Ids are ranks times this odd constant, spread over the id space; kRankOfId is its inverse
// modulo 2^64, so that rank = id * kRankOfId.
constexpr uint64_t kIdOfRank = 0x9E3779B97F4A7C15ull;
constexpr uint64_t Inverse(uint64_t a) {
  uint64_t x = a;  // correct to 3 bits; each step doubles them
  for (int i = 0; i < 6; ++i) x *= 2 - a * x;
  return x;
}
constexpr uint64_t kRankOfId = Inverse(kIdOfRank);
static_assert(kIdOfRank * kRankOfId == 1, "inverse");

struct RunConfig {
  std::string name;
  int64_t budget_mb = 0;  // 0: none
  std::string optimizer = "adagrad";
  uint32_t min_count = 0;  // 0: no admission
  uint64_t load_rows = 0;  // > 0: load that many rows instead of the stream
  std::string value_type = "FP32";
  uint64_t capacity_hint = 0;  // the table's capacity_hint (load_rows sets it too)
  bool tier = false;           // a disk tier beside the budget
};

std::string JobText(const RunConfig& run) {
  std::string bounds;
  if (run.min_count > 0) {
    // The sketch remembers the whole stream: no aging during it.
    bounds = absl::StrFormat("admission { min_count: %d sketch_ids: %d }", run.min_count,
                             2 * absl::GetFlag(FLAGS_draws));
  }
  if (run.budget_mb > 0) {
    absl::StrAppend(&bounds, " eviction { policy: ", absl::GetFlag(FLAGS_policy), " }");
  }
  if (run.load_rows > 0 || run.capacity_hint > 0) {
    absl::StrAppend(&bounds, " capacity_hint: ", std::max(run.load_rows, run.capacity_hint));
  }
  absl::StrAppend(&bounds, " value_type: ", run.value_type);
  return absl::StrFormat(
      R"pb(
        name: "memory_bench"
        tables {
          name: "t"
          dim: %d
          initializer { kind: UNIFORM low: -0.01 high: 0.01 }
          optimizer { type: "%s" learning_rate: 0.01 } %s
        }
        training { mode: ASYNC seed: 3 }
        cluster { num_shards: 16 num_servers: 1 num_workers: 1 max_message_bytes: 268435456 }
      )pb",
      absl::GetFlag(FLAGS_dim), run.optimizer, bounds);
}

// What one run measured.
struct RunResult {
  double pull_keys_per_s = 0;
  double push_keys_per_s = 0;
  double pull_p50_ms = 0;
  double pull_p99_ms = 0;
  uint64_t distinct = 0;
  uint64_t rereferences = 0;
  uint64_t hits = 0;
  uint64_t rss_before = 0;
  uint64_t peak_rss = 0;
  uint64_t rows = 0;
  uint64_t bytes = 0;
  uint64_t max_rows_per_copy = 0;
  uint64_t evicted = 0;
  uint64_t promoted = 0;  // rows read back from the tier
  uint64_t demoted = 0;
  uint64_t tier_rows = 0;
  // The Zipf rank of every re-referenced key's pull (for the oracle's hit rate).
  std::vector<uint64_t> reference_ranks;
  // Admission: keys seen once / at least twice, and how many of each got a row.
  uint64_t seen_once = 0, once_with_row = 0, seen_twice = 0, twice_with_row = 0;
};

absl::StatusOr<RunResult> Run(const RunConfig& run) {
  const std::string job_path = absl::StrCat(testing::TempDir(), "/", run.name, ".pbtxt");
  std::ofstream(job_path) << JobText(run);
  testing::LocalClusterOptions options;
  options.bin_dir =
      testing::FindBinDir(absl::GetFlag(FLAGS_bin_dir), g_self, "server/ps_server", "bazel-bin");
  options.servers = 1;
  if (run.budget_mb > 0) {
    options.server_args = {absl::StrCat("--memory_budget_mb=", run.budget_mb)};
  }
  if (run.tier) {
    options.server_args.push_back(
        absl::StrCat("--tier_dir=", testing::TempDir(), "/", run.name, "_tier"));
    options.server_args.push_back("--tier_max_disk_gb=8");
  }
  auto cluster = testing::LocalCluster::Start(job_path, options);
  if (!cluster.ok()) return cluster.status();
  const testing::Daemon& server = *(*cluster)->servers()[0];
  ClientOptions client_options;
  client_options.coordinator = (*cluster)->coordinator().address();
  auto client = Client::Connect(client_options);
  if (!client.ok()) return client.status();

  const absl::StatusOr<config::Job> job = ParseJob(JobText(run), run.name);
  if (!job.ok()) return job.status();
  auto spec = server::TableSpec::Create(job->tables(0), job->training().seed());
  if (!spec.ok()) return spec.status();
  const int dim = absl::GetFlag(FLAGS_dim);

  RunResult result;
  result.rss_before = testing::ResidentBytesOf(server.pid());
  // The server's resident set, sampled while the stream runs.
  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak{result.rss_before};
  std::thread sampler([&] {
    while (!done.load()) {
      peak.store(std::max(peak.load(), testing::ResidentBytesOf(server.pid())));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a sampling period
    }
  });

  if (run.load_rows > 0) {
    // Rows created by pulls of new keys, in large requests.
    std::vector<uint64_t> keys;
    std::vector<float> rows;
    for (uint64_t first = 0; first < run.load_rows; first += 65536) {
      keys.clear();
      for (uint64_t k = first; k < std::min(run.load_rows, first + 65536); ++k) {
        keys.push_back(k * kIdOfRank);
      }
      rows.resize(keys.size() * dim);
      const absl::Status s = (*client)->Pull("t", keys, absl::MakeSpan(rows));
      if (!s.ok()) return s;
    }
    done.store(true);
    sampler.join();
    result.peak_rss = testing::ResidentBytesOf(server.pid());
    absl::StatusOr<rpc::ServerStatus> status = testing::ServerStatusOf(server);
    if (!status.ok()) return status.status();
    result.rows = status->tables(0).rows();
    result.bytes = status->tables(0).bytes();
    client->reset();
    (void)(*cluster)->Terminate(absl::Seconds(30));
    return result;
  }

  auto zipf = worker::ZipfSampler::Create(absl::GetFlag(FLAGS_ids), absl::GetFlag(FLAGS_zipf));
  if (!zipf.ok()) return zipf.status();
  std::mt19937_64 rng(11);
  const uint64_t draws = absl::GetFlag(FLAGS_draws);
  const size_t batch = absl::GetFlag(FLAGS_batch);
  // Pushes of each key so far (one a batch it is in).
  absl::flat_hash_map<uint64_t, uint32_t> pushes;
  std::vector<uint64_t> keys;
  std::vector<float> rows, initial(dim), grads;
  std::vector<double> pull_ms;
  double pull_s = 0, push_s = 0;
  uint64_t pulled = 0;
  for (uint64_t drawn = 0; drawn < draws;) {
    keys.clear();
    absl::flat_hash_map<uint64_t, bool> in_batch;
    for (; keys.size() < batch && drawn < draws; ++drawn) {
      // Ranks spread over the id space, as real ids are.
      const uint64_t id = zipf->Draw(rng) * kIdOfRank;
      if (in_batch.emplace(id, true).second) keys.push_back(id);
    }
    rows.resize(keys.size() * dim);
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = (*client)->Pull("t", keys, absl::MakeSpan(rows));
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) return s;
    pull_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    pull_s += std::chrono::duration<double>(t1 - t0).count();
    pulled += keys.size();
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto it = pushes.find(keys[i]);
      if (it == pushes.end()) continue;
      ++result.rereferences;
      result.reference_ranks.push_back(keys[i] * kRankOfId);
      (*spec)->initializer->Fill(keys[i], dim, initial.data());
      result.hits += std::memcmp(rows.data() + i * dim, initial.data(), dim * sizeof(float)) != 0;
    }
    grads.assign(keys.size() * dim, 0.01f);
    const auto t2 = std::chrono::steady_clock::now();
    s = (*client)->Push("t", keys, grads);
    const auto t3 = std::chrono::steady_clock::now();
    if (!s.ok()) return s;
    push_s += std::chrono::duration<double>(t3 - t2).count();
    for (const uint64_t key : keys) ++pushes[key];
  }
  done.store(true);
  sampler.join();
  result.peak_rss = std::max(peak.load(), testing::ResidentBytesOf(server.pid()));
  result.distinct = pushes.size();
  result.pull_keys_per_s = pulled / pull_s;
  result.push_keys_per_s = pulled / push_s;
  // Latencies once the tables are full (the second half of the stream).
  pull_ms.erase(pull_ms.begin(), pull_ms.begin() + pull_ms.size() / 2);
  result.pull_p50_ms = testing::Percentile(pull_ms, 0.5);
  result.pull_p99_ms = testing::Percentile(pull_ms, 0.99);

  if (run.min_count > 0) {
    // Which keys have a row: a pull answers other than the initial row.
    std::vector<uint64_t> all;
    all.reserve(pushes.size());
    for (const auto& [key, count] : pushes) all.push_back(key);
    for (size_t first = 0; first < all.size(); first += 65536) {
      keys.assign(all.begin() + first, all.begin() + std::min(all.size(), first + 65536));
      rows.resize(keys.size() * dim);
      const absl::Status s = (*client)->Pull("t", keys, absl::MakeSpan(rows));
      if (!s.ok()) return s;
      for (size_t i = 0; i < keys.size(); ++i) {
        (*spec)->initializer->Fill(keys[i], dim, initial.data());
        const bool row =
            std::memcmp(rows.data() + i * dim, initial.data(), dim * sizeof(float)) != 0;
        if (pushes[keys[i]] == 1) {
          ++result.seen_once;
          result.once_with_row += row;
        } else {
          ++result.seen_twice;
          result.twice_with_row += row;
        }
      }
    }
  }

  absl::StatusOr<rpc::ServerStatus> status = testing::ServerStatusOf(server);
  if (!status.ok()) return status.status();
  const rpc::TableStatus& table = status->tables(0);
  result.rows = table.rows();
  result.bytes = table.bytes();
  result.max_rows_per_copy = table.max_rows_per_copy();
  result.evicted = table.evicted_budget() + table.evicted_ttl();
  result.promoted = table.promoted();
  result.demoted = table.demoted();
  result.tier_rows = table.tier_rows();
  client->reset();
  (void)(*cluster)->Terminate(absl::Seconds(30));
  return result;
}

// The auc run's training: the quickstart's job on `train`, with `bounds` added to every table
// and --memory_budget_mb=`budget_mb` (0: none). Worker 0's RESULT line, the table's bytes at the
// end and the server's resident set before training.
struct Training {
  std::string result;
  uint64_t table_bytes = 0;
  uint64_t table_rows = 0;
  uint64_t rss_before = 0;
  uint64_t peak_rss = 0;
  uint64_t evicted = 0;
  uint64_t refused = 0;
};

absl::StatusOr<Training> Train(const std::string& train, const std::string& heldout,
                               const std::string& bounds, int64_t budget_mb) {
  const std::string job_file = testing::FindWorkspaceFile(
      absl::GetFlag(FLAGS_job), g_self, "worker/ps_worker", "deploy/jobs/quickstart.pbtxt");
  absl::StatusOr<config::Job> job = testing::LoadJobOnData(job_file, train, heldout, 1, 1);
  if (!job.ok()) return job.status();
  job->mutable_training()->clear_steps();
  job->mutable_training()->set_epochs(absl::GetFlag(FLAGS_auc_epochs));
  for (config::Table& table : *job->mutable_tables()) {
    if (!bounds.empty()) {
      config::Table extra;
      if (!google::protobuf::TextFormat::ParseFromString(bounds, &extra)) {
        return absl::InvalidArgumentError("bad bounds " + bounds);
      }
      table.MergeFrom(extra);
    }
  }
  const std::string path = absl::StrCat(testing::TempDir(), "/auc_job.pbtxt");
  absl::Status written = testing::WriteJobFile(*job, path);
  if (!written.ok()) return written;
  testing::LocalClusterOptions options;
  options.bin_dir =
      testing::FindBinDir(absl::GetFlag(FLAGS_bin_dir), g_self, "server/ps_server", "bazel-bin");
  options.servers = 1;
  if (budget_mb > 0) options.server_args = {absl::StrCat("--memory_budget_mb=", budget_mb)};
  auto cluster = testing::LocalCluster::Start(path, options);
  if (!cluster.ok()) return cluster.status();
  const testing::Daemon& server = *(*cluster)->servers()[0];
  Training out;
  out.rss_before = testing::ResidentBytesOf(server.pid());
  auto workers = (*cluster)->RunWorkers({{}}, absl::Minutes(20));
  if (!workers.ok()) return workers.status();
  out.result = testing::ResultJson((*workers)[0].stdout_text);
  absl::StatusOr<rpc::ServerStatus> status = testing::ServerStatusOf(server);
  if (!status.ok()) return status.status();
  out.table_bytes = status->tables(0).bytes();
  out.table_rows = status->tables(0).rows();
  out.peak_rss = std::max(status->peak_resident_bytes(), testing::ResidentBytesOf(server.pid()));
  out.evicted = status->tables(0).evicted_budget() + status->tables(0).evicted_ttl();
  out.refused = status->tables(0).admission_refused();
  (void)(*cluster)->Terminate(absl::Seconds(30));
  return out;
}

void Print(const std::string& figure, double value, const std::string& more);

int RunAuc() {
  const std::string train = absl::StrCat(testing::TempDir(), "/train.tsv");
  const std::string heldout = absl::StrCat(testing::TempDir(), "/heldout.tsv");
  testing::DatagenOptions data;
  data.bin_dir =
      testing::FindBinDir(absl::GetFlag(FLAGS_bin_dir), g_self, "server/ps_server", "bazel-bin");
  data.train_path = train;
  data.heldout_path = heldout;
  data.rows = absl::GetFlag(FLAGS_auc_rows);
  data.cardinalities = "";
  data.extra_args = {"--long_tail"};
  absl::StatusOr<std::string> teacher = testing::RunDatagen(data, absl::Minutes(10));
  if (!teacher.ok()) {
    std::fprintf(stderr, "memory_bench: ps_datagen: %s\n", teacher.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<Training> unbounded = Train(train, heldout, "", 0);
  if (!unbounded.ok()) {
    std::fprintf(stderr, "memory_bench: auc: %s\n", unbounded.status().ToString().c_str());
    return 1;
  }
  // A quarter of the unbounded table's bytes, on top of what the server held before training.
  const int64_t budget_mb = static_cast<int64_t>(
      (unbounded->rss_before + unbounded->table_bytes / 4.0) / 0.9 / (1 << 20) + 1);
  // With admission and eviction, and with eviction alone (the budget decides everything).
  for (const bool admission : {true, false}) {
    const std::string bounds =
        absl::StrCat(admission ? "admission { min_count: 2 } " : "",
                     "eviction { policy: ", absl::GetFlag(FLAGS_policy), " }");
    absl::StatusOr<Training> bounded = Train(train, heldout, bounds, budget_mb);
    if (!bounded.ok()) {
      std::fprintf(stderr, "memory_bench: auc: %s\n", bounded.status().ToString().c_str());
      return 1;
    }
    const double auc = testing::JsonField(unbounded->result, "heldout_auc");
    const double bounded_auc = testing::JsonField(bounded->result, "heldout_auc");
    Print("heldout_auc_delta", bounded_auc - auc,
          absl::StrFormat(
              ",\"unbounded_auc\":%.5f,\"bounded_auc\":%.5f,\"teacher_auc\":%.5f,"
              "\"budget_mb\":%d,\"unbounded_rows\":%d,\"unbounded_table_mb\":%.1f,"
              "\"bounded_rows\":%d,\"bounded_peak_rss_mb\":%.1f,\"evicted\":%d,"
              "\"admission_refused\":%d,\"config\":\"%s\",\"policy\":\"%s\",\"train_rows\":%d,"
              "\"epochs\":%d,"
              "\"unbounded_samples_per_s\":%.0f,\"bounded_samples_per_s\":%.0f",
              auc, bounded_auc, testing::JsonField(*teacher, "teacher_auc"), budget_mb,
              unbounded->table_rows, unbounded->table_bytes / 1048576.0, bounded->table_rows,
              bounded->peak_rss / 1048576.0, bounded->evicted, bounded->refused,
              admission ? "admission+eviction" : "eviction", absl::GetFlag(FLAGS_policy),
              absl::GetFlag(FLAGS_auc_rows), absl::GetFlag(FLAGS_auc_epochs),
              testing::JsonField(unbounded->result, "samples_per_s"),
              testing::JsonField(bounded->result, "samples_per_s")));
  }
  return 0;
}

void Print(const std::string& figure, double value, const std::string& more) {
  absl::PrintF("{\"bench\":\"memory\",\"figure\":\"%s\",\"value\":%.4f%s}\n", figure, value, more);
  std::fflush(stdout);
}

// The pull and push rates of `r` against `unbounded`'s, with `extra` fields.
void PrintRates(const RunResult& r, const RunResult& unbounded, const std::string& extra) {
  Print("pull_ratio_vs_unbounded", r.pull_keys_per_s / unbounded.pull_keys_per_s,
        absl::StrFormat(",\"keys_per_s\":%.0f,\"unbounded_keys_per_s\":%.0f%s", r.pull_keys_per_s,
                        unbounded.pull_keys_per_s, extra));
  Print("push_ratio_vs_unbounded", r.push_keys_per_s / unbounded.push_keys_per_s,
        absl::StrFormat(",\"keys_per_s\":%.0f,\"unbounded_keys_per_s\":%.0f%s", r.push_keys_per_s,
                        unbounded.push_keys_per_s, extra));
}

int Main() {
  const std::vector<std::string> runs = absl::StrSplit(absl::GetFlag(FLAGS_runs), ',');
  const auto wants = [&runs](const std::string& name) {
    return std::find(runs.begin(), runs.end(), name) != runs.end();
  };
  const std::string stream = absl::StrFormat(
      ",\"ids\":%d,\"draws\":%d,\"zipf\":%.2f,\"batch\":%d,\"dim\":%d", absl::GetFlag(FLAGS_ids),
      absl::GetFlag(FLAGS_draws), absl::GetFlag(FLAGS_zipf), absl::GetFlag(FLAGS_batch),
      absl::GetFlag(FLAGS_dim));
  RunResult unbounded;
  if (wants("unbounded") || wants("resident10") || wants("resident5") || wants("tier10")) {
    // Presized for the stream's distinct keys, so that its indexes do not grow while it runs
    // (a growing index stalls a shard's requests: not what is compared here).
    auto zipf = worker::ZipfSampler::Create(absl::GetFlag(FLAGS_ids), absl::GetFlag(FLAGS_zipf));
    if (!zipf.ok()) return 1;
    RunConfig config{"unbounded"};
    config.capacity_hint =
        static_cast<uint64_t>(1.05 * zipf->ExpectedDistinct(absl::GetFlag(FLAGS_draws)));
    absl::StatusOr<RunResult> r = Run(config);
    if (!r.ok()) {
      std::fprintf(stderr, "memory_bench: unbounded: %s\n", r.status().ToString().c_str());
      return 1;
    }
    unbounded = *r;
    Print("unbounded_pull_p99_over_p50", unbounded.pull_p99_ms / unbounded.pull_p50_ms,
          absl::StrFormat(",\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"keys_per_s\":%.0f,\"distinct\":%d,"
                          "\"rss_before_mb\":%.1f%s",
                          unbounded.pull_p50_ms, unbounded.pull_p99_ms, unbounded.pull_keys_per_s,
                          unbounded.distinct, unbounded.rss_before / 1048576.0, stream));
  }
  // What a row costs under a cap (the index at its largest load, the row and its state).
  config::Table table;
  table.set_name("t");
  table.set_dim(absl::GetFlag(FLAGS_dim));
  table.mutable_optimizer()->set_type("adagrad");
  auto spec = server::TableSpec::Create(table, 1);
  if (!spec.ok()) return 1;
  const double bytes_per_row = server::TableShard::BytesPerRow(**spec);
  // What a server holds before any row, with a table that is not presized (the unbounded run's
  // index is allocated at its start).
  uint64_t baseline = 0;
  if (wants("resident10") || wants("resident5") || wants("tier10")) {
    absl::StatusOr<RunResult> empty = Run({"baseline", 0, "adagrad", 0, /*load_rows=*/1});
    if (!empty.ok()) {
      std::fprintf(stderr, "memory_bench: baseline: %s\n", empty.status().ToString().c_str());
      return 1;
    }
    baseline = empty->rss_before;
  }
  // The budget whose table holds `share` of the stream's distinct keys, with `other_bytes` of
  // the server's besides (the keeper keeps back its 10% reserve on top).
  const auto budget_for = [&](double share, double other_bytes) {
    const double rows = unbounded.distinct * share;
    return static_cast<int64_t>((baseline + other_bytes + rows * bytes_per_row) / 0.9 / (1 << 20) +
                                1);
  };
  for (const auto& [name, share] : {std::pair<std::string, double>{"resident10", 0.10},
                                    std::pair<std::string, double>{"resident5", 0.05}}) {
    if (!wants(name)) continue;
    // The cap; the sweeper keeps the table at 90-98% of it.
    const int64_t budget_mb = budget_for(share, 0);
    absl::StatusOr<RunResult> r = Run({name, budget_mb});
    const std::string policy = absl::GetFlag(FLAGS_policy);
    if (!r.ok()) {
      std::fprintf(stderr, "memory_bench: %s: %s\n", name.c_str(), r.status().ToString().c_str());
      return 1;
    }
    const std::string run = absl::StrFormat(
        ",\"run\":\"%s\",\"policy\":\"%s\",\"baseline_mb\":%.1f,\"budget_mb\":%d,\"resident_rows\":"
        "%d,\"distinct\":%d,"
        "\"distinct_over_resident\":%.1f,\"evicted\":%d%s",
        name, policy, baseline / 1048576.0, budget_mb, r->rows, r->distinct,
        static_cast<double>(r->distinct) / std::max<uint64_t>(1, r->rows), r->evicted, stream);
    Print("peak_rss_over_budget", static_cast<double>(r->peak_rss) / (budget_mb << 20),
          absl::StrFormat(",\"peak_rss_mb\":%.1f%s", r->peak_rss / 1048576.0, run));
    Print(
        "pull_p99_over_p50_during_eviction", r->pull_p99_ms / r->pull_p50_ms,
        absl::StrFormat(",\"p50_ms\":%.3f,\"p99_ms\":%.3f%s", r->pull_p50_ms, r->pull_p99_ms, run));
    if (name == "resident10") {
      // The oracle keeps the resident_rows most probable ids for the whole stream.
      uint64_t oracle_hits = 0;
      for (const uint64_t rank : r->reference_ranks) oracle_hits += rank <= r->rows;
      Print("ram_hit_rate", static_cast<double>(r->hits) / std::max<uint64_t>(1, r->rereferences),
            absl::StrFormat(
                ",\"tier\":false,\"rereferences\":%d,\"oracle_hit_rate\":%.4f,"
                "\"unbounded_hit_rate\":%.4f%s",
                r->rereferences,
                static_cast<double>(oracle_hits) / std::max<uint64_t>(1, r->rereferences),
                static_cast<double>(unbounded.hits) / std::max<uint64_t>(1, unbounded.rereferences),
                run));
      PrintRates(*r, unbounded, ",\"tier\":false" + run);
    }
  }
  if (wants("tier10")) {
    // resident10's table, and the tier's memory on top (the keeper keeps it back).
    const int64_t budget_mb =
        budget_for(0.10, server::RowTier::MemoryBytesFor(server::RowTier::Options()));
    RunConfig config{"tier10", budget_mb};
    config.tier = true;
    absl::StatusOr<RunResult> r = Run(config);
    if (!r.ok()) {
      std::fprintf(stderr, "memory_bench: tier10: %s\n", r.status().ToString().c_str());
      return 1;
    }
    const std::string run = absl::StrFormat(
        ",\"run\":\"tier10\",\"tier\":true,\"policy\":\"%s\",\"baseline_mb\":%.1f,"
        "\"budget_mb\":%d,\"resident_rows\":%d,\"tier_rows\":%d,\"demoted\":%d,"
        "\"promoted\":%d,\"distinct\":%d,\"evicted\":%d%s",
        absl::GetFlag(FLAGS_policy), baseline / 1048576.0, budget_mb, r->rows, r->tier_rows,
        r->demoted, r->promoted, r->distinct, r->evicted, stream);
    // Every re-referenced pull's row was in memory or came back from the tier: the promotions
    // (pulls' and pushes', which follow their pulls) are the misses.
    const double rereferences = static_cast<double>(std::max<uint64_t>(1, r->rereferences));
    Print("ram_hit_rate", 1.0 - std::min(1.0, r->promoted / rereferences),
          absl::StrFormat(",\"rereferences\":%d%s", r->rereferences, run));
    Print("tier_row_hit_rate", r->hits / rereferences,
          absl::StrFormat(",\"rereferences\":%d%s", r->rereferences, run));
    PrintRates(*r, unbounded, run);
    Print("peak_rss_over_budget", static_cast<double>(r->peak_rss) / (budget_mb << 20),
          absl::StrFormat(",\"peak_rss_mb\":%.1f%s", r->peak_rss / 1048576.0, run));
    Print(
        "pull_p99_over_p50_during_eviction", r->pull_p99_ms / r->pull_p50_ms,
        absl::StrFormat(",\"p50_ms\":%.3f,\"p99_ms\":%.3f%s", r->pull_p50_ms, r->pull_p99_ms, run));
  }
  if (wants("admission")) {
    absl::StatusOr<RunResult> r = Run({"admission", 0, "adagrad", 2});
    if (!r.ok()) {
      std::fprintf(stderr, "memory_bench: admission: %s\n", r.status().ToString().c_str());
      return 1;
    }
    const std::string run =
        absl::StrFormat(",\"min_count\":2,\"seen_once\":%d,\"seen_twice_or_more\":%d,\"rows\":%d%s",
                        r->seen_once, r->seen_twice, r->rows, stream);
    Print("admission_reject_once",
          1.0 - static_cast<double>(r->once_with_row) / std::max<uint64_t>(1, r->seen_once), run);
    Print("admission_admit_frequent",
          static_cast<double>(r->twice_with_row) / std::max<uint64_t>(1, r->seen_twice), run);
  }
  if (wants("auc") && RunAuc() != 0) return 1;
  if (wants("rows")) {
    for (const auto& [optimizer, value_type] :
         {std::pair<std::string, std::string>{"adagrad", "FP32"},
          std::pair<std::string, std::string>{"rowwise_adagrad", "FP32"},
          std::pair<std::string, std::string>{"rowwise_adagrad", "FP16"}}) {
      absl::StatusOr<RunResult> r =
          Run({"rows_" + optimizer, 0, optimizer, 0, absl::GetFlag(FLAGS_rows), value_type});
      if (!r.ok()) {
        std::fprintf(stderr, "memory_bench: rows: %s\n", r.status().ToString().c_str());
        return 1;
      }
      Print("bytes_per_resident_row", static_cast<double>(r->bytes) / r->rows,
            absl::StrFormat(",\"config\":\"%s_%s\",\"rows\":%d,\"rss_growth_per_row\":%.1f,"
                            "\"dim\":%d",
                            absl::AsciiStrToLower(value_type), optimizer, r->rows,
                            static_cast<double>(r->peak_rss - r->rss_before) / r->rows,
                            absl::GetFlag(FLAGS_dim)));
    }
  }
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::TuneProcess();
  absl::ParseCommandLine(argc, argv);
  ps::g_self = ps::testing::SelfPath(argv[0]);
  auto scratch = ps::testing::UseScopedTempDir("memory_bench");
  if (!scratch.ok()) {
    std::fprintf(stderr, "memory_bench: %s\n", scratch.status().ToString().c_str());
    return 1;
  }
  return ps::Main();
}

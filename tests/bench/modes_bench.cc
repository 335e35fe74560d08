// modes_bench: what a straggler costs each consistency mode. The quickstart model
// (deploy/jobs/quickstart.pbtxt) is trained by a real cluster on loopback: a ps_coordinator,
// --servers ps_server and --workers ps_worker processes, one of which (--straggler_rank) runs at
// 1 / --slowdown of its speed (ps_worker --slowdown). The same job and data are trained once per
// mode in --modes:
//   sync               every step waits for every worker;
//   sync_quorum        sync with --sync_quorum and --sync_timeout_ms (late pushes are dropped);
//   bounded_staleness  with --staleness;
//   async.
// Prints one JSON line per mode:
//   {"bench":"modes","mode":"bounded_staleness","staleness":4,"sync_quorum":1,...,
//    "samples_per_s":...,"wall_s":...,"heldout_auc":...,"throughput_vs_sync":...}
// samples_per_s is rank 0's figure (the samples of every worker over rank 0's training time),
// wall_s the time from starting the workers to the last one's exit (start-up, the count of the
// samples and the held-out evaluation included), throughput_vs_sync the ratio of samples_per_s to
// sync's in this run (null when sync did not run first).
//
// The dense part: with dense_sync_every = 1 the workers AllReduce their dense gradients every
// step, which makes every mode wait for the straggler every step, and the modes would differ only
// in how they treat the embeddings. --dense_sync_every (default 8, the same for every mode) has
// them average the dense parameters every 8 steps instead (local SGD), so between averagings the
// fast workers go at their own pace as far as the mode lets them.
//
//   bazel build -c opt //tests/bench:modes_bench
//   bazel-out/k8-opt/bin/tests/bench/modes_bench [--rows=600000] [--modes=sync,async]
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "proto/job.pb.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/runfiles.h"
#include "tests/testing/temp_dir.h"

ABSL_FLAG(int64_t, rows, 600000, "training rows ps_datagen writes");
ABSL_FLAG(int64_t, heldout_rows, -1, "held-out rows ps_datagen writes (-1: rows / 10)");
ABSL_FLAG(std::string, cardinalities, "1000", "ps_datagen --cardinalities");
ABSL_FLAG(int, servers, 2, "server processes");
ABSL_FLAG(int, workers, 3, "worker processes");
ABSL_FLAG(int, straggler_rank, -1,
          "the rank that runs slowed down (-1: the last; rank 0 evaluates and reports)");
ABSL_FLAG(double, slowdown, 2.0, "the straggler's ps_worker --slowdown (2: half speed)");
ABSL_FLAG(std::string, modes, "sync,sync_quorum,bounded_staleness,async",
          "comma-separated modes to run, in order: sync, sync_quorum, bounded_staleness, async");
ABSL_FLAG(int, staleness, 4, "bounded_staleness: training.staleness");
ABSL_FLAG(double, sync_quorum, 0.67, "sync_quorum: training.sync_quorum");
ABSL_FLAG(int, sync_timeout_ms, 200, "sync_quorum: training.sync_timeout_ms");
ABSL_FLAG(int, dense_sync_every, 8, "training.dense_sync_every, the same for every mode");
ABSL_FLAG(bool, balance_batches, true,
          "training.balance_batches (bounded staleness and async split each step's samples by "
          "the workers' speed)");
ABSL_FLAG(std::string, job, "", "the job to train (default: deploy/jobs/quickstart.pbtxt)");
ABSL_FLAG(std::string, bin_dir, "",
          "folder holding server/, server/coordinator/, worker/ and worker/tools/ binaries");
ABSL_FLAG(int, timeout_s, 1800, "how long one mode may take");
ABSL_FLAG(int, progress_s, 60,
          "ps_worker --progress_s; with --worker_logs, the workers' progress lines are shown");
ABSL_FLAG(bool, worker_logs, false, "copy every worker's stderr to stderr after each mode");

namespace ps {
namespace {

using testing::JsonField;
using testing::JsonNumber;

std::string g_self;  // this binary's path

// Where the project's binaries and data files are: this binary's runfiles under `bazel run` or
// when run from bazel-bin, else the workspace (binaries under bazel-bin/).
std::string BinDir() {
  return testing::FindBinDir(absl::GetFlag(FLAGS_bin_dir), g_self, "worker/ps_worker", "bazel-bin");
}

std::string JobPath() {
  return testing::FindWorkspaceFile(absl::GetFlag(FLAGS_job), g_self, "worker/ps_worker",
                                    "deploy/jobs/quickstart.pbtxt");
}

// One mode's settings.
struct Mode {
  std::string name;
  config::Training::Mode mode = config::Training::SYNC;
  int staleness = 0;
  double sync_quorum = 1.0;
  int sync_timeout_ms = 10000;
};

absl::StatusOr<Mode> ParseMode(const std::string& name) {
  Mode m;
  m.name = name;
  if (name == "sync") return m;
  if (name == "sync_quorum") {
    m.sync_quorum = absl::GetFlag(FLAGS_sync_quorum);
    m.sync_timeout_ms = absl::GetFlag(FLAGS_sync_timeout_ms);
    return m;
  }
  if (name == "bounded_staleness") {
    m.mode = config::Training::BOUNDED_STALENESS;
    m.staleness = absl::GetFlag(FLAGS_staleness);
    return m;
  }
  if (name == "async") {
    m.mode = config::Training::ASYNC;
    return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--modes: unknown mode \"", name, "\" (sync, sync_quorum, bounded_staleness or async)"));
}

// The quickstart job on this run's data, cluster and mode.
absl::StatusOr<config::Job> BenchJob(const Mode& mode, const std::string& train,
                                     const std::string& heldout) {
  PS_ASSIGN_OR_RETURN(config::Job job, testing::LoadJobOnData(JobPath(), train, heldout,
                                                              absl::GetFlag(FLAGS_servers),
                                                              absl::GetFlag(FLAGS_workers)));
  config::Training* training = job.mutable_training();
  training->set_mode(mode.mode);
  training->set_staleness(mode.staleness);
  training->set_sync_quorum(static_cast<float>(mode.sync_quorum));
  training->set_sync_timeout_ms(mode.sync_timeout_ms);
  training->set_dense_sync_every(absl::GetFlag(FLAGS_dense_sync_every));
  training->set_balance_batches(absl::GetFlag(FLAGS_balance_batches));
  PS_RETURN_IF_ERROR(ValidateJob(job));
  return job;
}

// ps_datagen's JSON line.
absl::StatusOr<std::string> GenerateData(const std::string& train, const std::string& heldout) {
  testing::DatagenOptions options;
  options.bin_dir = BinDir();
  options.train_path = train;
  options.heldout_path = heldout;
  options.rows = absl::GetFlag(FLAGS_rows);
  options.heldout_rows = absl::GetFlag(FLAGS_heldout_rows);
  options.cardinalities = absl::GetFlag(FLAGS_cardinalities);
  return testing::RunDatagen(options, absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
}

struct Measurement {
  double samples_per_s = 0;
  double wall_s = 0;
  double heldout_auc = 0;
  double steps = 0;
  double mean_pull_ms = 0;
  double mean_push_ms = 0;
};

// Trains the job at `job_path` on a fresh cluster; rank 0's figures and the wall time.
absl::StatusOr<Measurement> RunCluster(const std::string& job_path) {
  testing::LocalClusterOptions options;
  options.bin_dir = BinDir();
  options.servers = absl::GetFlag(FLAGS_servers);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<testing::LocalCluster> cluster,
                      testing::LocalCluster::Start(job_path, options));
  const int workers = absl::GetFlag(FLAGS_workers);
  const int straggler =
      absl::GetFlag(FLAGS_straggler_rank) >= 0 ? absl::GetFlag(FLAGS_straggler_rank) : workers - 1;
  std::vector<std::vector<std::string>> worker_args(
      workers, {absl::StrCat("--progress_s=", absl::GetFlag(FLAGS_progress_s))});
  if (straggler >= 0 && straggler < workers) {
    worker_args[straggler].push_back(absl::StrCat("--slowdown=", absl::GetFlag(FLAGS_slowdown)));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<testing::ProcessResult>> results =
      cluster->RunWorkers(worker_args, absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!results.ok()) return results.status();
  if (absl::GetFlag(FLAGS_worker_logs)) {
    for (size_t r = 0; r < results->size(); ++r) {
      std::fprintf(stderr, "--- worker %zu ---\n%s", r, (*results)[r].stderr_text.c_str());
    }
  }
  const std::string rank0 = results->empty() ? "" : testing::ResultJson((*results)[0].stdout_text);
  if (rank0.empty()) return absl::InternalError("worker 0 printed no RESULT line");
  PS_RETURN_IF_ERROR(cluster->Terminate(absl::Seconds(30)));
  Measurement m;
  m.samples_per_s = JsonField(rank0, "samples_per_s");
  m.wall_s = wall_s;
  m.heldout_auc = JsonField(rank0, "heldout_auc");
  m.steps = JsonField(rank0, "steps");
  m.mean_pull_ms = JsonField(rank0, "mean_pull_ms");
  m.mean_push_ms = JsonField(rank0, "mean_push_ms");
  return m;
}

int Main() {
  std::vector<Mode> modes;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty())) {
    absl::StatusOr<Mode> mode = ParseMode(std::string(name));
    if (!mode.ok()) {
      std::fprintf(stderr, "modes_bench: %s\n", mode.status().ToString().c_str());
      return 2;
    }
    modes.push_back(*mode);
  }
  absl::StatusOr<std::unique_ptr<testing::ScopedTempDir>> dir =
      testing::ScopedTempDir::Create("modes_bench");
  if (!dir.ok()) {
    std::fprintf(stderr, "modes_bench: %s\n", dir.status().ToString().c_str());
    return 1;
  }
  const std::string train = (*dir)->path() + "/train.tsv";
  const std::string heldout = (*dir)->path() + "/heldout.tsv";
  absl::StatusOr<std::string> teacher = GenerateData(train, heldout);
  if (!teacher.ok()) {
    std::fprintf(stderr, "modes_bench: %s\n", teacher.status().ToString().c_str());
    return 1;
  }
  const std::string teacher_auc = JsonNumber(JsonField(*teacher, "teacher_auc"));
  double sync_samples_per_s = std::nan("");
  for (const Mode& mode : modes) {
    const std::string job_path = absl::StrCat((*dir)->path(), "/", mode.name, ".pbtxt");
    absl::StatusOr<config::Job> job = BenchJob(mode, train, heldout);
    absl::Status written = job.ok() ? testing::WriteJobFile(*job, job_path) : job.status();
    if (!written.ok()) {
      std::fprintf(stderr, "modes_bench: %s: %s\n", mode.name.c_str(), written.ToString().c_str());
      return 1;
    }
    absl::StatusOr<Measurement> m = RunCluster(job_path);
    if (!m.ok()) {
      std::fprintf(stderr, "modes_bench: %s: %s\n", mode.name.c_str(),
                   m.status().ToString().c_str());
      return 1;
    }
    if (mode.name == "sync") sync_samples_per_s = m->samples_per_s;
    absl::PrintF(
        "{\"bench\":\"modes\",\"mode\":\"%s\",\"staleness\":%d,\"sync_quorum\":%s,"
        "\"sync_timeout_ms\":%d,\"dense_sync_every\":%d,\"balance_batches\":%s,"
        "\"servers\":%d,\"workers\":%d,"
        "\"slowdown\":%s,\"rows\":%d,\"cpus\":%d,\"steps\":%s,\"samples_per_s\":%s,\"wall_s\":%s,"
        "\"heldout_auc\":%s,\"teacher_auc\":%s,\"mean_pull_ms\":%s,\"mean_push_ms\":%s,"
        "\"throughput_vs_sync\":%s}\n",
        mode.name, mode.staleness, JsonNumber(mode.sync_quorum), mode.sync_timeout_ms,
        absl::GetFlag(FLAGS_dense_sync_every),
        absl::GetFlag(FLAGS_balance_batches) ? "true" : "false", absl::GetFlag(FLAGS_servers),
        absl::GetFlag(FLAGS_workers), JsonNumber(absl::GetFlag(FLAGS_slowdown)),
        absl::GetFlag(FLAGS_rows), std::thread::hardware_concurrency(), JsonNumber(m->steps),
        JsonNumber(m->samples_per_s), JsonNumber(m->wall_s), JsonNumber(m->heldout_auc),
        teacher_auc, JsonNumber(m->mean_pull_ms), JsonNumber(m->mean_push_ms),
        JsonNumber(m->samples_per_s / sync_samples_per_s));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::TuneProcess();
  absl::SetProgramUsageMessage(
      "modes_bench [--rows=600000] [--modes=sync,sync_quorum,bounded_staleness,async] "
      "[--slowdown=2] [--staleness=4] [--sync_quorum=0.67] [--dense_sync_every=8]");
  absl::ParseCommandLine(argc, argv);
  ps::g_self = ps::testing::SelfPath(argv[0]);
  // What its daemons and workers write goes into one folder, removed at the end.
  auto scratch = ps::testing::UseScopedTempDir("modes_bench");
  if (!scratch.ok()) {
    std::fprintf(stderr, "modes_bench: %s\n", scratch.status().ToString().c_str());
    return 1;
  }
  return ps::Main();
}

// train_bench: samples per second of the quickstart model (deploy/jobs/quickstart.pbtxt) trained
// by a real cluster on this machine, against the same training in one process.
//
// Writes synthetic data with ps_datagen to a temporary folder, then
//   ps:    starts a ps_coordinator, --servers ps_server and --workers ps_worker processes on
//          loopback and reads the workers' `RESULT {json}` lines (rank 0's samples_per_s is
//          already the workers' total; rank 0 evaluates on the held-out file);
//   local: calls worker::Train in this process with a LocalClient (one in-process store serving
//          every shard) and a size-1 AllReduce: the same model, data and training settings,
//          without servers, RPCs or collectives.
// Prints one JSON line per setup and, when both ran, one with their ratio:
//   {"bench":"train","setup":"ps","servers":2,"workers":2,"samples_per_s":...,"heldout_auc":...,
//    "step_ms":{...},   (rank 0's step breakdown, as its RESULT line gives it)
//    "server_cpu_s":...,"worker_cpu_s":...}   (CPU seconds, user and system, the servers spent
//                                              while the workers ran, and the workers in all)
//   {"bench":"train","setup":"local","servers":0,"workers":1,"samples_per_s":...,...}
//   {"bench":"train","setup":"ratio","servers":2,"workers":2,"ratio":...}   (ps / local)
//
//   bazel build -c opt //tests/bench:train_bench
//   bazel-bin/tests/bench/train_bench --servers=2 --workers=2 --rows=500000 --epochs=1
//       --batch=512 --mode=sync [--local] [--setup=ps --backend=gpu --collective=gloo]
#include <sys/resource.h>

#include <cstdio>
#include <memory>
#include <optional>
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
#include "absl/time/time.h"
#include "common/job_config.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "proto/job.pb.h"
#include "tests/testing/json_line.h"
#include "tests/testing/local/local_client.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/measure.h"
#include "tests/testing/runfiles.h"
#include "tests/testing/temp_dir.h"
#include "worker/collective/allreduce.h"
#include "worker/progress_report.h"
#include "worker/trainer.h"

ABSL_FLAG(int, servers, 2, "ps: server processes");
ABSL_FLAG(int, workers, 2, "ps: worker processes");
ABSL_FLAG(int64_t, rows, 500000, "training rows ps_datagen writes");
ABSL_FLAG(int64_t, heldout_rows, -1, "held-out rows ps_datagen writes (-1: rows / 10)");
ABSL_FLAG(std::string, cardinalities, "1000", "ps_datagen --cardinalities");
ABSL_FLAG(int, epochs, 1, "passes over the training data");
ABSL_FLAG(int, batch, 512, "samples per worker per step");
ABSL_FLAG(std::string, mode, "sync", "sync, async or bounded_staleness");
ABSL_FLAG(bool, local, false, "run only the in-process setup (same as --setup=local)");
ABSL_FLAG(std::string, setup, "both", "ps, local or both (both also prints their ratio)");
ABSL_FLAG(std::string, job, "", "the job to train (default: deploy/jobs/quickstart.pbtxt)");
ABSL_FLAG(std::string, bin_dir, "",
          "folder holding server/, server/coordinator/, worker/ and worker/tools/ binaries");
ABSL_FLAG(int, timeout_s, 1800, "how long one setup may take");
ABSL_FLAG(std::string, backend, "auto",
          "ps: the workers' --backend (auto, cpu or gpu); the local setup computes on the CPU");
ABSL_FLAG(int64_t, row_cache_rows, 0,
          "async and bounded_staleness: training.row_cache.max_rows (0: no row cache)");
ABSL_FLAG(int, row_cache_refresh, 1, "training.row_cache.refresh_steps, with --row_cache_rows");
ABSL_FLAG(int, row_cache_min_pulls, 1, "training.row_cache.min_pulls, with --row_cache_rows");
ABSL_FLAG(bool, pipeline, true,
          "both setups: overlap each step's read and pull with the step before (the workers' "
          "--pipeline); false: one after the other");
ABSL_FLAG(std::string, collective, "auto",
          "ps: the workers' --collective (auto, gloo or nccl; several workers sharing one GPU "
          "need gloo)");

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

// What both setups report.
struct Measurement {
  double samples_per_s = 0;
  double heldout_auc = 0;
  double heldout_logloss = 0;
  double samples = 0;
  double steps = 0;
  double seconds = 0;
  double mean_pull_ms = 0;
  double mean_push_ms = 0;
  // The step's breakdown (RESULT's step_ms: milliseconds a step by part), a JSON object.
  std::string step_ms = "null";
  // RESULT's row_cache object (hit rate, bytes), or "null" without a row cache.
  std::string row_cache = "null";
  // The cluster's CPU seconds (user + system): the servers' while the workers ran, and the
  // workers' in all; negative when unknown (and for the local setup).
  double server_cpu_s = -1;
  double worker_cpu_s = -1;
};

// CPU seconds (user + system) of this process's children that have ended and been waited for.
double ChildrenCpuSeconds() {
  struct rusage usage = {};
  getrusage(RUSAGE_CHILDREN, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// The servers' CPU seconds in all, or -1 when one is unreadable.
double ServersCpuSeconds(const testing::LocalCluster& cluster) {
  double total = 0;
  for (const auto& server : cluster.servers()) {
    const double s = testing::CpuSecondsOf(server->pid());
    if (s < 0) return -1;
    total += s;
  }
  return total;
}

// The value of `"<name>":{...}` (an object of numbers) in a RESULT line, or "null".
std::string ObjectField(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":{";
  const size_t at = json.find(key);
  if (at == std::string::npos) return "null";
  const size_t begin = at + key.size() - 1;
  const size_t end = json.find('}', begin);  // the breakdown's parts are numbers: no nesting
  return end == std::string::npos ? "null" : json.substr(begin, end - begin + 1);
}

absl::StatusOr<config::Training::Mode> ParseMode(const std::string& mode) {
  if (mode == "sync") return config::Training::SYNC;
  if (mode == "async") return config::Training::ASYNC;
  if (mode == "bounded_staleness") return config::Training::BOUNDED_STALENESS;
  return absl::InvalidArgumentError(
      absl::StrCat("--mode must be sync, async or bounded_staleness, got ", mode));
}

// The quickstart job on this run's data and flags.
absl::StatusOr<config::Job> BenchJob(const std::string& train, const std::string& heldout) {
  PS_ASSIGN_OR_RETURN(config::Job job, testing::LoadJobOnData(JobPath(), train, heldout,
                                                              absl::GetFlag(FLAGS_servers),
                                                              absl::GetFlag(FLAGS_workers)));
  PS_ASSIGN_OR_RETURN(const config::Training::Mode mode, ParseMode(absl::GetFlag(FLAGS_mode)));
  config::Training* training = job.mutable_training();
  training->set_mode(mode);
  training->set_batch_size(absl::GetFlag(FLAGS_batch));
  training->clear_steps();
  training->set_epochs(absl::GetFlag(FLAGS_epochs));
  if (absl::GetFlag(FLAGS_row_cache_rows) > 0) {
    training->mutable_row_cache()->set_max_rows(absl::GetFlag(FLAGS_row_cache_rows));
    training->mutable_row_cache()->set_refresh_steps(absl::GetFlag(FLAGS_row_cache_refresh));
    training->mutable_row_cache()->set_min_pulls(absl::GetFlag(FLAGS_row_cache_min_pulls));
  }
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

// The cluster: coordinator, servers and worker processes on loopback.
absl::StatusOr<Measurement> RunCluster(const std::string& job_path) {
  testing::LocalClusterOptions options;
  options.bin_dir = BinDir();
  options.servers = absl::GetFlag(FLAGS_servers);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<testing::LocalCluster> cluster,
                      testing::LocalCluster::Start(job_path, options));
  const std::vector<std::string> worker_flags = {
      "--backend=" + absl::GetFlag(FLAGS_backend),
      "--collective=" + absl::GetFlag(FLAGS_collective),
      absl::GetFlag(FLAGS_pipeline) ? "--pipeline=true" : "--pipeline=false"};
  const double servers_before = ServersCpuSeconds(*cluster);
  const double children_before = ChildrenCpuSeconds();
  PS_ASSIGN_OR_RETURN(const std::vector<testing::ProcessResult> workers,
                      cluster->RunWorkers(std::vector<std::vector<std::string>>(
                                              absl::GetFlag(FLAGS_workers), worker_flags),
                                          absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  Measurement m;
  // The workers have been waited for; the servers still run.
  m.worker_cpu_s = ChildrenCpuSeconds() - children_before;
  const double servers_after = ServersCpuSeconds(*cluster);
  if (servers_before >= 0 && servers_after >= 0) m.server_cpu_s = servers_after - servers_before;
  const std::string rank0 = workers.empty() ? "" : testing::ResultJson(workers[0].stdout_text);
  if (rank0.empty()) return absl::InternalError("worker 0 printed no RESULT line");
  PS_RETURN_IF_ERROR(cluster->Terminate(absl::Seconds(30)));
  m.samples_per_s = JsonField(rank0, "samples_per_s");
  m.heldout_auc = JsonField(rank0, "heldout_auc");
  m.heldout_logloss = JsonField(rank0, "heldout_logloss");
  m.samples = JsonField(rank0, "samples");
  m.steps = JsonField(rank0, "steps");
  m.seconds = JsonField(rank0, "seconds");
  m.mean_pull_ms = JsonField(rank0, "mean_pull_ms");
  m.mean_push_ms = JsonField(rank0, "mean_push_ms");
  m.step_ms = ObjectField(rank0, "step_ms");
  m.row_cache = ObjectField(rank0, "row_cache");
  return m;
}

// The AllReduce of a group of one: the sum over one rank is its own data.
class SoloAllReduce final : public worker::AllReduce {
 public:
  absl::Status SumInPlace(absl::Span<float> data) override { return absl::OkStatus(); }
  int rank() const override { return 0; }
  int size() const override { return 1; }
};

// The same training in this process: one worker, one in-process store.
absl::StatusOr<Measurement> RunLocal(config::Job job) {
  // One worker makes up the whole quorum; staleness needs the coordinator's clocks, and with
  // one worker whose pushes apply before they return it means what async means.
  job.mutable_cluster()->set_num_workers(1);
  job.mutable_cluster()->set_num_servers(1);
  if (job.training().mode() == config::Training::BOUNDED_STALENESS) {
    job.mutable_training()->set_mode(config::Training::ASYNC);
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<testing::LocalClient> client,
                      testing::LocalClient::Create(job, testing::LocalClientOptions{}));
  SoloAllReduce allreduce;
  worker::TrainerOptions options;  // as ps_worker's: progress to stderr every 5 s
  options.pipeline = absl::GetFlag(FLAGS_pipeline);
  PS_ASSIGN_OR_RETURN(worker::TrainResult result,
                      worker::Train(job, client.get(), /*coordinator=*/nullptr, client->worker_id(),
                                    &allreduce, options));
  Measurement m;
  m.samples_per_s = result.samples_per_s;
  m.heldout_auc = result.heldout_auc;
  m.heldout_logloss = result.heldout_logloss;
  m.samples = static_cast<double>(result.samples);
  m.steps = static_cast<double>(result.steps);
  m.seconds = result.seconds;
  m.mean_pull_ms = result.mean_pull_ms;
  m.mean_push_ms = result.mean_push_ms;
  m.step_ms = worker::StepBreakdownJson(result.step_times, result.steps, result.copy_measured);
  if (result.row_cache.has_value()) m.row_cache = worker::RowCacheStatsJson(*result.row_cache);
  return m;
}

void Print(const char* setup, int servers, int workers, const Measurement& m,
           const std::string& teacher_auc) {
  absl::PrintF(
      "{\"bench\":\"train\",\"setup\":\"%s\",\"servers\":%d,\"workers\":%d,\"rows\":%d,"
      "\"epochs\":%d,\"batch\":%d,\"mode\":\"%s\",\"backend\":\"%s\",\"pipeline\":%s,\"cpus\":%d,"
      "\"samples\":%s,"
      "\"steps\":%s,"
      "\"seconds\":%s,\"samples_per_s\":%s,\"heldout_auc\":%s,\"heldout_logloss\":%s,"
      "\"teacher_auc\":%s,\"mean_pull_ms\":%s,\"mean_push_ms\":%s,\"step_ms\":%s,"
      "\"row_cache\":%s,\"server_cpu_s\":%s,\"worker_cpu_s\":%s}\n",
      setup, servers, workers, absl::GetFlag(FLAGS_rows), absl::GetFlag(FLAGS_epochs),
      absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_mode),
      std::string(setup) == "local" ? "cpu" : absl::GetFlag(FLAGS_backend),
      absl::GetFlag(FLAGS_pipeline) ? "true" : "false", std::thread::hardware_concurrency(),
      JsonNumber(m.samples), JsonNumber(m.steps), JsonNumber(m.seconds),
      JsonNumber(m.samples_per_s), JsonNumber(m.heldout_auc), JsonNumber(m.heldout_logloss),
      teacher_auc, JsonNumber(m.mean_pull_ms), JsonNumber(m.mean_push_ms), m.step_ms, m.row_cache,
      m.server_cpu_s >= 0 ? JsonNumber(m.server_cpu_s) : "null",
      m.worker_cpu_s >= 0 ? JsonNumber(m.worker_cpu_s) : "null");
  std::fflush(stdout);
}

int Main() {
  const std::string setup = absl::GetFlag(FLAGS_local) ? "local" : absl::GetFlag(FLAGS_setup);
  if (setup != "ps" && setup != "local" && setup != "both") {
    std::fprintf(stderr, "train_bench: --setup must be ps, local or both\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<testing::ScopedTempDir>> dir =
      testing::ScopedTempDir::Create("train_bench");
  if (!dir.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", dir.status().ToString().c_str());
    return 1;
  }
  const std::string train = (*dir)->path() + "/train.tsv";
  const std::string heldout = (*dir)->path() + "/heldout.tsv";
  const std::string job_path = (*dir)->path() + "/job.pbtxt";
  absl::StatusOr<config::Job> job = BenchJob(train, heldout);
  absl::Status written = job.ok() ? testing::WriteJobFile(*job, job_path) : job.status();
  if (!written.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", written.ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::string> teacher = GenerateData(train, heldout);
  if (!teacher.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", teacher.status().ToString().c_str());
    return 1;
  }
  const std::string teacher_auc = JsonNumber(JsonField(*teacher, "teacher_auc"));
  const int servers = absl::GetFlag(FLAGS_servers);
  const int workers = absl::GetFlag(FLAGS_workers);

  std::optional<Measurement> cluster, local;
  if (setup != "local") {
    absl::StatusOr<Measurement> m = RunCluster(job_path);
    if (!m.ok()) {
      std::fprintf(stderr, "train_bench: ps: %s\n", m.status().ToString().c_str());
      return 1;
    }
    cluster = *m;
    Print("ps", servers, workers, *cluster, teacher_auc);
  }
  if (setup != "ps") {
    absl::StatusOr<Measurement> m = RunLocal(*job);
    if (!m.ok()) {
      std::fprintf(stderr, "train_bench: local: %s\n", m.status().ToString().c_str());
      return 1;
    }
    local = *m;
    Print("local", 0, 1, *local, teacher_auc);
  }
  if (cluster && local) {
    absl::PrintF(
        "{\"bench\":\"train\",\"setup\":\"ratio\",\"servers\":%d,\"workers\":%d,"
        "\"ps_samples_per_s\":%s,\"local_samples_per_s\":%s,\"ratio\":%s}\n",
        servers, workers, JsonNumber(cluster->samples_per_s), JsonNumber(local->samples_per_s),
        JsonNumber(cluster->samples_per_s / local->samples_per_s));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::TuneProcess();
  absl::SetProgramUsageMessage(
      "train_bench [--servers=2 --workers=2 --rows=500000 --epochs=1 --batch=512 --mode=sync] "
      "[--local]");
  absl::ParseCommandLine(argc, argv);
  ps::g_self = ps::testing::SelfPath(argv[0]);
  // What its daemons and workers write goes into one folder, removed at the end.
  auto scratch = ps::testing::UseScopedTempDir("train_bench");
  if (!scratch.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", scratch.status().ToString().c_str());
    return 1;
  }
  return ps::Main();
}

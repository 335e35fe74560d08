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
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"
#include "proto/job.pb.h"
#include "tests/testing/daemon.h"

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
ABSL_FLAG(std::string, job, "", "the job to train (default: deploy/jobs/quickstart.pbtxt)");
ABSL_FLAG(std::string, bin_dir, "",
          "folder holding server/, server/coordinator/, worker/ and worker/tools/ binaries");
ABSL_FLAG(int, timeout_s, 1800, "how long one mode may take");

namespace ps {
namespace {

std::string g_self;  // this binary's path

// This binary's runfiles under `bazel run` or when run from bazel-bin, else "".
std::string RunfilesRoot() {
  const std::string runfiles = g_self + ".runfiles/ps";
  if (access((runfiles + "/worker/ps_worker").c_str(), X_OK) == 0) return runfiles;
  return "";
}

std::string BinDir() {
  const std::string dir = absl::GetFlag(FLAGS_bin_dir);
  if (!dir.empty()) return dir;
  const std::string runfiles = RunfilesRoot();
  return runfiles.empty() ? "bazel-bin" : runfiles;
}

std::string JobPath() {
  const std::string job = absl::GetFlag(FLAGS_job);
  if (!job.empty()) return job;
  const std::string runfiles = RunfilesRoot();
  return runfiles.empty() ? "deploy/jobs/quickstart.pbtxt"
                          : runfiles + "/deploy/jobs/quickstart.pbtxt";
}

// The value of "key":number in a one-line JSON object, or NaN (also for null).
double JsonField(const std::string& json, const std::string& key) {
  const std::string needle = absl::StrCat("\"", key, "\":");
  const size_t at = json.find(needle);
  if (at == std::string::npos) return std::nan("");
  const size_t begin = at + needle.size();
  const size_t end = json.find_first_of(",}", begin);
  double value = 0;
  if (!absl::SimpleAtod(json.substr(begin, end - begin), &value)) return std::nan("");
  return value;
}

std::string JsonNumber(double x) {
  return std::isfinite(x) ? absl::StrFormat("%.6g", x) : std::string("null");
}

// A temporary folder, removed with everything in it when this goes away.
class TempDir {
 public:
  static absl::StatusOr<std::unique_ptr<TempDir>> Create() {
    const char* base = std::getenv("TEST_TMPDIR");
    if (base == nullptr || *base == '\0') base = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/modes_bench.XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("cannot create ", pattern));
    }
    return std::unique_ptr<TempDir>(new TempDir(pattern));
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  const std::string path_;
};

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
  PS_ASSIGN_OR_RETURN(config::Job job, LoadJobFile(JobPath()));
  job.mutable_data()->clear_train_paths();
  job.mutable_data()->add_train_paths(train);
  job.mutable_data()->clear_eval_paths();
  job.mutable_data()->add_eval_paths(heldout);
  config::Training* training = job.mutable_training();
  training->set_mode(mode.mode);
  training->set_staleness(mode.staleness);
  training->set_sync_quorum(static_cast<float>(mode.sync_quorum));
  training->set_sync_timeout_ms(mode.sync_timeout_ms);
  training->set_dense_sync_every(absl::GetFlag(FLAGS_dense_sync_every));
  job.mutable_cluster()->set_num_servers(absl::GetFlag(FLAGS_servers));
  job.mutable_cluster()->set_num_workers(absl::GetFlag(FLAGS_workers));
  PS_RETURN_IF_ERROR(ValidateJob(job));
  return job;
}

absl::Status WriteJob(const config::Job& job, const std::string& path) {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(job, &text)) {
    return absl::InternalError("cannot print the job");
  }
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::FailedPreconditionError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// ps_datagen's JSON line.
absl::StatusOr<std::string> GenerateData(const std::string& train, const std::string& heldout) {
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int64_t heldout_rows =
      absl::GetFlag(FLAGS_heldout_rows) >= 0 ? absl::GetFlag(FLAGS_heldout_rows) : rows / 10;
  PS_ASSIGN_OR_RETURN(
      testing::ProcessResult result,
      testing::RunProcess(
          BinDir() + "/worker/tools/ps_datagen",
          {absl::StrCat("--rows=", rows), absl::StrCat("--heldout_rows=", heldout_rows),
           absl::StrCat("--out=", train), absl::StrCat("--heldout_out=", heldout),
           absl::StrCat("--cardinalities=", absl::GetFlag(FLAGS_cardinalities))},
          absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  if (result.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("ps_datagen exited with ", result.exit_code, ": ", result.stderr_text));
  }
  return std::string(absl::StripAsciiWhitespace(result.stdout_text));
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
  const std::string bin = BinDir();
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<testing::Daemon> coordinator,
      testing::Daemon::Start(bin + "/server/coordinator/ps_coordinator", {"--job=" + job_path}));
  std::vector<std::unique_ptr<testing::Daemon>> servers;
  for (int i = 0; i < absl::GetFlag(FLAGS_servers); ++i) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<testing::Daemon> server,
                        testing::Daemon::Start(bin + "/server/ps_server",
                                               {"--coordinator=" + coordinator->address()}));
    servers.push_back(std::move(server));
  }
  const int workers = absl::GetFlag(FLAGS_workers);
  const int straggler =
      absl::GetFlag(FLAGS_straggler_rank) >= 0 ? absl::GetFlag(FLAGS_straggler_rank) : workers - 1;
  std::vector<absl::StatusOr<testing::ProcessResult>> results(workers,
                                                              absl::UnknownError("not run"));
  const absl::Time start = absl::Now();
  {
    // Each worker's process dies with the thread that started it (testing::RunProcess), so each
    // thread lives until its worker has exited.
    std::vector<std::thread> threads;
    for (int rank = 0; rank < workers; ++rank) {
      std::vector<std::string> args = {"--coordinator=" + coordinator->address(),
                                       absl::StrCat("--rank=", rank), "--progress_s=60"};
      if (rank == straggler)
        args.push_back(absl::StrCat("--slowdown=", absl::GetFlag(FLAGS_slowdown)));
      threads.emplace_back([&, rank, args] {
        results[rank] = testing::RunProcess(bin + "/worker/ps_worker", args, timeout);
      });
    }
    for (std::thread& t : threads) t.join();
  }
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  std::string rank0;
  for (int rank = 0; rank < workers; ++rank) {
    if (!results[rank].ok()) return results[rank].status();
    if (results[rank]->exit_code != 0) {
      return absl::InternalError(absl::StrCat("worker ", rank, " exited with ",
                                              results[rank]->exit_code, ":\n",
                                              results[rank]->stderr_text));
    }
    if (rank != 0) continue;
    for (absl::string_view line : absl::StrSplit(results[rank]->stdout_text, '\n')) {
      if (absl::StartsWith(line, "RESULT ")) rank0 = std::string(line.substr(7));
    }
  }
  if (rank0.empty()) return absl::InternalError("worker 0 printed no RESULT line");
  for (auto& server : servers) PS_RETURN_IF_ERROR(server->Terminate(absl::Seconds(30)));
  PS_RETURN_IF_ERROR(coordinator->Terminate(absl::Seconds(30)));
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
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create();
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
    absl::Status written = job.ok() ? WriteJob(*job, job_path) : job.status();
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
        "\"sync_timeout_ms\":%d,\"dense_sync_every\":%d,\"servers\":%d,\"workers\":%d,"
        "\"slowdown\":%s,\"rows\":%d,\"cpus\":%d,\"steps\":%s,\"samples_per_s\":%s,\"wall_s\":%s,"
        "\"heldout_auc\":%s,\"teacher_auc\":%s,\"mean_pull_ms\":%s,\"mean_push_ms\":%s,"
        "\"throughput_vs_sync\":%s}\n",
        mode.name, mode.staleness, JsonNumber(mode.sync_quorum), mode.sync_timeout_ms,
        absl::GetFlag(FLAGS_dense_sync_every), absl::GetFlag(FLAGS_servers),
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
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ps::g_self = n > 0 ? std::string(self, n) : argv[0];
  // Under bazel run the runfiles sit beside argv[0], which may be a symlink.
  if (access((std::string(argv[0]) + ".runfiles").c_str(), F_OK) == 0) ps::g_self = argv[0];
  return ps::Main();
}

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
//   {"bench":"train","setup":"ps","servers":2,"workers":2,"samples_per_s":...,"heldout_auc":...}
//   {"bench":"train","setup":"local","servers":0,"workers":1,"samples_per_s":...,...}
//   {"bench":"train","setup":"ratio","servers":2,"workers":2,"ratio":...}   (ps / local)
//
//   bazel build -c opt //tests/bench:train_bench
//   bazel-bin/tests/bench/train_bench --servers=2 --workers=2 --rows=500000 --epochs=1
//       --batch=512 --mode=sync [--local]
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
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
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"
#include "proto/job.pb.h"
#include "tests/testing/daemon.h"
#include "tests/testing/local/local_client.h"
#include "worker/collective/allreduce.h"
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

namespace ps {
namespace {

std::string g_self;  // this binary's path

// Where the project's binaries and data files are: this binary's runfiles under `bazel run` or
// when run from bazel-bin, else the workspace (binaries under bazel-bin/).
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
        absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/train_bench.XXXXXX");
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
};

absl::StatusOr<config::Training::Mode> ParseMode(const std::string& mode) {
  if (mode == "sync") return config::Training::SYNC;
  if (mode == "async") return config::Training::ASYNC;
  if (mode == "bounded_staleness") return config::Training::BOUNDED_STALENESS;
  return absl::InvalidArgumentError(
      absl::StrCat("--mode must be sync, async or bounded_staleness, got ", mode));
}

// The quickstart job on this run's data and flags.
absl::StatusOr<config::Job> BenchJob(const std::string& train, const std::string& heldout) {
  PS_ASSIGN_OR_RETURN(config::Job job, LoadJobFile(JobPath()));
  PS_ASSIGN_OR_RETURN(const config::Training::Mode mode, ParseMode(absl::GetFlag(FLAGS_mode)));
  job.mutable_data()->clear_train_paths();
  job.mutable_data()->add_train_paths(train);
  job.mutable_data()->clear_eval_paths();
  job.mutable_data()->add_eval_paths(heldout);
  config::Training* training = job.mutable_training();
  training->set_mode(mode);
  training->set_batch_size(absl::GetFlag(FLAGS_batch));
  training->clear_steps();
  training->set_epochs(absl::GetFlag(FLAGS_epochs));
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

// The cluster: coordinator, servers and worker processes on loopback.
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
  std::vector<absl::StatusOr<testing::ProcessResult>> results(workers,
                                                              absl::UnknownError("not run"));
  {
    // Each worker's process dies with the thread that started it (testing::RunProcess), so each
    // thread lives until its worker has exited.
    std::vector<std::thread> threads;
    for (int rank = 0; rank < workers; ++rank) {
      threads.emplace_back([&, rank] {
        results[rank] = testing::RunProcess(
            bin + "/worker/ps_worker",
            {"--coordinator=" + coordinator->address(), absl::StrCat("--rank=", rank)}, timeout);
      });
    }
    for (std::thread& t : threads) t.join();
  }
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
  m.heldout_auc = JsonField(rank0, "heldout_auc");
  m.heldout_logloss = JsonField(rank0, "heldout_logloss");
  m.samples = JsonField(rank0, "samples");
  m.steps = JsonField(rank0, "steps");
  m.seconds = JsonField(rank0, "seconds");
  m.mean_pull_ms = JsonField(rank0, "mean_pull_ms");
  m.mean_push_ms = JsonField(rank0, "mean_push_ms");
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
  return m;
}

void Print(const char* setup, int servers, int workers, const Measurement& m,
           const std::string& teacher_auc) {
  absl::PrintF(
      "{\"bench\":\"train\",\"setup\":\"%s\",\"servers\":%d,\"workers\":%d,\"rows\":%d,"
      "\"epochs\":%d,\"batch\":%d,\"mode\":\"%s\",\"cpus\":%d,\"samples\":%s,\"steps\":%s,"
      "\"seconds\":%s,\"samples_per_s\":%s,\"heldout_auc\":%s,\"heldout_logloss\":%s,"
      "\"teacher_auc\":%s,\"mean_pull_ms\":%s,\"mean_push_ms\":%s}\n",
      setup, servers, workers, absl::GetFlag(FLAGS_rows), absl::GetFlag(FLAGS_epochs),
      absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_mode), std::thread::hardware_concurrency(),
      JsonNumber(m.samples), JsonNumber(m.steps), JsonNumber(m.seconds),
      JsonNumber(m.samples_per_s), JsonNumber(m.heldout_auc), JsonNumber(m.heldout_logloss),
      teacher_auc, JsonNumber(m.mean_pull_ms), JsonNumber(m.mean_push_ms));
  std::fflush(stdout);
}

int Main() {
  const std::string setup = absl::GetFlag(FLAGS_local) ? "local" : absl::GetFlag(FLAGS_setup);
  if (setup != "ps" && setup != "local" && setup != "both") {
    std::fprintf(stderr, "train_bench: --setup must be ps, local or both\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create();
  if (!dir.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", dir.status().ToString().c_str());
    return 1;
  }
  const std::string train = (*dir)->path() + "/train.tsv";
  const std::string heldout = (*dir)->path() + "/heldout.tsv";
  const std::string job_path = (*dir)->path() + "/job.pbtxt";
  absl::StatusOr<config::Job> job = BenchJob(train, heldout);
  absl::Status written = job.ok() ? WriteJob(*job, job_path) : job.status();
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
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ps::g_self = n > 0 ? std::string(self, n) : argv[0];
  // Under bazel run the runfiles sit beside argv[0], which may be a symlink.
  if (access((std::string(argv[0]) + ".runfiles").c_str(), F_OK) == 0) ps::g_self = argv[0];
  return ps::Main();
}

// ps_launch: runs a training job on a cluster from a job file and a cluster description.
//
//   ps_launch run --job=JOB --cluster=CLUSTER [--run_dir=DIR]   start, watch, stop at the end
//   ps_launch check --job=JOB --cluster=CLUSTER                 the pre-flight checks only
//   ps_launch status RUN_DIR                                    every daemon, its host and state
//   ps_launch stop RUN_DIR                                      SIGTERM, then SIGKILL
//
// The cluster description (proto/launch.proto) says the backend (LOCAL, SSH or SLURM), the hosts
// and what runs on each, and where the binaries are. See deploy/README.md.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/job_config.h"
#include "deploy/launch/cluster_spec.h"
#include "deploy/launch/launcher.h"

ABSL_FLAG(std::string, job, "", "the job file (protobuf text, proto/job.proto)");
ABSL_FLAG(std::string, cluster, "", "the cluster description (protobuf text, proto/launch.proto)");
ABSL_FLAG(std::string, run_dir, "",
          "run: the run's folder on this machine (default out/runs/<job>-<date>-<time>)");

namespace {

constexpr char kUsage[] =
    "ps_launch run --job=JOB --cluster=CLUSTER [--run_dir=DIR]\n"
    "  ps_launch check --job=JOB --cluster=CLUSTER\n"
    "  ps_launch status RUN_DIR\n"
    "  ps_launch stop RUN_DIR";

int Usage() {
  std::fprintf(stderr, "usage: %s\n", kUsage);
  return 2;
}

int Check() {
  absl::StatusOr<ps::config::Job> job = ps::LoadJobFile(absl::GetFlag(FLAGS_job));
  if (!job.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<ps::launch::ClusterSpec> cluster =
      ps::launch::LoadClusterFile(absl::GetFlag(FLAGS_cluster), *job);
  if (!cluster.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(cluster.status().message()).c_str());
    return 2;
  }
  if (cluster->backend() == ps::launch::ClusterSpec::SLURM) {
    std::printf(
        "ok: the job and the Slurm description are valid (Slurm places the daemons: no "
        "host to check)\n");
    return 0;
  }
  const ps::launch::Problems problems = ps::launch::Preflight(
      *cluster, *job, ps::launch::ReadFile(absl::GetFlag(FLAGS_job)), "/tmp/ps_launch/check");
  for (const std::string& p : problems) std::printf("%s\n", p.c_str());
  if (!problems.empty()) return 1;
  std::printf("ok: every host is ready\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) return Usage();
  const std::string command = args[1];
  if (command == "run" || command == "check") {
    if (args.size() != 2 || absl::GetFlag(FLAGS_job).empty() ||
        absl::GetFlag(FLAGS_cluster).empty()) {
      return Usage();
    }
    if (command == "check") return Check();
    ps::launch::RunOptions options;
    options.job_path = absl::GetFlag(FLAGS_job);
    options.cluster_path = absl::GetFlag(FLAGS_cluster);
    options.run_dir = absl::GetFlag(FLAGS_run_dir);
    return ps::launch::RunJob(options);
  }
  if (command == "status" || command == "stop") {
    if (args.size() != 3) return Usage();
    return command == "status" ? ps::launch::ShowStatus(args[2]) : ps::launch::StopRun(args[2]);
  }
  return Usage();
}

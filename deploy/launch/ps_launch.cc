// ps_launch: runs a training job on a cluster from a job file and a cluster description.
//
//   ps_launch run --job=JOB --cluster=CLUSTER [--run_dir=DIR]   start, watch, stop at the end
//                 [--coordinator_restarts=5] [--coordinator_restart_window_s=300]
//   ps_launch check --job=JOB --cluster=CLUSTER                 the pre-flight checks only
//   ps_launch status RUN_DIR                                    every daemon, its host and state
//   ps_launch stop RUN_DIR                                      SIGTERM, then SIGKILL
//
// The cluster description (proto/launch.proto) says the backend (LOCAL, SSH or SLURM), the hosts
// and what runs on each, where the binaries are, and how many coordinators run (2 or 3: with an
// etcd cluster, named or started by ps_launch). See deploy/README.md.
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

ABSL_FLAG(int, coordinator_restarts, 5,
          "run (LOCAL, SSH): how many times a coordinator whose process dies is started again "
          "(same host, flags, port and data_dir; with coordinators: 2 or 3, as a standby) within "
          "--coordinator_restart_window_s, all coordinators together; one more death fails the "
          "run. 0: not restarted (the members give up on it, or follow a standby)");
ABSL_FLAG(int, coordinator_restart_window_s, 300,
          "run: the window, in seconds (> 0), over which --coordinator_restarts are counted");

namespace {

constexpr char kUsage[] =
    "ps_launch run --job=JOB --cluster=CLUSTER [--run_dir=DIR] [--coordinator_restarts=N]\n"
    "                [--coordinator_restart_window_s=S]\n"
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
    options.coordinator_restarts.max_restarts = absl::GetFlag(FLAGS_coordinator_restarts);
    const int window_s = absl::GetFlag(FLAGS_coordinator_restart_window_s);
    if (options.coordinator_restarts.max_restarts < 0 || window_s <= 0) {
      std::fprintf(stderr,
                   "ps_launch: --coordinator_restarts must be >= 0 and "
                   "--coordinator_restart_window_s > 0\n");
      return 2;
    }
    options.coordinator_restarts.window = absl::Seconds(window_s);
    return ps::launch::RunJob(options);
  }
  if (command == "status" || command == "stop") {
    if (args.size() != 3) return Usage();
    return command == "status" ? ps::launch::ShowStatus(args[2]) : ps::launch::StopRun(args[2]);
  }
  return Usage();
}

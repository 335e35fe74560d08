// ps_launch's commands: run a job on a cluster (LOCAL or SSH here, SLURM in slurm.h), show a
// run's state, and stop it. A run keeps everything under its folder on the launching machine:
// run.pbtxt (proto/launch.proto's LaunchedRun), a copy of the job and cluster files, and
// logs/<daemon>.log with each daemon's stdout and stderr.
#ifndef PS_DEPLOY_LAUNCH_LAUNCHER_H_
#define PS_DEPLOY_LAUNCH_LAUNCHER_H_

#include <signal.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "proto/launch.pb.h"

namespace ps {
namespace launch {

// How often ps_launch restarts a coordinator whose process died (LOCAL and SSH; see RunJob), as
// systemd's StartLimitBurst and StartLimitIntervalSec: at most `max_restarts` within any `window`.
struct RestartLimit {
  // Restarts allowed within `window`, >= 0. 0: a coordinator that dies is left dead, and the
  // members give up on it after their connect_timeout_s. Default 5.
  int max_restarts = 5;
  // The window the restarts are counted over, > 0. Default 300 s.
  absl::Duration window = absl::Seconds(300);
};

struct RunOptions {
  // The job and cluster files. Required.
  std::string job_path;
  std::string cluster_path;
  // The run's folder; empty: out/runs/<job name>-<date>-<time>.
  std::string run_dir;
  // Restarts of a coordinator that dies (LOCAL and SSH; SLURM ignores it).
  RestartLimit coordinator_restarts;
};

// One problem a pre-flight check found: "host node-b: data file /data/x.tsv: not found".
using Problems = std::vector<std::string>;

// Checks every host of the run before anything starts (plan.h's PreflightScript, all hosts at
// once): reachable, binaries present and accepting their flags, ports free, data readable.
// Returns the problems found, empty when every host is ready.
Problems Preflight(const ClusterSpec& cluster, const config::Job& job, const std::string& job_text,
                   const std::string& remote_dir);

// Runs a job to its end: validates the job and the cluster, checks the hosts (nothing starts when
// one has a problem: each is printed with its host), starts the coordinator, then the servers and
// workers, and waits for the workers. Ctrl-C, SIGTERM, `ps_launch stop` or a failed worker stop
// every daemon (SIGTERM, then SIGKILL after the cluster's stop_grace_s). Prints worker 0's RESULT
// line last. Returns the process's exit status: 0 when every worker succeeded, 1 otherwise, 2
// for bad files.
//
// LOCAL and SSH, a coordinator without --etcd (plan.h's SingleCoordinator): the coordinator
// keeps its state in a --data_dir in the run's folder on its host (plan.h). When its process dies
// once it has listened (any end but exit 0, a stop, or 3, the job failed: a crash, SIGKILL, a lost
// ssh connection), it is started again on the same host with the same flags and port, and carries
// the job on; the launcher says
//   ps_launch: coordinator on HOST exited with status 137 (killed by signal 9): restarting it ...
//   (restart N; at most M in S s)
// and records it in the coordinator's log. A restart beyond options.coordinator_restarts stops
// every daemon and fails the run (1), saying so.
//
// LOCAL and SSH, `coordinators` 2 or 3: first the etcd members (plan.h's LaunchesEtcd: unless
// etcd_endpoints names one), each awaited until it serves its clients; then coordinator 0, awaited
// until it listens and leads; then the others, each awaited until it listens (they stand by).
// Every server and worker is given all their addresses. A coordinator that dies is started again
// as a standby on its host with the same flags and port, within the same limit, and says
//   ps_launch: coordinator 0 on HOST exited with ...: restarting it as a standby with the same
//   flags and port (restart N; at most M in S s)
// An etcd member that dies is not restarted (the others keep a quorum). At the end (or on a
// failure) the etcd members are stopped after everything else.
int RunJob(const RunOptions& options);

// Prints each daemon of the run in `run_dir` with its host and state, and the job's progress (the
// coordinator's clocks and members, each worker's latest progress line). With several
// coordinators each one's address and whether it leads or stands by (as its log last said), and
// each etcd member's address. 0, or 1 when the run
// folder cannot be read.
int ShowStatus(const std::string& run_dir);

// Stops the run in `run_dir`: asks its ps_launch to stop (SIGTERM) and waits for it; when that
// process is gone, stops the daemons itself, SIGTERM then SIGKILL after stop_grace_s. 0 when
// everything is stopped, 1 otherwise.
int StopRun(const std::string& run_dir);

// SIGINT, SIGTERM and SIGHUP: ps_launch blocks them and its watch loops take them with
// TakeSignal, so that a stop always goes through the orderly path.
sigset_t StopSignals();

// A stop signal that arrived (its number), or 0 after waiting `wait` for one.
int TakeSignal(absl::Duration wait);

// Prints "ps_launch: <line>" on stderr: the launcher's progress.
void Say(const std::string& line);

// The file's contents; "" when it cannot be read (a log not written yet).
std::string ReadFile(const std::string& path);

// Writes run.pbtxt of `run_dir` (through a rename). FAILED_PRECONDITION when it cannot.
absl::Status WriteRun(const std::string& run_dir, const LaunchedRun& run);

// Reads run.pbtxt of `run_dir`. NOT_FOUND, or INVALID_ARGUMENT when it cannot be parsed.
absl::StatusOr<LaunchedRun> ReadRun(const std::string& run_dir);

}  // namespace launch
}  // namespace ps

#endif  // PS_DEPLOY_LAUNCH_LAUNCHER_H_

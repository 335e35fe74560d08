// What ps_launch starts where: the daemons of a job on a cluster (proto/launch.proto), their
// command lines, and the shell scripts that run them and check their hosts. Pure: nothing here
// starts a process, so that every command line is tested.
#ifndef PS_DEPLOY_LAUNCH_PLAN_H_
#define PS_DEPLOY_LAUNCH_PLAN_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/job.pb.h"
#include "proto/launch.pb.h"

namespace ps {
namespace launch {

// One daemon to start.
struct Daemon {
  std::string role;  // "coordinator", "server" or "worker"
  int index = 0;     // the server's index or the worker's rank (0 for the coordinator)
  std::string host;  // the host's name in the cluster ("localhost" for LOCAL)
  // The binary, relative to bin_dir (e.g. "server/ps_server"), and its flags.
  std::string binary;
  std::vector<std::string> flags;
  // CUDA_VISIBLE_DEVICES for a GPU worker; empty: not set.
  std::string cuda_visible_devices;
  // Workers sharing a host split its cores: --compute_threads is nproc / this, computed on the
  // host (0: not a worker).
  int workers_on_host = 0;

  // "coordinator", "server 1", "worker 0".
  std::string Name() const;
  // "coordinator", "server1", "worker0": the name of its log file.
  std::string FileName() const;
};

// The hosts a run uses: the cluster's for SSH, and for LOCAL one host, "localhost", that runs the
// coordinator and every server and worker of the job.
std::vector<Host> RunHosts(const ClusterSpec& cluster, const config::Job& job);

// Whether the coordinator runs alone, keeping its state on its host: coordinator_flags have no
// --etcd (with --etcd its state is in etcd, and ps_coordinator refuses a --data_dir beside it).
// Only a lone coordinator gets a CoordinatorDataDir and is restarted by the launcher.
bool SingleCoordinator(const ClusterSpec& cluster);

// The coordinator, to be started first. `remote_dir` is the run's folder on the hosts (where the
// job file was copied: remote_dir/job.pbtxt). A SingleCoordinator keeps its state in
// CoordinatorDataDir on its host (unless coordinator_flags give it another --data_dir), so that a
// coordinator restarted there carries the job on (RestartedCoordinator).
Daemon PlanCoordinator(const ClusterSpec& cluster, const config::Job& job,
                       const std::string& remote_dir);

// The coordinator's --data_dir on its host: remote_dir/coordinator_data.
std::string CoordinatorDataDir(const std::string& remote_dir);

// The coordinator planned by PlanCoordinator, to be started again after its process died: the
// same flags, but its --listen pinned to `port`, the one the first process bound (the members
// dial that address). A --listen of coordinator_flags, which comes later, still wins.
Daemon RestartedCoordinator(const Daemon& coordinator, int port);

// The servers, then the workers (ranks in host order), dialling the coordinator at
// `coordinator` (host:port). Each listens on every address (LOCAL: 127.0.0.1) and advertises its
// host's advertise or name.
std::vector<Daemon> PlanMembers(const ClusterSpec& cluster, const config::Job& job,
                                const std::string& coordinator, const std::string& remote_dir);

// `text` quoted for a POSIX shell: 'text', with each ' as '\''.
std::string ShellQuote(absl::string_view text);

// The POSIX shell script that runs `daemon` on its host: it enters work_dir, sets
// LD_LIBRARY_PATH and CUDA_VISIBLE_DEVICES, starts the binary with stdin from /dev/null, prints
// `ps_launch: pid N` on stderr, and waits for it; when the script's own stdin ends (the launcher
// closed it, or died, or its ssh connection broke), it sends the daemon SIGTERM. Exits with the
// daemon's status.
std::string DaemonScript(const ClusterSpec& cluster, const Daemon& daemon);

// The script that checks a host before anything starts: it creates `remote_dir` and writes the
// job there (`job_text`); on the coordinator's host it removes a CoordinatorDataDir left there by
// an earlier run of the same folder name (a coordinator would take its job up); then for each
// daemon of the host checks that its binary exists and accepts its flags (the binary's --dry_run,
// which also binds its --listen address: a port in use is found), and on a host with workers that
// every data file of the job can be read. It prints one line `PROBLEM <what>` per problem and
// `PREFLIGHT DONE` last.
std::string PreflightScript(const ClusterSpec& cluster, const config::Job& job,
                            const std::string& job_text, const std::string& remote_dir,
                            const std::vector<Daemon>& daemons);

// How to run `script` on `host`: LOCAL: sh -c; SSH: ssh with BatchMode, the cluster's options and
// user and port, the host, and `sh -c <script>`.
std::vector<std::string> HostCommand(const ClusterSpec& cluster, const std::string& host,
                                     const std::string& script);

}  // namespace launch
}  // namespace ps

#endif  // PS_DEPLOY_LAUNCH_PLAN_H_

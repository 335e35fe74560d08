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
  std::string role;  // "etcd", "coordinator", "server" or "worker"
  // The etcd member's or coordinator's number (from 0), the server's index or the worker's rank.
  int index = 0;
  // Whether Name and FileName carry the index: false for the only coordinator of a job.
  bool numbered = true;
  std::string host;  // the host's name in the cluster ("localhost" for LOCAL)
  // The binary, relative to bin_dir (e.g. "server/ps_server"), or for etcd the cluster's
  // etcd_binary as it is (a path, or a name looked up in PATH); and its flags.
  std::string binary;
  std::vector<std::string> flags;
  // CUDA_VISIBLE_DEVICES for a GPU worker; empty: not set.
  std::string cuda_visible_devices;
  // Workers sharing a host split its cores: --compute_threads is nproc / this, computed on the
  // host (0: not a worker).
  int workers_on_host = 0;

  // "coordinator" (the only one), "coordinator 2", "etcd 0", "server 1", "worker 0".
  std::string Name() const;
  // "coordinator", "coordinator2", "etcd0", "server1", "worker0": the name of its log file.
  std::string FileName() const;
};

// The hosts a run uses: the cluster's for SSH, and for LOCAL one host, "localhost", that runs the
// coordinator and every server and worker of the job.
std::vector<Host> RunHosts(const ClusterSpec& cluster, const config::Job& job);

// Whether the coordinator runs alone, keeping its state on its host: `coordinators` is 1 and
// coordinator_flags have no --etcd (with --etcd its state is in etcd, and ps_coordinator refuses
// a --data_dir beside it). Only a lone coordinator gets a CoordinatorDataDir.
bool SingleCoordinator(const ClusterSpec& cluster);

// Whether the launcher restarts a coordinator that dies: a SingleCoordinator (on its data_dir), or
// one of `coordinators` > 1 (as a standby: the state is in etcd). Not a lone coordinator that
// coordinator_flags give --etcd (its etcd and standbys are the user's).
bool RestartsCoordinators(const ClusterSpec& cluster);

// Whether ps_launch starts an etcd cluster for the run: coordinators > 1 and no etcd_endpoints.
bool LaunchesEtcd(const ClusterSpec& cluster);

// The hosts that run the etcd members ps_launch starts: the first min(3, hosts) hosts of the run
// (their names); LOCAL: "localhost" three times.
std::vector<std::string> EtcdHosts(const ClusterSpec& cluster, const config::Job& job);

// The client and peer port of one etcd member.
struct EtcdPorts {
  int client = 0;
  int peer = 0;
};

// The ports of the etcd members as the description fixes them: etcd_client_port and
// etcd_peer_port, or SSH's defaults 2379 and 2380; LOCAL (all members on one machine): member i
// on client + i and peer + i. 0 where the description leaves LOCAL ports to the launcher
// (etcd_client_port or etcd_peer_port 0): it then picks free ones.
std::vector<EtcdPorts> FixedEtcdPorts(const ClusterSpec& cluster, const config::Job& job);

// The etcd members ps_launch starts, one on each EtcdHosts host with `ports` (one a member), and
// the endpoints the coordinators are given.
struct EtcdPlan {
  std::vector<Daemon> members;  // role "etcd", index 0..n-1, member name etcd<index>
  std::string endpoints;        // "host:port,host:port,...": their client addresses
};
// Each member keeps its data in EtcdDataDir on its host; it listens on its host's advertised
// address when that is an IP address (else 0.0.0.0; LOCAL: 127.0.0.1) and advertises it; the
// cluster's token is the run folder's name; etcd_flags come last.
EtcdPlan PlanEtcd(const ClusterSpec& cluster, const config::Job& job, const std::string& remote_dir,
                  const std::vector<EtcdPorts>& ports);

// Etcd member `index`'s --data-dir on its host: remote_dir/etcd_data/etcd<index> (members on
// hosts that share a file system do not meet).
std::string EtcdDataDir(const std::string& remote_dir, int index);

// The etcd endpoints the coordinators use: etcd_endpoints, or those of the etcd ps_launch
// starts (`launched`); "" for a SingleCoordinator.
std::string CoordinatorEtcd(const ClusterSpec& cluster, const std::string& launched);

// The coordinators, in the order they are started: with `coordinators` 1 the one coordinator
// (numbered false), on the host with `coordinator: true` (LOCAL: localhost). `remote_dir` is the
// run's folder on the hosts (where the job file was copied: remote_dir/job.pbtxt). A
// SingleCoordinator keeps its state in CoordinatorDataDir on its host (unless coordinator_flags
// give it another --data_dir), so that a coordinator restarted there carries the job on
// (RestartedCoordinator). With `coordinators` > 1, coordinator i runs on the i-th host with
// `coordinator: true` (LOCAL: all on loopback, on coordinator_port + i, or free ports) with
// --etcd=`etcd_endpoints`, --etcd_prefix=/ps/<job name>/<run folder's name>/ (a run never takes up
// an earlier run's state in a shared etcd) and no --data_dir.
std::vector<Daemon> PlanCoordinators(const ClusterSpec& cluster, const config::Job& job,
                                     const std::string& remote_dir,
                                     const std::string& etcd_endpoints);

// The first of PlanCoordinators (the only one with `coordinators` 1).
Daemon PlanCoordinator(const ClusterSpec& cluster, const config::Job& job,
                       const std::string& remote_dir);

// The coordinator's --data_dir on its host: remote_dir/coordinator_data.
std::string CoordinatorDataDir(const std::string& remote_dir);

// The coordinator planned by PlanCoordinator, to be started again after its process died: the
// same flags, but its --listen pinned to `port`, the one the first process bound (the members
// dial that address). A --listen of coordinator_flags, which comes later, still wins.
Daemon RestartedCoordinator(const Daemon& coordinator, int port);

// The servers, then the workers (ranks in host order), dialling the coordinator at
// `coordinator` (host:port; several coordinators: all their addresses, comma-separated). Each
// listens on every address (LOCAL: 127.0.0.1) and advertises its host's advertise or name.
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
// an earlier run of the same folder name (a coordinator would take its job up), on an etcd
// member's its EtcdDataDir; then for each daemon of the host checks that its binary exists and
// accepts its flags (the binary's --dry_run, which also binds its --listen address: a port in use
// is found; etcd: `etcd --version` runs), and on a host with workers that
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

#include "deploy/launch/plan.h"

#include <arpa/inet.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace ps {
namespace launch {
namespace {

bool IsLocal(const ClusterSpec& cluster) { return cluster.backend() == ClusterSpec::LOCAL; }

// What the daemons of `host` listen on (the port is added) and advertise.
std::string ListenHost(const ClusterSpec& cluster) {
  return IsLocal(cluster) ? "127.0.0.1" : "0.0.0.0";
}

std::string AdvertiseFlag(const ClusterSpec& cluster, const Host& host) {
  if (IsLocal(cluster)) return "";  // the listen address, 127.0.0.1
  return absl::StrCat("--advertise=", host.advertise().empty() ? host.name() : host.advertise());
}

void Append(std::vector<std::string>* flags, const std::string& flag) {
  if (!flag.empty()) flags->push_back(flag);
}

// A job's data path as a shell word: globs stay unquoted so that the shell expands them.
std::string DataWord(const std::string& path) {
  if (path.find_first_of("*?[") != std::string::npos &&
      path.find_first_of(" '\"$`\\") == std::string::npos) {
    return path;
  }
  return ShellQuote(path);
}

// Whether `flags` set the absl flag `name` (--name=V, --name V, -name...).
bool HasFlag(const google::protobuf::RepeatedPtrField<std::string>& flags, absl::string_view name) {
  for (absl::string_view flag : flags) {
    if (!absl::ConsumePrefix(&flag, "--")) absl::ConsumePrefix(&flag, "-");
    if (flag == name || absl::StartsWith(flag, absl::StrCat(name, "="))) return true;
  }
  return false;
}

}  // namespace

bool SingleCoordinator(const ClusterSpec& cluster) {
  return cluster.coordinators() <= 1 && !HasFlag(cluster.coordinator_flags(), "etcd");
}

bool RestartsCoordinators(const ClusterSpec& cluster) {
  return SingleCoordinator(cluster) || cluster.coordinators() > 1;
}

bool LaunchesEtcd(const ClusterSpec& cluster) {
  return cluster.coordinators() > 1 && !cluster.has_etcd_endpoints();
}

std::string Daemon::Name() const { return numbered ? absl::StrCat(role, " ", index) : role; }

std::string Daemon::FileName() const { return numbered ? absl::StrCat(role, index) : role; }

namespace {

// The address the daemons of `host` give the others: its advertise or name (LOCAL: 127.0.0.1).
std::string AdvertisedHost(const ClusterSpec& cluster, const Host& host) {
  if (IsLocal(cluster)) return "127.0.0.1";
  return host.advertise().empty() ? host.name() : host.advertise();
}

bool IsIpAddress(const std::string& host) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

std::string Url(const std::string& host, int port) {
  return absl::StrCat("http://", host.find(':') == std::string::npos ? host : "[" + host + "]", ":",
                      port);
}

std::string HostPortText(const std::string& host, int port) {
  return absl::StrCat(host.find(':') == std::string::npos ? host : "[" + host + "]", ":", port);
}

std::vector<Host> EtcdHostEntries(const ClusterSpec& cluster, const config::Job& job) {
  if (IsLocal(cluster)) return std::vector<Host>(3, RunHosts(cluster, job)[0]);
  std::vector<Host> hosts = RunHosts(cluster, job);
  if (hosts.size() > 3) hosts.resize(3);
  return hosts;
}

}  // namespace

std::vector<std::string> EtcdHosts(const ClusterSpec& cluster, const config::Job& job) {
  std::vector<std::string> names;
  for (const Host& host : EtcdHostEntries(cluster, job)) names.push_back(host.name());
  return names;
}

std::vector<EtcdPorts> FixedEtcdPorts(const ClusterSpec& cluster, const config::Job& job) {
  const size_t n = EtcdHostEntries(cluster, job).size();
  std::vector<EtcdPorts> ports(n);
  for (size_t i = 0; i < n; ++i) {
    if (IsLocal(cluster)) {
      // Members share the machine: a fixed port is the first of consecutive ones.
      ports[i].client = cluster.etcd_client_port() == 0 ? 0 : cluster.etcd_client_port() + i;
      ports[i].peer = cluster.etcd_peer_port() == 0 ? 0 : cluster.etcd_peer_port() + i;
    } else {
      ports[i].client = cluster.etcd_client_port() == 0 ? 2379 : cluster.etcd_client_port();
      ports[i].peer = cluster.etcd_peer_port() == 0 ? 2380 : cluster.etcd_peer_port();
    }
  }
  return ports;
}

std::string EtcdDataDir(const std::string& remote_dir, int index) {
  return absl::StrCat(remote_dir, "/etcd_data/etcd", index);
}

EtcdPlan PlanEtcd(const ClusterSpec& cluster, const config::Job& job, const std::string& remote_dir,
                  const std::vector<EtcdPorts>& ports) {
  const std::vector<Host> hosts = EtcdHostEntries(cluster, job);
  EtcdPlan plan;
  std::vector<std::string> peers;
  std::vector<std::string> endpoints;
  for (size_t i = 0; i < hosts.size() && i < ports.size(); ++i) {
    const std::string advertised = AdvertisedHost(cluster, hosts[i]);
    peers.push_back(absl::StrCat("etcd", i, "=", Url(advertised, ports[i].peer)));
    endpoints.push_back(HostPortText(advertised, ports[i].client));
  }
  const std::string initial_cluster = absl::StrJoin(peers, ",");
  const std::string token =
      absl::StrCat("ps-", std::filesystem::path(remote_dir).filename().string());
  for (size_t i = 0; i < hosts.size() && i < ports.size(); ++i) {
    const std::string advertised = AdvertisedHost(cluster, hosts[i]);
    // etcd binds IP addresses only: a host known by name listens on every address.
    const std::string listen = IsIpAddress(advertised) ? advertised : "0.0.0.0";
    Daemon d;
    d.role = "etcd";
    d.index = static_cast<int>(i);
    d.host = hosts[i].name();
    d.binary = cluster.etcd_binary();
    d.flags = {absl::StrCat("--name=etcd", i),
               absl::StrCat("--data-dir=", EtcdDataDir(remote_dir, i)),
               absl::StrCat("--listen-client-urls=", Url(listen, ports[i].client)),
               absl::StrCat("--advertise-client-urls=", Url(advertised, ports[i].client)),
               absl::StrCat("--listen-peer-urls=", Url(listen, ports[i].peer)),
               absl::StrCat("--initial-advertise-peer-urls=", Url(advertised, ports[i].peer)),
               absl::StrCat("--initial-cluster=", initial_cluster),
               "--initial-cluster-state=new",
               absl::StrCat("--initial-cluster-token=", token)};
    d.flags.insert(d.flags.end(), cluster.etcd_flags().begin(), cluster.etcd_flags().end());
    plan.members.push_back(std::move(d));
  }
  plan.endpoints = absl::StrJoin(endpoints, ",");
  return plan;
}

std::string CoordinatorEtcd(const ClusterSpec& cluster, const std::string& launched) {
  if (cluster.coordinators() <= 1) return "";
  return cluster.has_etcd_endpoints() ? cluster.etcd_endpoints() : launched;
}

std::vector<Host> RunHosts(const ClusterSpec& cluster, const config::Job& job) {
  if (!IsLocal(cluster)) return {cluster.hosts().begin(), cluster.hosts().end()};
  Host local;
  local.set_name("localhost");
  local.set_coordinator(true);
  local.set_servers(job.cluster().num_servers());
  local.set_workers(job.cluster().num_workers());
  return {local};
}

std::vector<Daemon> PlanCoordinators(const ClusterSpec& cluster, const config::Job& job,
                                     const std::string& remote_dir,
                                     const std::string& etcd_endpoints) {
  const int n = static_cast<int>(std::max<uint32_t>(1, cluster.coordinators()));
  std::vector<Host> hosts;
  for (const Host& host : RunHosts(cluster, job)) {
    if (host.coordinator()) hosts.push_back(host);
  }
  if (IsLocal(cluster) && !hosts.empty()) hosts.resize(n, hosts[0]);
  std::vector<Daemon> coordinators;
  for (int i = 0; i < n && i < static_cast<int>(hosts.size()); ++i) {
    const Host& host = hosts[i];
    Daemon d;
    d.role = "coordinator";
    d.index = i;
    d.numbered = n > 1;
    d.host = host.name();
    d.binary = "server/coordinator/ps_coordinator";
    const int port =
        cluster.coordinator_port() == 0
            ? 0
            : static_cast<int>(cluster.coordinator_port()) + (IsLocal(cluster) ? i : 0);
    d.flags = {absl::StrCat("--job=", remote_dir, "/job.pbtxt"),
               absl::StrCat("--listen=", ListenHost(cluster), ":", port)};
    Append(&d.flags, AdvertiseFlag(cluster, host));
    if (n > 1) {
      d.flags.push_back(absl::StrCat("--etcd=", etcd_endpoints));
      d.flags.push_back(absl::StrCat("--etcd_prefix=/ps/", job.name(), "/",
                                     std::filesystem::path(remote_dir).filename().string(), "/"));
    } else if (SingleCoordinator(cluster) && !HasFlag(cluster.coordinator_flags(), "data_dir")) {
      d.flags.push_back(absl::StrCat("--data_dir=", CoordinatorDataDir(remote_dir)));
    }
    d.flags.insert(d.flags.end(), cluster.coordinator_flags().begin(),
                   cluster.coordinator_flags().end());
    coordinators.push_back(std::move(d));
  }
  return coordinators;
}

Daemon PlanCoordinator(const ClusterSpec& cluster, const config::Job& job,
                       const std::string& remote_dir) {
  std::vector<Daemon> all = PlanCoordinators(cluster, job, remote_dir, "");
  if (all.empty()) {
    Daemon none;
    none.role = "coordinator";
    none.numbered = false;
    return none;
  }
  return all[0];
}

std::string CoordinatorDataDir(const std::string& remote_dir) {
  return absl::StrCat(remote_dir, "/coordinator_data");
}

Daemon RestartedCoordinator(const Daemon& coordinator, int port) {
  Daemon d = coordinator;
  for (std::string& flag : d.flags) {
    if (!absl::StartsWith(flag, "--listen=")) continue;
    // The first --listen is the plan's, HOST:PORT with a host without colons.
    const size_t colon = flag.rfind(':');
    if (colon != std::string::npos) flag = absl::StrCat(flag.substr(0, colon + 1), port);
    break;
  }
  return d;
}

std::vector<Daemon> PlanMembers(const ClusterSpec& cluster, const config::Job& job,
                                const std::string& coordinator, const std::string& remote_dir) {
  const std::vector<Host> hosts = RunHosts(cluster, job);
  const std::string timeout = absl::StrCat("--connect_timeout_s=", cluster.connect_timeout_s());
  std::vector<Daemon> daemons;
  int index = 0;
  for (const Host& host : hosts) {
    for (uint32_t i = 0; i < host.servers(); ++i) {
      Daemon d;
      d.role = "server";
      d.index = index++;
      d.host = host.name();
      d.binary = "server/ps_server";
      d.flags = {absl::StrCat("--coordinator=", coordinator),
                 absl::StrCat("--listen=", ListenHost(cluster), ":0")};
      Append(&d.flags, AdvertiseFlag(cluster, host));
      d.flags.push_back(timeout);
      d.flags.insert(d.flags.end(), cluster.server_flags().begin(), cluster.server_flags().end());
      daemons.push_back(std::move(d));
    }
  }
  int rank = 0;
  for (const Host& host : hosts) {
    for (uint32_t k = 0; k < host.workers(); ++k) {
      Daemon d;
      d.role = "worker";
      d.index = rank++;
      d.host = host.name();
      d.binary = "worker/ps_worker";
      d.workers_on_host = static_cast<int>(host.workers());
      d.flags = {absl::StrCat("--coordinator=", coordinator), absl::StrCat("--rank=", d.index),
                 absl::StrCat("--listen=", ListenHost(cluster), ":0")};
      Append(&d.flags, AdvertiseFlag(cluster, host));
      d.flags.push_back(timeout);
      d.flags.push_back(absl::StrCat("--metrics_file=", remote_dir, "/metrics", d.index, ".jsonl"));
      // LOCAL keeps today's behaviour: the binary picks the device. Elsewhere the description
      // says which hosts have GPUs.
      if (host.gpus() > 0) {
        d.cuda_visible_devices = absl::StrCat(k % host.gpus());
      } else if (!IsLocal(cluster)) {
        d.flags.push_back("--backend=cpu");
      }
      d.flags.insert(d.flags.end(), cluster.worker_flags().begin(), cluster.worker_flags().end());
      daemons.push_back(std::move(d));
    }
  }
  return daemons;
}

std::string ShellQuote(absl::string_view text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "'\\''"}}), "'");
}

namespace {

// Enters work_dir and sets the library path: the start of every script.
std::string Prologue(const ClusterSpec& cluster) {
  std::string script;
  if (!cluster.work_dir().empty()) {
    absl::StrAppend(&script, "cd ", ShellQuote(cluster.work_dir()),
                    " || { echo \"PROBLEM cannot enter work_dir ", cluster.work_dir(),
                    "\"; exit 1; }\n");
  }
  if (!cluster.lib_dir().empty()) {
    absl::StrAppend(&script, "LD_LIBRARY_PATH=", ShellQuote(cluster.lib_dir()),
                    "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; export LD_LIBRARY_PATH\n");
  }
  return script;
}

std::string BinaryPath(const ClusterSpec& cluster, const Daemon& daemon) {
  if (daemon.role == "etcd") return daemon.binary;
  return absl::StrCat(cluster.bin_dir(), "/", daemon.binary);
}

// The binary and flags as shell words. A worker's --compute_threads (from $threads, see
// ThreadsLine) comes first, so that the description's worker_flags may override it.
std::string CommandLine(const ClusterSpec& cluster, const Daemon& daemon) {
  std::string line = ShellQuote(BinaryPath(cluster, daemon));
  if (daemon.workers_on_host > 0) absl::StrAppend(&line, " --compute_threads=$threads");
  for (const std::string& flag : daemon.flags) absl::StrAppend(&line, " ", ShellQuote(flag));
  return line;
}

std::string ThreadsLine(const Daemon& daemon) {
  if (daemon.workers_on_host == 0) return "";
  return absl::StrCat("threads=$(( $(nproc) / ", daemon.workers_on_host,
                      " )); [ \"$threads\" -ge 1 ] || threads=1\n");
}

}  // namespace

std::string DaemonScript(const ClusterSpec& cluster, const Daemon& daemon) {
  std::string script = Prologue(cluster);
  if (!daemon.cuda_visible_devices.empty()) {
    absl::StrAppend(&script, "CUDA_VISIBLE_DEVICES=", daemon.cuda_visible_devices,
                    "; export CUDA_VISIBLE_DEVICES\n");
  }
  absl::StrAppend(&script, ThreadsLine(daemon));
  // A background command's stdin is /dev/null: the watchdog reads the script's through fd 3.
  absl::StrAppend(&script, "exec 3<&0\n", CommandLine(cluster, daemon), " </dev/null 3<&- &\n",
                  "pid=$!\n", "echo \"ps_launch: pid $pid\" >&2\n",
                  // The watchdog: the end of the script's stdin stops the daemon.
                  "(cat <&3 >/dev/null 2>&1; kill -TERM $pid 2>/dev/null) >/dev/null 2>&1 &\n",
                  "watchdog=$!\n", "exec 3<&-\n", "wait $pid\n", "status=$?\n",
                  "kill $watchdog 2>/dev/null\n", "exit $status\n");
  return script;
}

std::string PreflightScript(const ClusterSpec& cluster, const config::Job& job,
                            const std::string& job_text, const std::string& remote_dir,
                            const std::vector<Daemon>& daemons) {
  std::string script = Prologue(cluster);
  absl::StrAppend(&script, "mkdir -p ", ShellQuote(remote_dir), " || echo \"PROBLEM cannot create ",
                  remote_dir, "\"\n");
  // A terminator no job file has on a line of its own.
  absl::StrAppend(&script, "cat > ", ShellQuote(remote_dir + "/job.pbtxt"),
                  " <<'PS_LAUNCH_END_OF_JOB_FILE'\n", job_text,
                  absl::EndsWith(job_text, "\n") ? "" : "\n", "PS_LAUNCH_END_OF_JOB_FILE\n");
  bool workers = false;
  for (const Daemon& d : daemons) {
    workers = workers || d.role == "worker";
    if (d.role == "coordinator") {
      absl::StrAppend(&script, "rm -rf ", ShellQuote(CoordinatorDataDir(remote_dir)), "\n");
    }
    const std::string binary = BinaryPath(cluster, d);
    if (d.role == "etcd") {
      absl::StrAppend(&script, "rm -rf ", ShellQuote(EtcdDataDir(remote_dir, d.index)), "\n");
      absl::StrAppend(&script, "if ! command -v ", ShellQuote(binary),
                      " >/dev/null 2>&1; then echo \"PROBLEM ", d.Name(), ": no etcd binary ",
                      binary, " (etcd_binary; Debian's etcd-server)\"\n", "elif ! out=$(",
                      ShellQuote(binary), " --version </dev/null 2>&1); then echo \"PROBLEM ",
                      d.Name(), ": $(printf '%s' \"$out\" | tail -n 3 | tr '\\n' ' ')\"\nfi\n");
      continue;
    }
    absl::StrAppend(&script, "if [ ! -x ", ShellQuote(binary), " ]; then echo \"PROBLEM ", d.Name(),
                    ": no binary ", binary, " (bin_dir ", cluster.bin_dir(), ")\"\n");
    absl::StrAppend(&script, "else ", ThreadsLine(d), "out=$(", CommandLine(cluster, d),
                    " --dry_run </dev/null 2>&1) || echo \"PROBLEM ", d.Name(),
                    ": $(printf '%s' \"$out\" | tail -n 3 | tr '\\n' ' ')\"\nfi\n");
  }
  if (workers) {
    std::vector<std::string> paths(job.data().train_paths().begin(),
                                   job.data().train_paths().end());
    paths.insert(paths.end(), job.data().eval_paths().begin(), job.data().eval_paths().end());
    for (const std::string& path : paths) {
      absl::StrAppend(&script, "found=0; for f in ", DataWord(path),
                      "; do [ -r \"$f\" ] && [ -f \"$f\" ] && found=1; done; [ $found = 1 ] || "
                      "echo \"PROBLEM data file ",
                      absl::StrReplaceAll(path, {{"\"", "\\\""}, {"$", "\\$"}, {"`", "\\`"}}),
                      ": not found or not readable (from $(pwd))\"\n");
    }
  }
  absl::StrAppend(&script, "echo 'PREFLIGHT DONE'\n");
  return script;
}

std::vector<std::string> HostCommand(const ClusterSpec& cluster, const std::string& host,
                                     const std::string& script) {
  if (IsLocal(cluster)) return {"/bin/sh", "-c", script};
  std::vector<std::string> argv = {
      "ssh", "-o", "BatchMode=yes", "-o",
      absl::StrCat("ConnectTimeout=", cluster.ssh().connect_timeout_s())};
  if (!cluster.ssh().user().empty()) argv.insert(argv.end(), {"-l", cluster.ssh().user()});
  if (cluster.ssh().port() != 0) {
    argv.insert(argv.end(), {"-p", absl::StrCat(cluster.ssh().port())});
  }
  argv.insert(argv.end(), cluster.ssh().options().begin(), cluster.ssh().options().end());
  // ssh hands the remote login shell one string: run our script with sh, whatever that shell is.
  argv.insert(argv.end(), {host, absl::StrCat("sh -c ", ShellQuote(script))});
  return argv;
}

}  // namespace launch
}  // namespace ps

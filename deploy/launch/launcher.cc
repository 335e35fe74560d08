#include "deploy/launch/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/coordinator_client.h"
#include "common/job_config.h"
#include "deploy/launch/child.h"
#include "deploy/launch/cluster_spec.h"
#include "deploy/launch/plan.h"
#include "deploy/launch/slurm.h"
#include "google/protobuf/text_format.h"

namespace ps {
namespace launch {
namespace {

constexpr char kRunFile[] = "run.pbtxt";
constexpr char kExitMark[] = "ps_launch: exit: ";
constexpr char kPidMark[] = "ps_launch: pid ";
constexpr char kListening[] = "ps_coordinator listening on ";
constexpr char kRestartMark[] = "ps_launch: restart ";
// What an etcd member logs once it serves its clients (it has joined the cluster).
constexpr char kEtcdReady[] = "ready to serve client requests";
// What ps_coordinator logs as it wins the election: "ps_coordinator: ADDR leads (term N ...)".
constexpr char kLeads[] = " leads (term ";
// ps_coordinator's exit status when the job failed (its members were told).
constexpr int kJobFailedExit = 3;

void AppendLine(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app) << line << "\n";
}

std::string Tail(const std::string& text, int lines) {
  std::vector<absl::string_view> all = absl::StrSplit(text, '\n', absl::SkipEmpty());
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  std::string out;
  for (size_t i = from; i < all.size(); ++i) absl::StrAppend(&out, "    ", all[i], "\n");
  return out;
}

// The last line of `text` that starts with `mark`, without it.
std::optional<std::string> LastMarked(const std::string& text, absl::string_view mark) {
  std::optional<std::string> found;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, mark)) found = std::string(line);
  }
  return found;
}

std::string DefaultRunDir(const config::Job& job) {
  return absl::StrCat("out/runs/", job.name(), "-",
                      absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()));
}

// A daemon started by this run.
struct Started {
  Daemon daemon;
  std::string log;
  std::unique_ptr<Child> child;
  bool reported = false;  // its exit was said
};

// The daemon's pid on its host, from its log (the script says it first).
std::optional<long> RemotePid(const std::string& log) {
  std::optional<std::string> text = LastMarked(ReadFile(log), kPidMark);
  long pid = 0;
  if (!text.has_value() || !absl::SimpleAtoi(*text, &pid) || pid <= 0) return std::nullopt;
  return pid;
}

// Sends `signal` to the daemon's process on its host (a short sh or ssh).
void SignalRemote(const ClusterSpec& cluster, const std::string& host, long pid,
                  const char* signal) {
  const absl::StatusOr<Captured> done = RunCaptured(
      HostCommand(cluster, host, absl::StrCat("kill -", signal, " ", pid, " 2>/dev/null; true")),
      absl::Seconds(cluster.ssh().connect_timeout_s() + 5));
  if (!done.ok())
    Say(absl::StrCat("cannot signal pid ", pid, " on ", host, ": ", done.status().ToString()));
}

void StopPhase(const ClusterSpec& cluster, std::vector<Started>& started, bool etcd);

// Stops the daemons that still run: the end of their stdin (their script sends SIGTERM), then
// after the grace period SIGKILL on their hosts. Etcd members last, once everything else has
// stopped (a leading coordinator resigns through etcd as it stops).
void StopAll(const ClusterSpec& cluster, std::vector<Started>& started) {
  StopPhase(cluster, started, /*etcd=*/false);
  StopPhase(cluster, started, /*etcd=*/true);
}

// Stops the daemons that are etcd members (`etcd`) or those that are not.
void StopPhase(const ClusterSpec& cluster, std::vector<Started>& started, bool etcd) {
  auto in_phase = [etcd](const Started& s) { return (s.daemon.role == "etcd") == etcd; };
  // Workers first, then servers, the coordinators last, so that nothing is left waiting for them.
  for (auto it = started.rbegin(); it != started.rend(); ++it) {
    if (in_phase(*it)) it->child->CloseStdin();
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(cluster.stop_grace_s());
  for (Started& s : started) {
    if (in_phase(s)) s.child->WaitUntil(deadline);
  }
  for (Started& s : started) {
    if (!in_phase(s) || s.child->Poll().has_value()) continue;
    Say(absl::StrCat(s.daemon.Name(), " on ", s.daemon.host, " did not stop within ",
                     cluster.stop_grace_s(), " s of SIGTERM: SIGKILL"));
    if (std::optional<long> pid = RemotePid(s.log)) {
      SignalRemote(cluster, s.daemon.host, *pid, "KILL");
    }
    s.child->Signal(SIGKILL);
    s.child->WaitUntil(absl::Now() + absl::Seconds(5));
  }
}

// Says, once, how each daemon that ended did; records it in its log for `status`.
void ReportExits(std::vector<Started>& started) {
  for (Started& s : started) {
    if (s.reported) continue;
    const std::optional<int> status = s.child->Poll();
    if (!status.has_value()) continue;
    s.reported = true;
    const std::string how = ExitDescription(*status);
    AppendLine(s.log, absl::StrCat(kExitMark, how));
    Say(absl::StrCat(s.daemon.Name(), " on ", s.daemon.host, " ", how));
  }
}

// How a daemon's script (or ssh) ended, with the signal that killed the daemon when its status
// says so (the script exits with the shell's 128 + signal): "exited with status 137 (killed by
// signal 9)".
std::string ScriptExitDescription(int wait_status) {
  std::string how = ExitDescription(wait_status);
  if (WIFEXITED(wait_status)) {
    const int code = WEXITSTATUS(wait_status);
    if (code > 128 && code < 128 + 65)
      absl::StrAppend(&how, " (killed by signal ", code - 128, ")");
  }
  return how;
}

// Keeps the coordinators running: when one's process dies before the end of the job, starts it
// again on its host with the same flags and port (RestartedCoordinator): a lone coordinator on its
// data_dir, one of several as a standby. All restarts count against one RestartLimit.
// Thread-compatible.
class CoordinatorKeeper {
 public:
  CoordinatorKeeper(const ClusterSpec& cluster, RestartLimit limit)
      : cluster_(cluster), limit_(limit) {}

  // Looks at the coordinator `s`, started again as `restarted` if it died. OK when it runs, ended
  // normally (exit 0 or the job failed: not restarted, ReportExits says it), died and was started
  // again, or died with restarts off (limit 0, or not RestartsCoordinators: left to the members,
  // which give up on it or follow a standby). RESOURCE_EXHAUSTED, with the message to print, when
  // it died and the limit allows no more restarts; INTERNAL when it cannot be started again.
  absl::Status Keep(Started& s, const Daemon& restarted) {
    const std::optional<int> status = s.child->Poll();
    if (!status.has_value() || s.reported || CoordinatorEndedNormally(*status)) {
      return absl::OkStatus();
    }
    const std::string how = ScriptExitDescription(*status);
    if (limit_.max_restarts == 0 || !RestartsCoordinators(cluster_)) {
      AppendLine(s.log, absl::StrCat("ps_launch: not restarted (",
                                     limit_.max_restarts == 0 ? "--coordinator_restarts=0"
                                                              : "coordinator_flags has --etcd",
                                     ")"));
      return absl::OkStatus();  // ReportExits says how it ended
    }
    const std::string who = absl::StrCat(s.daemon.Name(), " on ", s.daemon.host);
    const std::string limit = absl::StrFormat("at most %d in %.0f s", limit_.max_restarts,
                                              absl::ToDoubleSeconds(limit_.window));
    const absl::Time now = absl::Now();
    while (!recent_.empty() && now - recent_.front() >= limit_.window) recent_.pop_front();
    if (recent_.size() >= static_cast<size_t>(limit_.max_restarts)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the ", who, " ", how, " after ", recent_.size(), " restart(s) in the last ",
          absl::StrFormat("%.1f s", absl::ToDoubleSeconds(now - recent_.front())), " (", limit,
          ": --coordinator_restarts, --coordinator_restart_window_s): not restarting it; "
          "stopping the job. Its log ends:\n",
          Tail(ReadFile(s.log), 10)));
    }
    // The script or ssh reports the daemon's own end, unless it was killed itself or ssh lost
    // its connection (255): then the daemon may still run on its host and hold the port.
    const bool script_lost =
        WIFSIGNALED(*status) || (WIFEXITED(*status) && WEXITSTATUS(*status) == 255);
    if (script_lost) {
      if (std::optional<long> pid = RemotePid(s.log)) {
        SignalRemote(cluster_, s.daemon.host, *pid, "KILL");
      }
    }
    recent_.push_back(now);
    ++restarts_;
    const std::string line =
        absl::StrCat(who, " ", how, ": restarting it ",
                     SingleCoordinator(cluster_) ? "with the same flags, port and data_dir"
                                                 : "as a standby with the same flags and port",
                     " (restart ", restarts_, "; ", limit, ")");
    AppendLine(s.log, absl::StrCat(kRestartMark, restarts_, ": ", line));
    Say(line);
    absl::StatusOr<std::unique_ptr<Child>> child = Child::Start(
        HostCommand(cluster_, s.daemon.host, DaemonScript(cluster_, restarted)), s.log);
    if (!child.ok()) {
      return absl::InternalError(
          absl::StrCat("cannot restart the ", who, ": ", child.status().ToString()));
    }
    s.child = *std::move(child);
    return absl::OkStatus();
  }

 private:
  static bool CoordinatorEndedNormally(int status) {
    return WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == kJobFailedExit);
  }

  // Constant after construction.
  const ClusterSpec& cluster_;
  const RestartLimit limit_;

  std::deque<absl::Time> recent_;  // the restarts within the last window, oldest first
  int restarts_ = 0;
};

// The text after `mark` on the last line of `text` that holds it.
std::optional<std::string> LastContaining(const std::string& text, absl::string_view mark) {
  std::optional<std::string> found;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t at = line.find(mark);
    if (at != absl::string_view::npos) found = std::string(line.substr(at + mark.size()));
  }
  return found;
}

// `n` free TCP ports of 127.0.0.1, bound together (so that they differ) and released.
absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int n) {
  std::vector<int> sockets;
  std::vector<int> ports;
  absl::Status status;
  for (int i = 0; i < n && status.ok(); ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      status = absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
      break;
    }
    sockets.push_back(fd);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t size = sizeof(address);
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
      status = absl::InternalError(absl::StrCat("cannot find a free port: ", std::strerror(errno)));
      break;
    }
    ports.push_back(ntohs(address.sin_port));
  }
  for (int fd : sockets) close(fd);
  if (!status.ok()) return status;
  return ports;
}

// The port of a host:port address ([v6]:port too); 0 when there is none.
int PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) return 0;
  return port;
}

int RunSshOrLocal(const ClusterSpec& cluster, const config::Job& job, const std::string& job_text,
                  const std::string& run_dir, const RestartLimit& restart_limit, LaunchedRun run) {
  const std::string logs = absl::StrCat(run_dir, "/logs");
  const std::string remote_dir =
      cluster.backend() == ClusterSpec::LOCAL
          ? std::filesystem::absolute(run_dir).string()
          : absl::StrCat("/tmp/ps_launch/", std::filesystem::path(run_dir).filename().string());
  run.set_remote_dir(remote_dir);

  const Problems problems = Preflight(cluster, job, job_text, remote_dir);
  if (!problems.empty()) {
    Say(absl::StrCat("pre-flight checks failed; nothing was started:"));
    for (const std::string& p : problems) std::fprintf(stderr, "  %s\n", p.c_str());
    return 1;
  }
  const std::vector<Host> hosts = RunHosts(cluster, job);
  Say(absl::StrCat("pre-flight checks passed on ", hosts.size(), " host(s)"));

  std::vector<Started> started;
  auto start = [&](const Daemon& d) -> absl::Status {
    Started s;
    s.daemon = d;
    s.log = absl::StrCat(logs, "/", d.FileName(), ".log");
    absl::StatusOr<std::unique_ptr<Child>> child =
        Child::Start(HostCommand(cluster, d.host, DaemonScript(cluster, d)), s.log);
    if (!child.ok()) return child.status();
    s.child = *std::move(child);
    LaunchedDaemon* record = run.add_daemons();
    record->set_role(d.role);
    record->set_index(d.index);
    record->set_host(d.host);
    record->set_log(s.log);
    started.push_back(std::move(s));
    return WriteRun(run_dir, run);
  };
  auto fail = [&](const std::string& why) {
    Say(why);
    StopAll(cluster, started);
    ReportExits(started);
    return 1;
  };

  // Waits until the log of started[at] shows what `found` looks for (its answer), failing the run
  // when the daemon ends first, connect_timeout_s pass, or a stop signal comes.
  auto await = [&](size_t at, const std::string& what,
                   const std::function<std::optional<std::string>(const std::string&)>& found)
      -> absl::StatusOr<std::string> {
    const absl::Time deadline = absl::Now() + absl::Seconds(cluster.connect_timeout_s());
    const Started& s = started[at];
    const std::string who = absl::StrCat(s.daemon.Name(), " on ", s.daemon.host);
    while (true) {
      if (std::optional<std::string> answer = found(ReadFile(s.log))) return *answer;
      if (s.child->Poll().has_value()) {
        ReportExits(started);
        return absl::UnavailableError(
            absl::StrCat("the ", who, " failed:\n", Tail(ReadFile(s.log), 10)));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("the ", who, " did not ", what, " within ",
                                                        cluster.connect_timeout_s(), " s:\n",
                                                        Tail(ReadFile(s.log), 10)));
      }
      if (const int signal = TakeSignal(absl::Milliseconds(50)); signal != 0) {
        return absl::CancelledError(absl::StrCat("signal ", signal, ": stopping"));
      }
    }
  };
  auto set_address = [&](size_t at, const std::string& address) {
    run.mutable_daemons(static_cast<int>(at))->set_address(address);
    return WriteRun(run_dir, run);
  };

  // The etcd ps_launch starts, before the coordinators, which need it.
  std::string launched_etcd;
  if (LaunchesEtcd(cluster)) {
    std::vector<EtcdPorts> ports = FixedEtcdPorts(cluster, job);
    if (cluster.backend() == ClusterSpec::LOCAL) {
      absl::StatusOr<std::vector<int>> free = FreeLoopbackPorts(2 * ports.size());
      if (!free.ok()) return fail(free.status().ToString());
      for (size_t i = 0; i < ports.size(); ++i) {
        if (ports[i].client == 0) ports[i].client = (*free)[2 * i];
        if (ports[i].peer == 0) ports[i].peer = (*free)[2 * i + 1];
      }
    }
    const EtcdPlan etcd = PlanEtcd(cluster, job, remote_dir, ports);
    const size_t first = started.size();
    for (const Daemon& d : etcd.members) {
      if (absl::Status s = start(d); !s.ok()) return fail(s.ToString());
    }
    const std::vector<std::string> endpoints = absl::StrSplit(etcd.endpoints, ',');
    for (size_t i = 0; i < etcd.members.size(); ++i) {
      absl::StatusOr<std::string> ready =
          await(first + i, "serve its clients",
                [](const std::string& log) { return LastContaining(log, kEtcdReady); });
      if (!ready.ok()) return fail(std::string(ready.status().message()));
      if (absl::Status s = set_address(first + i, endpoints[i]); !s.ok()) {
        return fail(s.ToString());
      }
    }
    launched_etcd = etcd.endpoints;
    Say(absl::StrCat("etcd: ", etcd.members.size(), " member(s) serving at ", etcd.endpoints));
  }

  // The coordinators next; the others need their addresses. With several, the first is started
  // alone and leads before the others stand by beside it.
  const std::vector<Daemon> coordinators =
      PlanCoordinators(cluster, job, remote_dir, CoordinatorEtcd(cluster, launched_etcd));
  std::vector<size_t> coordinator_at;  // their places in `started`
  std::vector<std::string> addresses;
  std::vector<Daemon> restarted;  // what each is started again as (RestartedCoordinator)
  for (const Daemon& coordinator : coordinators) {
    if (absl::Status s = start(coordinator); !s.ok()) return fail(s.ToString());
    const size_t at = started.size() - 1;
    absl::StatusOr<std::string> address =
        await(at, "listen", [](const std::string& log) { return LastMarked(log, kListening); });
    if (!address.ok()) return fail(std::string(address.status().message()));
    if (coordinators.size() > 1 && coordinator_at.empty()) {
      absl::StatusOr<std::string> term =
          await(at, "lead", [](const std::string& log) { return LastContaining(log, kLeads); });
      if (!term.ok()) return fail(std::string(term.status().message()));
    }
    if (absl::Status s = set_address(at, *address); !s.ok()) return fail(s.ToString());
    coordinator_at.push_back(at);
    addresses.push_back(*address);
    restarted.push_back(RestartedCoordinator(coordinator, PortOf(*address)));
    Say(absl::StrCat(coordinator.Name(), " on ", coordinator.host, " listening on ", *address,
                     coordinators.size() > 1 && coordinator_at.size() == 1 ? ", leading" : ""));
  }
  const std::string address = absl::StrJoin(addresses, ",");
  run.set_coordinator(address);
  if (absl::Status s = WriteRun(run_dir, run); !s.ok()) return fail(s.ToString());
  CoordinatorKeeper keeper(cluster, restart_limit);
  const std::vector<Daemon> members = PlanMembers(cluster, job, address, remote_dir);
  for (const Daemon& d : members) {
    if (absl::Status s = start(d); !s.ok()) return fail(s.ToString());
  }
  Say(absl::StrCat("started ", job.cluster().num_servers(), " server(s) and ",
                   job.cluster().num_workers(), " worker(s); logs in ", logs,
                   "; `ps_launch status ", run_dir, "` shows them"));

  // Watch until every worker has ended, a worker failed, or a signal came.
  int exit_code = 0;
  while (true) {
    if (const int signal = TakeSignal(absl::Milliseconds(100)); signal != 0) {
      Say(absl::StrCat("signal ", signal, ": stopping every daemon"));
      exit_code = 128 + signal;
      break;
    }
    // Before ReportExits, which would take a dead coordinator's end as final.
    absl::Status kept;
    for (size_t i = 0; i < coordinator_at.size() && kept.ok(); ++i) {
      kept = keeper.Keep(started[coordinator_at[i]], restarted[i]);
    }
    if (!kept.ok()) {
      Say(std::string(kept.message()));
      exit_code = 1;
      break;
    }
    ReportExits(started);
    bool workers_done = true;
    bool worker_failed = false;
    for (const Started& s : started) {
      if (s.daemon.role != "worker") continue;
      const std::optional<int> status = s.child->Poll();
      if (!status.has_value()) {
        workers_done = false;
      } else if (!ExitedCleanly(*status)) {
        worker_failed = true;
        Say(absl::StrCat(s.daemon.Name(), " on ", s.daemon.host, " failed; its log ends:\n",
                         Tail(ReadFile(s.log), 8)));
      }
    }
    if (worker_failed) {
      Say("a worker failed: stopping every daemon");
      exit_code = 1;
      break;
    }
    if (workers_done) break;
  }
  StopAll(cluster, started);
  ReportExits(started);
  for (const Started& s : started) {
    if (s.daemon.role == "worker" && s.daemon.index == 0) {
      if (std::optional<std::string> result = LastMarked(ReadFile(s.log), "RESULT ")) {
        std::printf("RESULT %s\n", result->c_str());
        std::fflush(stdout);
      }
    }
  }
  if (exit_code == 0) Say("every worker finished; the run is stopped");
  return exit_code;
}

}  // namespace

Problems Preflight(const ClusterSpec& cluster, const config::Job& job, const std::string& job_text,
                   const std::string& remote_dir) {
  const std::vector<Host> hosts = RunHosts(cluster, job);
  // Ports are not known yet: the servers and workers check their flags with a stand-in address,
  // the coordinators theirs with stand-in etcd ports (they do not dial etcd with --dry_run).
  std::vector<EtcdPorts> etcd_ports = FixedEtcdPorts(cluster, job);
  for (size_t i = 0; i < etcd_ports.size(); ++i) {
    if (etcd_ports[i].client == 0) etcd_ports[i].client = 2379 + 2 * i;
    if (etcd_ports[i].peer == 0) etcd_ports[i].peer = 2380 + 2 * i;
  }
  const EtcdPlan etcd = PlanEtcd(cluster, job, remote_dir, etcd_ports);
  std::vector<Daemon> before_members =
      PlanCoordinators(cluster, job, remote_dir, CoordinatorEtcd(cluster, etcd.endpoints));
  if (LaunchesEtcd(cluster)) {
    before_members.insert(before_members.begin(), etcd.members.begin(), etcd.members.end());
  }
  const Daemon coordinator = PlanCoordinator(cluster, job, remote_dir);
  const std::string stand_in =
      absl::StrCat(cluster.backend() == ClusterSpec::LOCAL ? "127.0.0.1" : coordinator.host, ":",
                   cluster.coordinator_port() == 0 ? 1 : cluster.coordinator_port());
  const std::vector<Daemon> members = PlanMembers(cluster, job, stand_in, remote_dir);
  std::vector<Problems> found(hosts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < hosts.size(); ++i) {
    threads.emplace_back([&, i] {
      const std::string& host = hosts[i].name();
      std::vector<Daemon> daemons;
      for (const Daemon& d : before_members) {
        if (d.host == host) daemons.push_back(d);
      }
      for (const Daemon& d : members) {
        if (d.host == host) daemons.push_back(d);
      }
      const std::string script = PreflightScript(cluster, job, job_text, remote_dir, daemons);
      const absl::Duration timeout = absl::Seconds(cluster.ssh().connect_timeout_s() + 60);
      absl::StatusOr<Captured> done = RunCaptured(HostCommand(cluster, host, script), timeout);
      const std::string who = absl::StrCat("host ", host, ": ");
      if (!done.ok()) {
        found[i].push_back(who + done.status().ToString());
        return;
      }
      for (absl::string_view line : absl::StrSplit(done->output, '\n')) {
        if (absl::ConsumePrefix(&line, "PROBLEM ")) found[i].push_back(absl::StrCat(who, line));
      }
      if (done->timed_out) {
        found[i].push_back(
            absl::StrCat(who, "did not answer within ", absl::FormatDuration(timeout)));
      } else if (!absl::StrContains(done->output, "PREFLIGHT DONE") && found[i].empty()) {
        const bool ssh_failed = cluster.backend() == ClusterSpec::SSH && WIFEXITED(done->status) &&
                                WEXITSTATUS(done->status) == 255;
        found[i].push_back(
            absl::StrCat(who, ssh_failed ? "cannot be reached over ssh: " : "the check failed: ",
                         absl::StripAsciiWhitespace(Tail(done->output, 3))));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Problems all;
  for (Problems& p : found) all.insert(all.end(), p.begin(), p.end());
  return all;
}

int RunJob(const RunOptions& options) {
  absl::StatusOr<config::Job> job = LoadJobFile(options.job_path);
  if (!job.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<ClusterSpec> cluster = LoadClusterFile(options.cluster_path, *job);
  if (!cluster.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(cluster.status().message()).c_str());
    return 2;
  }
  const std::string run_dir = options.run_dir.empty() ? DefaultRunDir(*job) : options.run_dir;
  std::error_code error;
  std::filesystem::create_directories(absl::StrCat(run_dir, "/logs"), error);
  if (error) {
    std::fprintf(stderr, "ps_launch: cannot create %s: %s\n", run_dir.c_str(),
                 error.message().c_str());
    return 1;
  }
  if (std::filesystem::exists(absl::StrCat(run_dir, "/", kRunFile))) {
    std::fprintf(stderr, "ps_launch: %s already holds a run; give another --run_dir\n",
                 run_dir.c_str());
    return 2;
  }
  const std::string job_text = ReadFile(options.job_path);
  std::ofstream(absl::StrCat(run_dir, "/job.pbtxt")) << job_text;
  std::ofstream(absl::StrCat(run_dir, "/cluster.pbtxt")) << ReadFile(options.cluster_path);

  // Signals are taken by the watch loop, not by a handler; children start with them unblocked.
  const sigset_t stop = StopSignals();
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  LaunchedRun run;
  run.set_job_name(job->name());
  run.set_backend(cluster->backend());
  run.set_launcher_pid(getpid());
  if (absl::Status written = WriteRun(run_dir, run); !written.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", written.ToString().c_str());
    return 1;
  }
  Say(absl::StrCat("run ", run_dir, " (", ClusterSpec::Backend_Name(cluster->backend()), ")"));
  if (cluster->backend() == ClusterSpec::SLURM) {
    return RunSlurm(*cluster, *job, run_dir, std::move(run));
  }
  return RunSshOrLocal(*cluster, *job, job_text, run_dir, options.coordinator_restarts,
                       std::move(run));
}

absl::Status WriteRun(const std::string& run_dir, const LaunchedRun& run) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(run, &text);
  const std::string path = absl::StrCat(run_dir, "/", kRunFile);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) return absl::FailedPreconditionError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rename ", tmp, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

int TakeSignal(absl::Duration wait) {
  const sigset_t set = StopSignals();
  const timespec timeout = absl::ToTimespec(wait);
  const int signal = sigtimedwait(&set, nullptr, &timeout);
  return signal > 0 ? signal : 0;
}

void Say(const std::string& line) {
  std::fprintf(stderr, "ps_launch: %s\n", line.c_str());
  std::fflush(stderr);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<LaunchedRun> ReadRun(const std::string& run_dir) {
  const std::string path = absl::StrCat(run_dir, "/", kRunFile);
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat(run_dir, " is not a run folder (no ", kRunFile, ")"));
  }
  LaunchedRun run;
  if (!google::protobuf::TextFormat::ParseFromString(ReadFile(path), &run)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse ", path));
  }
  return run;
}

namespace {

bool ProcessAlive(long pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// The cluster file kept in the run folder (for the ssh settings); the job is needed only for
// its counts, which the run already fixed.
absl::StatusOr<ClusterSpec> RunCluster(const std::string& run_dir) {
  absl::StatusOr<config::Job> job = LoadJobFile(absl::StrCat(run_dir, "/job.pbtxt"));
  if (!job.ok()) return job.status();
  return LoadClusterFile(absl::StrCat(run_dir, "/cluster.pbtxt"), *job);
}

}  // namespace

int ShowStatus(const std::string& run_dir) {
  absl::StatusOr<LaunchedRun> run = ReadRun(run_dir);
  if (!run.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(run.status().message()).c_str());
    return 1;
  }
  const bool launcher = ProcessAlive(run->launcher_pid());
  std::printf("run %s: job %s, %s backend, ps_launch (pid %lld) %s\n", run_dir.c_str(),
              run->job_name().c_str(), ClusterSpec::Backend_Name(run->backend()).c_str(),
              static_cast<long long>(run->launcher_pid()), launcher ? "running" : "ended");
  if (!run->slurm_job_id().empty()) {
    std::printf("slurm job %s: %s\n", run->slurm_job_id().c_str(),
                SlurmJobState(run->slurm_job_id()).c_str());
    // Slurm places the daemons: its steps say where they run.
    const std::string steps = SlurmJobSteps(run->slurm_job_id());
    if (!steps.empty())
      std::printf("%-12s %-40s %s\n%s", "STEP", "PROGRAM", "NODES", steps.c_str());
  }
  int coordinators = 0;
  for (const LaunchedDaemon& d : run->daemons()) coordinators += d.role() == "coordinator" ? 1 : 0;
  const bool several = coordinators > 1;
  std::printf("%-12s %-8s %-20s %-8s %s\n", "DAEMON", "INDEX", "HOST", "PID", "STATE");
  for (const LaunchedDaemon& d : run->daemons()) {
    const std::string log = ReadFile(d.log());
    std::optional<std::string> exit = LastMarked(log, kExitMark);
    std::optional<long> pid = RemotePid(d.log());
    std::string state;
    if (exit.has_value()) {
      state = *exit;
    } else if (launcher) {
      state = "running";
    } else {
      state = "unknown (ps_launch has ended without recording its exit)";
    }
    if (!d.address().empty() && (d.role() == "etcd" || several)) {
      absl::StrAppend(&state, "; at ", d.address());
    }
    if (d.role() == "coordinator" && several) {
      // What its log said last: it leads, or stands by.
      std::string role;
      for (absl::string_view line : absl::StrSplit(log, '\n')) {
        const size_t leads = line.find(kLeads);
        if (leads != absl::string_view::npos) {
          role = absl::StrCat("leads (term ", line.substr(leads + strlen(kLeads)));
        } else if (absl::StrContains(line, " stands by (etcd ") ||
                   absl::StrContains(line, " no longer leads")) {
          role = "stands by";
        }
      }
      if (!role.empty() && !exit.has_value()) absl::StrAppend(&state, "; ", role);
    }
    if (d.role() == "coordinator") {
      int restarts = 0;
      for (absl::string_view line : absl::StrSplit(log, '\n')) {
        restarts += absl::StartsWith(line, kRestartMark) ? 1 : 0;
      }
      if (restarts > 0) absl::StrAppend(&state, "; restarted ", restarts, " time(s)");
    }
    if (d.role() == "worker") {
      if (std::optional<std::string> progress =
              LastMarked(log, absl::StrCat("worker ", d.index(), ": step "))) {
        absl::StrAppend(&state, "; step ", *progress);
      }
    }
    std::printf("%-12s %-8u %-20s %-8s %s\n", d.role().c_str(), d.index(), d.host().c_str(),
                pid.has_value() ? absl::StrCat(*pid).c_str() : "-", state.c_str());
  }
  if (!run->coordinator().empty() && launcher) {
    absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
        CoordinatorClient::Connect(run->coordinator(), absl::Seconds(3));
    absl::StatusOr<rpc::ClusterStatus> status =
        client.ok() ? (*client)->GetStatus() : absl::StatusOr<rpc::ClusterStatus>(client.status());
    if (!status.ok()) {
      std::printf("coordinator %s: %s\n", run->coordinator().c_str(),
                  status.status().ToString().c_str());
    } else {
      int alive = 0;
      for (const rpc::MemberStatus& m : status->members()) alive += m.alive() ? 1 : 0;
      std::printf(
          "coordinator %s: %d of %d members alive, shard map version %llu, steps done: "
          "slowest worker %lld, fastest %lld\n",
          run->coordinator().c_str(), alive, status->members_size(),
          static_cast<unsigned long long>(status->shard_map().version()),
          static_cast<long long>(status->clocks().min_clock() + 1),
          static_cast<long long>(status->clocks().max_clock() + 1));
    }
  }
  return 0;
}

int StopRun(const std::string& run_dir) {
  absl::StatusOr<LaunchedRun> run = ReadRun(run_dir);
  if (!run.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(run.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<ClusterSpec> cluster = RunCluster(run_dir);
  if (!cluster.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", std::string(cluster.status().message()).c_str());
    return 1;
  }
  const absl::Duration grace = absl::Seconds(cluster->stop_grace_s());
  if (ProcessAlive(run->launcher_pid())) {
    // Its own stop is the orderly one (workers first, logs recorded).
    kill(run->launcher_pid(), SIGTERM);
    const absl::Time deadline = absl::Now() + grace + absl::Seconds(30);
    while (ProcessAlive(run->launcher_pid()) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (!ProcessAlive(run->launcher_pid())) {
      std::printf("stopped: ps_launch (pid %lld) stopped the run\n",
                  static_cast<long long>(run->launcher_pid()));
      return 0;
    }
    std::fprintf(stderr, "ps_launch: pid %lld did not stop; stopping the daemons directly\n",
                 static_cast<long long>(run->launcher_pid()));
  }
  if (!run->slurm_job_id().empty()) return CancelSlurmJob(run->slurm_job_id()) ? 0 : 1;
  // The launcher is gone: signal each daemon not known to have exited on its host.
  std::vector<std::pair<const LaunchedDaemon*, long>> running;
  for (const LaunchedDaemon& d : run->daemons()) {
    if (LastMarked(ReadFile(d.log()), kExitMark).has_value()) continue;
    if (std::optional<long> pid = RemotePid(d.log())) {
      SignalRemote(*cluster, d.host(), *pid, "TERM");
      running.push_back({&d, *pid});
    }
  }
  const absl::Time deadline = absl::Now() + grace;
  for (const auto& [d, pid] : running) {
    bool gone = false;
    while (!gone) {
      const absl::StatusOr<Captured> probe = RunCaptured(
          HostCommand(*cluster, d->host(), absl::StrCat("kill -0 ", pid, " 2>/dev/null")),
          absl::Seconds(cluster->ssh().connect_timeout_s() + 5));
      gone = probe.ok() && !ExitedCleanly(probe->status) &&
             !(WIFEXITED(probe->status) && WEXITSTATUS(probe->status) == 255);
      if (gone || absl::Now() >= deadline) break;
      absl::SleepFor(absl::Milliseconds(200));
    }
    if (!gone) {
      SignalRemote(*cluster, d->host(), pid, "KILL");
      std::fprintf(stderr, "ps_launch: %s %u on %s: SIGKILL after %s\n", d->role().c_str(),
                   d->index(), d->host().c_str(), absl::FormatDuration(grace).c_str());
    }
    AppendLine(d->log(), absl::StrCat(kExitMark, gone ? "stopped by ps_launch stop"
                                                      : "killed by ps_launch stop"));
  }
  std::printf("stopped %zu daemon(s)\n", running.size());
  return 0;
}

}  // namespace launch
}  // namespace ps

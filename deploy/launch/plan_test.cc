#include "deploy/launch/plan.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "deploy/launch/child.h"

namespace ps {
namespace launch {
namespace {

config::Job Job(int servers, int workers) {
  config::Job job;
  job.set_name("j");
  job.mutable_cluster()->set_num_servers(servers);
  job.mutable_cluster()->set_num_workers(workers);
  return job;
}

ClusterSpec Ssh() {
  ClusterSpec c;
  c.set_backend(ClusterSpec::SSH);
  c.set_bin_dir("/opt/ps/bin");
  Host* a = c.add_hosts();
  a->set_name("node-a");
  a->set_coordinator(true);
  a->set_servers(1);
  Host* b = c.add_hosts();
  b->set_name("node-b");
  b->set_advertise("10.0.0.2");
  b->set_servers(1);
  b->set_workers(3);
  b->set_gpus(2);
  Host* d = c.add_hosts();
  d->set_name("node-c");
  d->set_workers(1);
  c.add_worker_flags("--progress_s=1");
  return c;
}

bool Has(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

TEST_CASE("ssh: every daemon listens on every address and advertises its host", "[plan]") {
  const ClusterSpec c = Ssh();
  const Daemon coordinator = PlanCoordinator(c, Job(2, 4), "/tmp/run");
  CHECK(coordinator.host == "node-a");
  CHECK(coordinator.binary == "server/coordinator/ps_coordinator");
  CHECK(coordinator.flags == std::vector<std::string>{"--job=/tmp/run/job.pbtxt",
                                                      "--listen=0.0.0.0:0", "--advertise=node-a",
                                                      "--data_dir=/tmp/run/coordinator_data"});
  const std::vector<Daemon> members = PlanMembers(c, Job(2, 4), "node-a:7000", "/tmp/run");
  REQUIRE(members.size() == 6);
  CHECK(members[0].Name() == "server 0");
  CHECK(members[0].host == "node-a");
  CHECK(members[1].host == "node-b");
  CHECK(Has(members[1].flags, "--advertise=10.0.0.2"));
  CHECK(Has(members[1].flags, "--coordinator=node-a:7000"));
  CHECK(Has(members[1].flags, "--listen=0.0.0.0:0"));
  // Workers take ranks in host order; GPUs are shared round robin.
  for (int rank = 0; rank < 4; ++rank) {
    const Daemon& w = members[2 + rank];
    INFO(w.Name());
    CHECK(w.index == rank);
    CHECK(Has(w.flags, absl::StrCat("--rank=", rank)));
    CHECK(Has(w.flags, "--connect_timeout_s=45"));
    CHECK(w.flags.back() == "--progress_s=1");
  }
  CHECK(members[2].cuda_visible_devices == "0");
  CHECK(members[3].cuda_visible_devices == "1");
  CHECK(members[4].cuda_visible_devices == "0");
  CHECK(members[2].workers_on_host == 3);
  CHECK(members[5].host == "node-c");
  CHECK(members[5].cuda_visible_devices.empty());
  CHECK(Has(members[5].flags, "--backend=cpu"));
  CHECK(members[5].FileName() == "worker3");
}

TEST_CASE("local: everything on loopback on this machine", "[plan]") {
  ClusterSpec c;
  c.set_bin_dir("bin");
  const std::vector<Host> hosts = RunHosts(c, Job(2, 2));
  REQUIRE(hosts.size() == 1);
  CHECK(hosts[0].servers() == 2);
  const Daemon coordinator = PlanCoordinator(c, Job(2, 2), "/r");
  CHECK(Has(coordinator.flags, "--listen=127.0.0.1:0"));
  for (const Daemon& d : PlanMembers(c, Job(2, 2), "127.0.0.1:5", "/r")) {
    CHECK(Has(d.flags, "--listen=127.0.0.1:0"));
    CHECK_FALSE(Has(d.flags, "--backend=cpu"));
  }
  CHECK(HostCommand(c, "localhost", "true") == std::vector<std::string>{"/bin/sh", "-c", "true"});
}

TEST_CASE("a restarted coordinator keeps its flags and data_dir on the port it bound",
          "[plan][restart]") {
  ClusterSpec c = Ssh();
  c.add_coordinator_flags("--heartbeat_ms=200");
  const Daemon first = PlanCoordinator(c, Job(2, 4), "/tmp/run");
  const Daemon again = RestartedCoordinator(first, 41234);
  CHECK(again.host == "node-a");
  CHECK(again.binary == first.binary);
  CHECK(again.flags == std::vector<std::string>{"--job=/tmp/run/job.pbtxt",
                                                "--listen=0.0.0.0:41234", "--advertise=node-a",
                                                "--data_dir=/tmp/run/coordinator_data",
                                                "--heartbeat_ms=200"});
  // LOCAL: loopback, the run folder's data_dir.
  ClusterSpec local;
  local.set_bin_dir("bin");
  const Daemon here = RestartedCoordinator(PlanCoordinator(local, Job(2, 2), "/r"), 5000);
  CHECK(Has(here.flags, "--listen=127.0.0.1:5000"));
  CHECK(Has(here.flags, "--data_dir=/r/coordinator_data"));
  CHECK(SingleCoordinator(local));
  // Its own --data_dir: the description's, not the run folder's.
  local.add_coordinator_flags("--data_dir=/var/ps");
  const std::vector<std::string> own = PlanCoordinator(local, Job(2, 2), "/r").flags;
  CHECK_FALSE(Has(own, "--data_dir=/r/coordinator_data"));
  CHECK(Has(own, "--data_dir=/var/ps"));
}

TEST_CASE("coordinators with etcd get no data_dir: their state is in etcd", "[plan][restart]") {
  for (const char* flag : {"--etcd=10.0.0.1:2379", "-etcd=e:2379", "--etcd"}) {
    ClusterSpec c;
    c.set_bin_dir("bin");
    c.add_coordinator_flags(flag);
    INFO(flag);
    CHECK_FALSE(SingleCoordinator(c));
    for (const std::string& f : PlanCoordinator(c, Job(2, 2), "/r").flags) {
      CHECK_FALSE(absl::StartsWith(f, "--data_dir="));
    }
  }
  ClusterSpec other;
  other.add_coordinator_flags("--etcd_prefix=/x/");
  CHECK(SingleCoordinator(other));
}

TEST_CASE(
    "coordinators: 3 over ssh: etcd on the first three hosts, a coordinator on each "
    "coordinator host",
    "[plan][etcd]") {
  ClusterSpec c = Ssh();
  c.set_coordinators(3);
  c.mutable_hosts(1)->set_coordinator(true);
  c.mutable_hosts(2)->set_coordinator(true);
  const config::Job job = Job(2, 4);
  CHECK(LaunchesEtcd(c));
  CHECK(RestartsCoordinators(c));
  CHECK_FALSE(SingleCoordinator(c));
  CHECK(EtcdHosts(c, job) == std::vector<std::string>{"node-a", "node-b", "node-c"});
  const std::vector<EtcdPorts> ports = FixedEtcdPorts(c, job);
  REQUIRE(ports.size() == 3);
  CHECK(ports[2].client == 2379);
  CHECK(ports[2].peer == 2380);
  const EtcdPlan etcd = PlanEtcd(c, job, "/tmp/ps_launch/run7", ports);
  CHECK(etcd.endpoints == "node-a:2379,10.0.0.2:2379,node-c:2379");
  REQUIRE(etcd.members.size() == 3);
  const Daemon& b = etcd.members[1];
  CHECK(b.Name() == "etcd 1");
  CHECK(b.FileName() == "etcd1");
  CHECK(b.host == "node-b");
  CHECK(b.binary == "etcd");
  CHECK(Has(b.flags, "--name=etcd1"));
  CHECK(Has(b.flags, "--data-dir=/tmp/ps_launch/run7/etcd_data/etcd1"));
  // node-b advertises an IP address: its member listens there; node-a, a name: on every address.
  CHECK(Has(b.flags, "--listen-client-urls=http://10.0.0.2:2379"));
  CHECK(Has(etcd.members[0].flags, "--listen-peer-urls=http://0.0.0.0:2380"));
  CHECK(Has(b.flags,
            "--initial-cluster=etcd0=http://node-a:2380,etcd1=http://10.0.0.2:2380,"
            "etcd2=http://node-c:2380"));
  CHECK(Has(b.flags, "--initial-cluster-token=ps-run7"));
  const std::vector<Daemon> coordinators =
      PlanCoordinators(c, job, "/tmp/ps_launch/run7", etcd.endpoints);
  REQUIRE(coordinators.size() == 3);
  for (int i = 0; i < 3; ++i) {
    const Daemon& d = coordinators[i];
    CHECK(d.index == i);
    CHECK(d.host == c.hosts(i).name());
    CHECK(d.FileName() == "coordinator" + std::to_string(i));
    CHECK(Has(d.flags, "--etcd=" + etcd.endpoints));
    CHECK(Has(d.flags, "--etcd_prefix=/ps/j/run7/"));
    for (const std::string& f : d.flags) CHECK_FALSE(absl::StartsWith(f, "--data_dir"));
  }
}

TEST_CASE("coordinators: 3 on loopback: consecutive fixed ports, or free ones", "[plan][etcd]") {
  ClusterSpec c;
  c.set_bin_dir("/b");
  c.set_coordinators(3);
  c.set_coordinator_port(7000);
  const config::Job job = Job(2, 2);
  CHECK(EtcdHosts(c, job) == std::vector<std::string>(3, "localhost"));
  CHECK(FixedEtcdPorts(c, job)[1].client == 0);  // the launcher picks them
  c.set_etcd_client_port(3000);
  c.set_etcd_peer_port(4000);
  CHECK(FixedEtcdPorts(c, job)[2].client == 3002);
  CHECK(FixedEtcdPorts(c, job)[2].peer == 4002);
  const EtcdPlan etcd = PlanEtcd(c, job, "/r", FixedEtcdPorts(c, job));
  CHECK(etcd.endpoints == "127.0.0.1:3000,127.0.0.1:3001,127.0.0.1:3002");
  const std::vector<Daemon> coordinators = PlanCoordinators(c, job, "/r", etcd.endpoints);
  REQUIRE(coordinators.size() == 3);
  CHECK(Has(coordinators[2].flags, "--listen=127.0.0.1:7002"));
  CHECK(coordinators[2].host == "localhost");
  // With etcd_endpoints the coordinators use that etcd, and none is started.
  c.clear_etcd_client_port();
  c.clear_etcd_peer_port();
  c.set_etcd_endpoints("e1:2379,e2:2379");
  CHECK_FALSE(LaunchesEtcd(c));
  CHECK(CoordinatorEtcd(c, "ignored") == "e1:2379,e2:2379");
}

TEST_CASE("ssh commands use BatchMode and the description's settings", "[plan]") {
  ClusterSpec c = Ssh();
  c.mutable_ssh()->set_user("ps");
  c.mutable_ssh()->set_port(2222);
  c.mutable_ssh()->add_options("-F");
  c.mutable_ssh()->add_options("/etc/ps/ssh_config");
  const std::vector<std::string> argv = HostCommand(c, "node-b", "echo 'hi'");
  CHECK(argv == std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                                         "-l", "ps", "-p", "2222", "-F", "/etc/ps/ssh_config",
                                         "node-b", "sh -c 'echo '\\''hi'\\'''"});
}

TEST_CASE("ShellQuote survives the shell", "[plan]") {
  const std::string text = "a b 'c' \"d\" $HOME `x` \\ ;|&";
  absl::StatusOr<Captured> out =
      RunCaptured({"/bin/sh", "-c", "printf %s " + ShellQuote(text)}, absl::Seconds(10));
  REQUIRE(out.ok());
  CHECK(out->output == text);
}

TEST_CASE("a daemon's script stops its daemon when its stdin ends", "[plan]") {
  ClusterSpec c;
  c.set_bin_dir("/bin");
  Daemon d;
  d.role = "server";
  d.binary = "sleep";
  d.flags = {"600"};
  const std::string log = TempPath("plan_test_sleep.log");
  std::remove(log.c_str());
  absl::StatusOr<std::unique_ptr<Child>> child =
      Child::Start(HostCommand(c, "localhost", DaemonScript(c, d)), log);
  REQUIRE(child.ok());
  // The script says the daemon's pid first.
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!absl::StrContains(ReadFile(log), "ps_launch: pid ") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  REQUIRE(absl::StrContains(ReadFile(log), "ps_launch: pid "));
  CHECK_FALSE((*child)->Poll().has_value());
  (*child)->CloseStdin();
  const std::optional<int> status = (*child)->WaitUntil(absl::Now() + absl::Seconds(20));
  REQUIRE(status.has_value());
  // sleep was killed by SIGTERM: the script exits with 128 + 15.
  CHECK(ExitDescription(*status) == "exited with status 143");
}

TEST_CASE("pre-flight finds missing binaries, bad flags and unreadable data", "[plan]") {
  // The real daemons, from the test's runfiles.
  ClusterSpec c;
  c.set_bin_dir(".");
  config::Job job = Job(1, 1);
  job.mutable_data()->add_train_paths(TempPath("no_such_train.tsv"));
  const std::string present = TempPath("plan_test_eval.tsv");
  std::ofstream(present) << "1\t2\n";
  job.mutable_data()->add_eval_paths(present);
  const std::string job_text = "name: \"j\"\ntables { name: \"t\" dim: 4 }\n";
  const std::string remote_dir = TempPath("plan_test_run");
  // An earlier run's coordinator state, which a coordinator of this run must not take up.
  const std::string stale = CoordinatorDataDir(remote_dir);
  std::filesystem::create_directories(stale);
  std::ofstream(stale + "/CURRENT") << "stale\n";

  std::vector<Daemon> daemons = PlanMembers(c, job, "127.0.0.1:1", remote_dir);
  Daemon missing = daemons[0];
  missing.binary = "server/no_such_binary";
  missing.index = 7;
  daemons.push_back(missing);
  Daemon bad_flag = daemons[1];
  bad_flag.index = 9;
  bad_flag.flags.push_back("--listen=1.2.3.4:5:6");
  daemons.push_back(bad_flag);
  daemons.push_back(PlanCoordinator(c, job, remote_dir));

  absl::StatusOr<Captured> out = RunCaptured(
      HostCommand(c, "localhost", PreflightScript(c, job, job_text, remote_dir, daemons)),
      absl::Seconds(60));
  REQUIRE(out.ok());
  INFO(out->output);
  CHECK(absl::StrContains(out->output, "PREFLIGHT DONE"));
  CHECK(absl::StrContains(out->output, "PROBLEM server 7: no binary ./server/no_such_binary"));
  CHECK(absl::StrContains(out->output, "PROBLEM worker 9: ps_worker: --listen: bad address"));
  CHECK(absl::StrContains(out->output,
                          absl::StrCat("PROBLEM data file ", TempPath("no_such_train.tsv"))));
  CHECK_FALSE(absl::StrContains(out->output, present));
  // The real server and worker accept their planned flags.
  CHECK_FALSE(absl::StrContains(out->output, "PROBLEM server 0"));
  CHECK_FALSE(absl::StrContains(out->output, "PROBLEM worker 0"));
  // The job was written where the coordinator will read it; the stale state is gone.
  CHECK(ReadFile(remote_dir + "/job.pbtxt") == job_text);
  CHECK_FALSE(std::filesystem::exists(stale));
}

}  // namespace
}  // namespace launch
}  // namespace ps

#include "tests/testing/etcd_cluster.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/coordinator/etcd_client.h"
#include "tests/testing/eventually.h"
#include "tests/testing/ports.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace testing {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(int members,
                                                                absl::Duration timeout) {
  if (access(kEtcd, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kEtcd, " is missing: deploy/setup.sh installs Debian's etcd-server"));
  }
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster());
  static int clusters = 0;
  const std::string base = absl::StrCat(TempDir(), "/etcd", getpid(), "_", clusters++);
  std::vector<std::string> peers;
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = absl::StrCat("etcd", i);
    m.data_dir = absl::StrCat(base, "/", m.name);
    m.client_port = FreeLoopbackPort();
    m.peer_port = FreeLoopbackPort();
    peers.push_back(absl::StrCat(m.name, "=http://127.0.0.1:", m.peer_port));
    cluster->members_.push_back(std::move(m));
  }
  cluster->initial_cluster_ = absl::StrJoin(peers, ",");
  for (int i = 0; i < members; ++i) {
    absl::Status started = cluster->StartMember(i, /*existing=*/false);
    if (!started.ok()) return started;
  }
  for (int i = 0; i < members; ++i) {
    absl::Status ready = cluster->WaitReady(i, timeout);
    if (!ready.ok()) return ready;
  }
  return cluster;
}

EtcdCluster::~EtcdCluster() {
  for (Member& m : members_) {
    if (m.process != nullptr) m.process->Kill();
  }
}

std::string EtcdCluster::endpoint(int i) const {
  return absl::StrCat("127.0.0.1:", members_[i].client_port);
}

std::string EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (int i = 0; i < size(); ++i) out.push_back(endpoint(i));
  return absl::StrJoin(out, ",");
}

int EtcdCluster::pid(int i) const {
  return members_[i].process == nullptr ? 0 : members_[i].process->pid();
}

absl::Status EtcdCluster::StartMember(int i, bool existing) {
  Member& m = members_[i];
  const std::string client = absl::StrCat("http://127.0.0.1:", m.client_port);
  const std::string peer = absl::StrCat("http://127.0.0.1:", m.peer_port);
  absl::StatusOr<std::unique_ptr<Daemon>> process =
      Daemon::Launch(kEtcd, {"--name",
                             m.name,
                             "--data-dir",
                             m.data_dir,
                             "--listen-client-urls",
                             client,
                             "--advertise-client-urls",
                             client,
                             "--listen-peer-urls",
                             peer,
                             "--initial-advertise-peer-urls",
                             peer,
                             "--initial-cluster",
                             initial_cluster_,
                             "--initial-cluster-state",
                             existing ? "existing" : "new",
                             "--initial-cluster-token",
                             absl::StrCat("ps-test-", getpid()),
                             "--heartbeat-interval",
                             "50",
                             "--election-timeout",
                             "500",
                             "--max-request-bytes",
                             "33554432",
                             "--logger",
                             "zap",
                             "--log-outputs",
                             "stderr"});
  if (!process.ok()) return process.status();
  m.process = std::move(*process);
  return absl::OkStatus();
}

absl::Status EtcdCluster::WaitReady(int i, absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<coordinator::EtcdClient>> client =
      coordinator::EtcdClient::Create(endpoint(i));
  if (!client.ok()) return client.status();
  std::string last;
  const bool ready = Eventually(
      [&] {
        std::vector<coordinator::EtcdClient::EndpointHealth> health =
            (*client)->CheckEndpoints(absl::Milliseconds(500));
        last = health[0].error;
        return health[0].healthy;
      },
      timeout, absl::Milliseconds(50));
  if (ready) return absl::OkStatus();
  const std::string log = members_[i].process == nullptr ? "" : members_[i].process->ReadLog();
  return absl::DeadlineExceededError(
      absl::StrCat("etcd member ", i, " at ", endpoint(i), " not ready: ", last, "\n",
                   log.substr(log.size() > 4000 ? log.size() - 4000 : 0)));
}

int EtcdCluster::RaftFollower() const {
  for (int i = 0; i < size(); ++i) {
    if (members_[i].process == nullptr) continue;
    absl::StatusOr<std::unique_ptr<coordinator::EtcdClient>> client =
        coordinator::EtcdClient::Create(endpoint(i));
    if (!client.ok()) continue;
    const auto health = (*client)->CheckEndpoints(absl::Seconds(1));
    if (health[0].healthy && !health[0].is_raft_leader) return i;
  }
  return -1;
}

void EtcdCluster::Kill(int i) {
  if (members_[i].process == nullptr) return;
  members_[i].process->Kill();
  members_[i].process.reset();
}

absl::Status EtcdCluster::Restart(int i, absl::Duration timeout) {
  Kill(i);
  absl::Status started = StartMember(i, /*existing=*/true);
  if (!started.ok()) return started;
  return WaitReady(i, timeout);
}

}  // namespace testing
}  // namespace ps

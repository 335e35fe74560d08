// Real etcd clusters for tests: Debian's etcd (/usr/bin/etcd, from deploy/setup.sh's etcd-server)
// started as child processes on loopback ports, each member with its data folder under the test's
// temporary folder, and killed, paused and restarted for real.
#ifndef PS_TESTS_TESTING_ETCD_CLUSTER_H_
#define PS_TESTS_TESTING_ETCD_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/daemon.h"

namespace ps {
namespace testing {

// An EtcdCluster is `members` etcd processes forming one cluster, with a short raft heartbeat
// (50 ms) and election timeout (500 ms), so that etcd grants leases of 1 s and elects a new raft
// leader within about a second. Thread-compatible.
class EtcdCluster {
 public:
  // Starts the members and waits up to `timeout` until each answers a status request with a raft
  // leader. FAILED_PRECONDITION when /usr/bin/etcd is missing (run deploy/setup.sh);
  // DEADLINE_EXCEEDED with the members' log tails when the cluster does not come up.
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(
      int members, absl::Duration timeout = absl::Seconds(30));

  // Kills every member still running.
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // Every member's client endpoint, "127.0.0.1:PORT,127.0.0.1:PORT,...".
  std::string endpoints() const;
  // Member `i`'s client endpoint.
  std::string endpoint(int i) const;

  // SIGKILL of member `i` (its data folder stays).
  void Kill(int i);
  // Starts member `i` again on its data folder and ports, and waits up to `timeout` until it
  // answers with a raft leader (which needs a quorum of members up). Errors as Start's.
  absl::Status Restart(int i, absl::Duration timeout = absl::Seconds(30));
  // A running member that is not raft's leader, or -1 when none answers so.
  int RaftFollower() const;
  // Member i's process id (0 once killed).
  int pid(int i) const;

 private:
  struct Member {
    std::string name;
    std::string data_dir;
    int client_port = 0;
    int peer_port = 0;
    std::unique_ptr<Daemon> process;
  };
  EtcdCluster() = default;

  absl::Status StartMember(int i, bool existing);
  // Waits until member `i` reports a raft leader.
  absl::Status WaitReady(int i, absl::Duration timeout);

  std::vector<Member> members_;
  std::string initial_cluster_;
};

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_ETCD_CLUSTER_H_

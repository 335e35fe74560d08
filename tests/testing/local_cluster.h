// A job's cluster on this machine, for integration tests and benchmarks: a ps_coordinator and
// ps_server daemons on loopback, and ps_worker processes run to their end, whose `RESULT {json}`
// lines report the training. Also the files such a job reads: its text-format config, and
// synthetic data from ps_datagen.
#ifndef PS_TESTS_TESTING_LOCAL_CLUSTER_H_
#define PS_TESTS_TESTING_LOCAL_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "tests/testing/daemon.h"

namespace ps {
namespace testing {

struct LocalClusterOptions {
  // The folder holding server/coordinator/ps_coordinator, server/ps_server and worker/ps_worker.
  // Default "": paths relative to the working directory, which is a test's runfiles root.
  std::string bin_dir;
  // ps_server processes to start; >= 0. Default 2.
  int servers = 2;
  // Flags every ps_server gets after --coordinator (e.g. {"--empty_handler"}). Default none.
  std::vector<std::string> server_args;
  // Flags the ps_coordinator gets after --job (e.g. {"--restore=DIR"}). Default none.
  std::vector<std::string> coordinator_args;
  // ps_coordinator processes; >= 1. Default 1. More than one needs `etcd`: each then gets
  // --etcd=`etcd` (one leads, the others stand by), and servers and workers are given every
  // coordinator's address.
  int coordinators = 1;
  // etcd's endpoints (testing::EtcdCluster::endpoints()), with coordinators > 1 or alone.
  std::string etcd;
};

// A LocalCluster is a ps_coordinator and its ps_server daemons, children of this process (see
// Daemon: they die with the thread that started them, and are killed when this goes away), and
// runs ps_worker processes against them. Thread-compatible.
class LocalCluster {
 public:
  // Starts a ps_coordinator with --job=`job_path`, then options.servers ps_servers registered
  // with it (with options.server_args), each started once the one before reports its port. The
  // first error of Daemon::Start; the daemons already started are then killed.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const std::string& job_path,
                                                             const LocalClusterOptions& options);

  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // The first coordinator (the only one without etcd).
  const Daemon& coordinator() const { return *coordinators_[0]; }
  int num_coordinators() const { return static_cast<int>(coordinators_.size()); }
  // Coordinator i; null while it is killed.
  Daemon* coordinator(int i) const { return coordinators_[i].get(); }
  // Every coordinator's address, comma-separated, as servers and workers are given them.
  std::string coordinator_addresses() const;
  // Which coordinator answers a status call now (the leader), or -1 when none does; each is
  // given `timeout` to answer.
  int LeaderIndex(absl::Duration timeout = absl::Seconds(1)) const;
  // The status from the coordinator that answers (the leader), or nullopt when none does.
  std::optional<rpc::ClusterStatus> LeaderStatus(absl::Duration timeout = absl::Seconds(1)) const;
  // SIGKILL of coordinator i, which stays down until RestartCoordinator(i).
  void KillCoordinator(int i);
  // Starts coordinator i again on its port, with its flags (a standby, with etcd). Daemon's
  // errors.
  absl::Status RestartCoordinator(int i);
  const std::vector<std::unique_ptr<Daemon>>& servers() const { return servers_; }

  // Runs worker_args.size() ps_worker processes at once, rank r with `--coordinator=<address>
  // --rank=r --compute_threads=<cores / workers, at least 1>` followed by worker_args[r] (e.g.
  // {"--progress_s=60", "--slowdown=2"}), each from a thread of its own that lives until its
  // process has exited, and waits for all of them. Their results by rank, each with exit code 0.
  // Otherwise the error of the lowest rank that has one: RunProcess's (DEADLINE_EXCEEDED after
  // `timeout`), or INTERNAL "worker R exited with C:" followed by its stderr.
  absl::StatusOr<std::vector<ProcessResult>> RunWorkers(
      const std::vector<std::vector<std::string>>& worker_args, absl::Duration timeout);

  // Kills the coordinator (SIGKILL) and starts it again with the same flags on the same port, as
  // an operator restarts one on its --data_dir. Daemon::Start's errors.
  absl::Status RestartCoordinator();

  // Terminates every server, then the coordinator (Daemon::Terminate, up to `timeout` each). OK
  // iff each exited with status 0; otherwise the first error, every daemon having been stopped
  // (a second call fails with FAILED_PRECONDITION).
  absl::Status Terminate(absl::Duration timeout);

 private:
  LocalCluster(std::string bin_dir, std::vector<std::string> coordinator_args)
      : bin_dir_(std::move(bin_dir)), coordinator_args_(std::move(coordinator_args)) {}

  const std::string bin_dir_;
  const std::vector<std::string> coordinator_args_;
  std::vector<std::unique_ptr<Daemon>> coordinators_;
  std::vector<int> coordinator_ports_;

  // The status from coordinator i, when it answers within `timeout`.
  std::optional<rpc::ClusterStatus> StatusFrom(size_t i, absl::Duration timeout) const;
  std::vector<std::unique_ptr<Daemon>> servers_;
};

// The JSON after "RESULT " on the last line of `stdout_text` that starts so (a ps_worker's
// report), or "" if there is none.
std::string ResultJson(absl::string_view stdout_text);

// Checks the step breakdown of a ps_worker's RESULT `result_json` (its "step_ms" object, issue
// 38): every part present and >= 0 (copy may be null: not measured), the parts adding up to its
// "total" within `tolerance` (relative), and that total within `tolerance` of the run's
// seconds / steps (in ms). OK, or FAILED_PRECONDITION naming the figure that is off.
absl::Status CheckStepBreakdown(absl::string_view result_json, double tolerance = 0.05);

// Writes `job` in protobuf text format to `path`. INTERNAL if it cannot be printed,
// FAILED_PRECONDITION if the file cannot be written.
absl::Status WriteJobFile(const config::Job& job, const std::string& path);

// The job at `path` (read as LoadJobFile does, with its errors) training on `train` and
// evaluating on `heldout` with `servers` servers and `workers` workers: the same model on a
// benchmark's own data and cluster. Not validated, since callers change more of it first.
absl::StatusOr<config::Job> LoadJobOnData(const std::string& path, const std::string& train,
                                          const std::string& heldout, int servers, int workers);

struct DatagenOptions {
  // The folder holding worker/tools/ps_datagen; "" (default): relative to the working directory.
  std::string bin_dir;
  // The files to write (ps_datagen --out and --heldout_out). Required.
  std::string train_path;
  std::string heldout_path;
  // Training rows; >= 0. Default 500000.
  int64_t rows = 500000;
  // Held-out rows; -1 (default) for rows / 10.
  int64_t heldout_rows = -1;
  // ps_datagen --cardinalities: one per categorical field, or one for all. Default "1000".
  std::string cardinalities = "1000";
  // More ps_datagen flags (e.g. {"--long_tail"}, which needs cardinalities "" for its own
  // default). Default none.
  std::vector<std::string> extra_args;
};

// Writes synthetic training and held-out data with ps_datagen. Its JSON line (with the teacher's
// held-out AUC, "teacher_auc"), blanks stripped. The error of RunProcess (DEADLINE_EXCEEDED after
// `timeout`), or INTERNAL "ps_datagen exited with C: " and its stderr.
absl::StatusOr<std::string> RunDatagen(const DatagenOptions& options, absl::Duration timeout);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_LOCAL_CLUSTER_H_

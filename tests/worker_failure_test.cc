// A worker's failure stops the cluster (issue 14): real ps_coordinator, ps_server and ps_worker
// processes on loopback. A worker killed mid-training is found by its missed heartbeats, a worker
// that cannot read its data reports the error; either way the coordinator fails the job, the
// servers and the other workers are told and exit 1 naming the failed worker, and the coordinator
// exits 3, within a deadline. And a job whose data cannot be read does not start at all.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/eventually.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/synthetic.h"

namespace ps {
namespace {

using testing::Daemon;

constexpr char kCoordinator[] = "server/coordinator/ps_coordinator";
constexpr char kServer[] = "server/ps_server";
constexpr char kWorker[] = "worker/ps_worker";

// How long the cluster may take to stop once a worker failed: dead_after (3 s) to find a silent
// one, a heartbeat interval to tell the others, and a loaded machine's slack.
constexpr absl::Duration kStopDeadline = absl::Seconds(20);

// Synthetic Criteo-format training data of `rows` rows.
std::string WriteData(const std::string& name, int64_t rows) {
  worker::SyntheticOptions options;
  options.cardinalities = {100};
  options.seed = 14;
  auto data = worker::SyntheticData::Create(options);
  REQUIRE(data.ok());
  const std::string path = absl::StrCat(testing::TempDir(), "/", name);
  REQUIRE(worker::WriteSyntheticFile(**data, worker::SyntheticData::kTrainStream, rows, path,
                                     /*exact_auc=*/false)
              .ok());
  return path;
}

std::string JobText(const std::string& name, const std::string& train, int workers) {
  return absl::StrFormat(R"pb(name: "%s"
                              tables { name: "emb" dim: 8 }
                              model {
                                bottom_mlp: [ 16, 8 ]
                                top_mlp: [ 16 ]
                                shared_table: "emb"
                              }
                              data { train_paths: "%s" }
                              training { mode: SYNC batch_size: 64 epochs: 1 seed: 3 }
                              cluster { num_shards: 8 num_servers: 2 num_workers: %d }
                         )pb",
                         name, train, workers);
}

// A coordinator on `job_text`, and its two servers.
struct Cluster {
  std::unique_ptr<Daemon> coordinator;
  std::vector<std::unique_ptr<Daemon>> servers;
  std::vector<std::unique_ptr<Daemon>> workers;

  void StartWorkers(int n) {
    for (int rank = 0; rank < n; ++rank) {
      auto worker = Daemon::Launch(
          kWorker, {absl::StrCat("--coordinator=", coordinator->address()),
                    absl::StrCat("--rank=", rank), "--compute_threads=1", "--progress_s=60"});
      REQUIRE(worker.ok());
      workers.push_back(std::move(*worker));
    }
  }
};

Cluster StartCluster(const std::string& job_text, const std::string& name) {
  Cluster c;
  auto coordinator = testing::StartCoordinator(job_text, name);
  INFO(coordinator.status().ToString());
  REQUIRE(coordinator.ok());
  c.coordinator = std::move(*coordinator);
  for (int s = 0; s < 2; ++s) {
    auto server =
        Daemon::Start(kServer, {absl::StrCat("--coordinator=", c.coordinator->address())});
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    c.servers.push_back(std::move(*server));
  }
  return c;
}

// Waits for every one of `daemons` to exit by `deadline`; each one's exit status (-1: it did not)
// and when it was seen to exit.
struct Exit {
  int status = -1;
  absl::Time at = absl::InfiniteFuture();
};

std::vector<Exit> ExitsOf(const std::vector<Daemon*>& daemons, absl::Time deadline) {
  std::vector<Exit> exits(daemons.size());
  size_t left = daemons.size();
  while (left > 0 && absl::Now() < deadline) {
    for (size_t i = 0; i < daemons.size(); ++i) {
      if (exits[i].at != absl::InfiniteFuture()) continue;
      const absl::StatusOr<int> status = daemons[i]->Wait(absl::Milliseconds(5));
      if (status.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
      exits[i].status = status.value_or(-1);
      exits[i].at = absl::Now();
      --left;
    }
  }
  return exits;
}

// Waits for `daemon` to exit within `deadline` and returns its exit status (-1: it did not).
int ExitStatus(Daemon& daemon, absl::Time deadline) {
  const absl::StatusOr<int> status = daemon.Wait(deadline - absl::Now());
  INFO(status.status().ToString() << "\nlog:\n" << daemon.ReadLog());
  CHECK(status.ok());
  return status.value_or(-1);
}

TEST_CASE("a worker killed mid-training stops the cluster, which names it",
          "[integration][failure]") {
  const std::string train = WriteData("killed.tsv", 100000);
  Cluster c = StartCluster(JobText("killed", train, 2), "killed");
  c.StartWorkers(2);
  // Training is under way once both workers finished a few steps.
  auto client = CoordinatorClient::Connect(c.coordinator->address(), absl::Seconds(10));
  REQUIRE(client.ok());
  REQUIRE(testing::Eventually(
      [&] {
        const absl::StatusOr<rpc::ClusterStatus> s = (*client)->GetStatus();
        return s.ok() && s->clocks().min_clock() >= 3;
      },
      absl::Seconds(60), absl::Milliseconds(20)));

  const absl::Time killed = absl::Now();
  c.workers[1]->Kill();
  const std::vector<Exit> exits =
      ExitsOf({c.coordinator.get(), c.servers[0].get(), c.servers[1].get(), c.workers[0].get()},
              killed + kStopDeadline);
  INFO("coordinator log:\n" << c.coordinator->ReadLog());
  CHECK(exits[0].status == 3);
  CHECK(exits[1].status == 1);
  CHECK(exits[2].status == 1);
  CHECK(exits[3].status == 1);
  const auto after = [&](const Exit& e) { return absl::ToDoubleSeconds(e.at - killed); };
  std::printf(
      "worker 1 SIGKILLed: exits after %.2f s (coordinator), %.2f and %.2f s (servers), %.2f s "
      "(worker 0)\n",
      after(exits[0]), after(exits[1]), after(exits[2]), after(exits[3]));

  const std::string log = c.coordinator->ReadLog();
  INFO(log);
  // The killed worker is the cause, even if worker 0 (its AllReduce peer) reported an error first.
  CHECK_THAT(log, Catch::Contains("ps_coordinator: the job failed: worker 1 (member "));
  CHECK_THAT(log, Catch::Contains("its heartbeats stopped"));
  for (auto& server : c.servers) {
    INFO(server->ReadLog());
    CHECK_THAT(server->ReadLog(), Catch::Contains(": the job failed: worker 1 (member "));
  }
}

TEST_CASE("a worker that cannot read its data reports it, and the cluster stops",
          "[integration][failure]") {
  const std::string train = WriteData("vanishing.tsv", 1000);
  Cluster c = StartCluster(JobText("vanishing", train, 1), "vanishing");
  // The coordinator checked the file at its start; it is gone before the worker reads it.
  REQUIRE(unlink(train.c_str()) == 0);
  const absl::Time started = absl::Now();
  c.StartWorkers(1);
  const absl::Time deadline = started + absl::Seconds(60);
  CHECK(ExitStatus(*c.workers[0], deadline) == 1);
  const absl::Time worker_exited = absl::Now();
  CHECK(ExitStatus(*c.coordinator, worker_exited + kStopDeadline) == 3);
  for (auto& server : c.servers) CHECK(ExitStatus(*server, worker_exited + kStopDeadline) == 1);
  std::printf("worker 0 failed to read its data: the servers had exited %.2f s after it\n",
              absl::ToDoubleSeconds(absl::Now() - worker_exited));

  const std::string reason = absl::StrCat("worker 0: NOT_FOUND: ", train);
  CHECK_THAT(c.workers[0]->ReadLog(), Catch::Contains(reason));
  INFO(c.coordinator->ReadLog());
  CHECK_THAT(c.coordinator->ReadLog(),
             Catch::Contains("ps_coordinator: the job failed: worker 0 (member "));
  CHECK_THAT(c.coordinator->ReadLog(), Catch::Contains(reason));
  for (auto& server : c.servers) {
    CHECK_THAT(server->ReadLog(), Catch::Contains(": the job failed: worker 0 (member "));
  }
}

TEST_CASE("a coordinator refuses a job whose data cannot be read, naming field, line and path",
          "[integration][failure]") {
  const std::string dir = testing::TempDir();
  const std::string job = absl::StrCat(dir, "/missing_data.pbtxt");
  {
    std::FILE* f = std::fopen(job.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(JobText("missing", "no/such/train.tsv", 1).c_str(), f);
    std::fclose(f);
  }
  const auto refused = testing::RunProcess(kCoordinator, {absl::StrCat("--job=", job)});
  REQUIRE(refused.ok());
  INFO(refused->stderr_text);
  CHECK(refused->exit_code == 1);
  char cwd[4096];
  REQUIRE(getcwd(cwd, sizeof(cwd)) != nullptr);
  CHECK_THAT(refused->stderr_text,
             Catch::Contains(absl::StrCat(job,
                                          ":8:38: data.train_paths[0]: cannot read "
                                          "\"no/such/train.tsv\" (relative to ",
                                          cwd, ", the current directory of ps_coordinator)")));
  CHECK_FALSE(absl::StrContains(refused->stdout_text, "listening"));
  // Where the coordinator's host does not hold the data, the check is skipped.
  auto unchecked = Daemon::Start(kCoordinator, {absl::StrCat("--job=", job), "--check_data=false"});
  INFO(unchecked.status().ToString());
  REQUIRE(unchecked.ok());
  CHECK((*unchecked)->Terminate(absl::Seconds(10)).ok());
}

TEST_CASE("workers that finish leave: their silence is no failure, and status shows the step",
          "[integration][failure]") {
  const std::string train = WriteData("finished.tsv", 2000);
  Cluster c = StartCluster(JobText("finished", train, 2), "finished");
  c.StartWorkers(2);
  for (auto& worker : c.workers) {
    CHECK(ExitStatus(*worker, absl::Now() + absl::Seconds(120)) == 0);
  }
  // 2000 lines / (64 x 2 workers): 16 steps, 0 to 15. The workers are found silent after
  // dead_after, which fails nothing, as they left.
  auto client = CoordinatorClient::Connect(c.coordinator->address(), absl::Seconds(10));
  REQUIRE(client.ok());
  REQUIRE(testing::Eventually(
      [&] {
        const absl::StatusOr<rpc::ClusterStatus> s = (*client)->GetStatus();
        if (!s.ok()) return false;
        for (const rpc::MemberStatus& m : s->members()) {
          if (m.role() == rpc::WORKER && m.alive()) return false;
        }
        return true;
      },
      absl::Seconds(30), absl::Milliseconds(50)));
  const auto ctl =
      testing::RunProcess("client/ps_ctl", {"status", "--coordinator=" + c.coordinator->address()});
  REQUIRE(ctl.ok());
  INFO(ctl->stdout_text << ctl->stderr_text);
  CHECK(ctl->exit_code == 0);
  CHECK_FALSE(absl::StrContains(ctl->stdout_text, "JOB FAILED"));
  CHECK_THAT(ctl->stdout_text,
             Catch::Contains("clocks: steps done: slowest worker 16, fastest 16; workers: 2 of 2 "
                             "registered: 2 left (done)\n"));
  CHECK_THAT(ctl->stdout_text,
             Catch::Contains("applied step: 15 (servers: the last step every shard applied)\n"));
  for (auto& server : c.servers) CHECK(server->Terminate(absl::Seconds(10)).ok());
  CHECK(c.coordinator->Terminate(absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace ps

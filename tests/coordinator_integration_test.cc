// A real ps_coordinator process, driven through CoordinatorClient as servers and workers would.
#include <catch2/catch.hpp>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/coordinator_client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/eventually.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

using testing::Daemon;

constexpr char kCoordinator[] = "server/coordinator/ps_coordinator";
constexpr char kPsCtl[] = "client/ps_ctl";

constexpr char kJob[] = R"pb(name: "integration"
                             tables { name: "emb" dim: 8 }
                             cluster { num_shards: 64 num_servers: 2 num_workers: 2 }
)pb";

// Writes `text` to a new file under $TEST_TMPDIR and returns its path.
std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name);
  std::ofstream(path) << text;
  return path;
}

// A heartbeat timeout's worth of waiting, and more.
bool Eventually(const std::function<bool()>& condition) {
  return testing::Eventually(condition, absl::Seconds(20), absl::Milliseconds(10));
}

std::unique_ptr<Daemon> StartCoordinator(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {absl::StrCat("--job=", WriteFile("job.pbtxt", kJob))};
  args.insert(args.end(), extra.begin(), extra.end());
  auto daemon = Daemon::Start(kCoordinator, args);
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  return std::move(*daemon);
}

std::unique_ptr<CoordinatorClient> Connect(const Daemon& daemon) {
  auto client = CoordinatorClient::Connect(daemon.address(), absl::Seconds(10));
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  return std::move(*client);
}

TEST_CASE("a coordinator process runs membership, the map, the store and clocks",
          "[integration][coordinator]") {
  std::unique_ptr<Daemon> daemon = StartCoordinator({"--heartbeat_ms=100", "--dead_after_ms=1000"});
  CHECK(absl::StrContains(daemon->ReadLog(),
                          absl::StrCat("ps_coordinator listening on ", daemon->address())));

  // Two fake servers and two workers, each with its own connection.
  std::vector<std::unique_ptr<CoordinatorClient>> servers;
  std::vector<uint32_t> server_ids;
  std::vector<std::unique_ptr<CoordinatorClient>> workers;
  std::vector<uint32_t> worker_ids;
  for (int i = 0; i < 2; ++i) workers.push_back(Connect(*daemon));

  // A worker waits for the map while the servers register.
  std::optional<absl::StatusOr<rpc::ShardMap>> map;
  std::thread map_waiter([&] { map = workers[0]->GetShardMap(1, absl::Seconds(30)); });
  for (int i = 0; i < 2; ++i) {
    servers.push_back(Connect(*daemon));
    const auto r = servers[i]->Register(rpc::SERVER, absl::StrCat("127.0.0.1:", 7100 + i), -1);
    REQUIRE(r.ok());
    CHECK(r->rank() == i);
    CHECK(r->heartbeat_interval_ms() == 100);
    CHECK(r->job().name() == "integration");
    server_ids.push_back(r->member_id());
    REQUIRE(servers[i]->StartHeartbeats(r->member_id(), absl::Milliseconds(100)).ok());
  }
  map_waiter.join();
  REQUIRE(map->ok());
  CHECK((*map)->version() == 1);
  CHECK((*map)->num_shards() == 64);
  REQUIRE((*map)->shards_size() == 64);
  int primaries[2] = {0, 0};
  for (const auto& shard : (*map)->shards()) ++primaries[shard.primary()];
  CHECK(primaries[0] == 32);
  CHECK(primaries[1] == 32);
  CHECK((*map)->servers(1).address() == "127.0.0.1:7101");

  for (int i = 0; i < 2; ++i) {
    const auto r = workers[i]->Register(rpc::WORKER, "", -1);
    REQUIRE(r.ok());
    CHECK(r->rank() == i);
    worker_ids.push_back(r->member_id());
    REQUIRE(workers[i]->StartHeartbeats(r->member_id(), absl::Milliseconds(100)).ok());
  }

  SECTION("rendezvous: each worker publishes its id and waits for the other's") {
    std::vector<std::optional<absl::StatusOr<std::vector<std::string>>>> seen(2);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        REQUIRE(workers[i]->KvSet(absl::StrCat("nccl/", i), absl::StrCat("unique-id-", i)).ok());
        seen[i] = workers[i]->KvWait({"nccl/0", "nccl/1"}, absl::Seconds(30));
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < 2; ++i) {
      REQUIRE(seen[i]->ok());
      CHECK(**seen[i] == std::vector<std::string>{"unique-id-0", "unique-id-1"});
    }
  }

  SECTION("clocks: a wait returns once the slower worker catches up") {
    REQUIRE(workers[0]->ReportClock(worker_ids[0], 5).ok());
    std::optional<absl::StatusOr<rpc::ClockState>> waited;
    std::thread waiter([&] { waited = workers[0]->WaitClock(3, absl::Seconds(30)); });
    const auto state = workers[1]->ReportClock(worker_ids[1], 3);
    REQUIRE(state.ok());
    CHECK(state->min_clock() == 3);
    CHECK(state->max_clock() == 5);
    waiter.join();
    REQUIRE(waited->ok());
    CHECK((*waited)->min_clock() == 3);
    // Only workers have clocks.
    CHECK(workers[0]->ReportClock(server_ids[0], 1).status().code() ==
          absl::StatusCode::kFailedPrecondition);
  }

  SECTION("a server that stops heartbeating is marked dead and the map version moves") {
    const auto status = workers[0]->GetStatus();
    REQUIRE(status.ok());
    CHECK(status->members_size() == 4);
    for (const auto& m : status->members()) CHECK(m.alive());
    servers[1]->StopHeartbeats();
    CHECK(Eventually([&] {
      const auto s = workers[0]->GetStatus();
      return s.ok() && s->shard_map().version() == 2 && !s->shard_map().servers(1).alive();
    }));
    const auto later = workers[0]->GetShardMap(2, absl::Seconds(5));
    REQUIRE(later.ok());
    CHECK(later->servers(0).alive());
  }

  // The operators' view.
  const auto ctl = testing::RunProcess(kPsCtl, {"status", "--coordinator=" + daemon->address()});
  REQUIRE(ctl.ok());
  INFO(ctl->stdout_text << ctl->stderr_text);
  CHECK(ctl->exit_code == 0);
  CHECK(absl::StrContains(ctl->stdout_text, "job \"integration\""));
  CHECK(absl::StrContains(ctl->stdout_text, "127.0.0.1:7101"));
  CHECK(absl::StrContains(ctl->stdout_text, "primary 32, replica 0 shards"));
  CHECK(absl::StrContains(ctl->stdout_text, "clocks: steps done: slowest worker "));
  CHECK(absl::StrContains(ctl->stdout_text, "workers: 2 of 2 registered: 2 training"));

  // SIGTERM: a clean exit, after which the clients find nobody there.
  const absl::Status terminated = daemon->Terminate(absl::Seconds(20));
  INFO(daemon->ReadLog());
  CHECK(terminated.ok());
  CHECK(workers[0]->GetStatus().status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("a bad job file makes the coordinator exit 1 with file:line:col on stderr",
          "[integration][coordinator]") {
  // The bad `dim` is on line 4, column 3.
  const std::string path = WriteFile("bad.pbtxt",
                                     "name: \"bad\"\n"
                                     "tables {\n"
                                     "  name: \"emb\"\n"
                                     "  dim: 0\n"
                                     "}\n");
  const auto result = testing::RunProcess(kCoordinator, {absl::StrCat("--job=", path)});
  REQUIRE(result.ok());
  CHECK(result->exit_code == 1);
  INFO(result->stderr_text);
  CHECK(absl::StartsWith(result->stderr_text, absl::StrCat(path, ":4:3: ")));
  CHECK(absl::StrContains(result->stderr_text, "dim"));
  CHECK_FALSE(absl::StrContains(result->stdout_text, "listening"));

  const auto daemon = Daemon::Start(kCoordinator, {absl::StrCat("--job=", path)});
  CHECK(daemon.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(daemon.status().message(), "exited with status 1"));
}

TEST_CASE("a killed coordinator leaves its clients UNAVAILABLE", "[integration][coordinator]") {
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  auto client = Connect(*daemon);
  REQUIRE(client->Register(rpc::SERVER, "127.0.0.1:7200", -1).ok());
  std::optional<absl::StatusOr<std::vector<std::string>>> waited;
  std::thread waiter([&] { waited = client->KvWait({"never"}, absl::Seconds(60)); });
  daemon->Kill();
  waiter.join();
  CHECK(waited->status().code() == absl::StatusCode::kUnavailable);
  CHECK(client->GetStatus().status().code() == absl::StatusCode::kUnavailable);
  CHECK(client->Heartbeat(1).status().code() == absl::StatusCode::kUnavailable);
  const auto ctl = testing::RunProcess(
      kPsCtl, {"status", "--coordinator=" + daemon->address(), "--timeout_ms=200"});
  REQUIRE(ctl.ok());
  CHECK(ctl->exit_code == 1);
  CHECK(absl::StrContains(ctl->stderr_text, "UNAVAILABLE"));
}

TEST_CASE(
    "a failed job shows in ps_ctl status until every member was told, then the coordinator "
    "exits 3",
    "[integration][coordinator][failure]") {
  // Members are dead only after 20 s: the server below stays alive, untold, until it heartbeats.
  std::unique_ptr<Daemon> daemon =
      StartCoordinator({"--heartbeat_ms=100", "--dead_after_ms=20000"});
  auto server = Connect(*daemon);
  auto w0 = Connect(*daemon);
  auto w1 = Connect(*daemon);
  const auto s0 = server->Register(rpc::SERVER, "127.0.0.1:7300", -1);
  const auto s1 = server->Register(rpc::SERVER, "127.0.0.1:7301", -1);
  const auto r0 = w0->Register(rpc::WORKER, "", 0);
  const auto r1 = w1->Register(rpc::WORKER, "", 1);
  REQUIRE((s0.ok() && s1.ok() && r0.ok() && r1.ok()));
  REQUIRE(w0->ReportClock(r0->member_id(), 6).ok());
  REQUIRE(w1->ReportClock(r1->member_id(), 9).ok());
  REQUIRE(w1->Leave(r1->member_id(), absl::Seconds(5)).ok());
  REQUIRE(w0->ReportWorkerFailure(r0->member_id(), "NOT_FOUND: data/x.tsv: no such file").ok());

  const auto ctl = testing::RunProcess(kPsCtl, {"status", "--coordinator=" + daemon->address()});
  REQUIRE(ctl.ok());
  INFO(ctl->stdout_text << ctl->stderr_text);
  CHECK(ctl->exit_code == 0);
  CHECK(absl::StrContains(ctl->stdout_text,
                          absl::StrCat("JOB FAILED: worker 0 (member ", r0->member_id(),
                                       "): NOT_FOUND: data/x.tsv: no such file\n")));
  CHECK(absl::StrContains(ctl->stdout_text, " FAILED    7 "));
  CHECK(absl::StrContains(ctl->stdout_text, " left      10 "));
  CHECK(absl::StrContains(
      ctl->stdout_text,
      "clocks: steps done: slowest worker 7, fastest 10; workers: 2 of 2 registered: 1 left "
      "(done), 1 FAILED\n"));

  // The servers have not heartbeaten since: once both have, each was told, and the coordinator
  // exits.
  REQUIRE(server->Heartbeat(s0->member_id()).ok());
  CHECK(daemon->Wait(absl::Milliseconds(300)).status().code() ==
        absl::StatusCode::kDeadlineExceeded);
  REQUIRE(server->Heartbeat(s1->member_id()).ok());
  const absl::StatusOr<int> exited = daemon->Wait(absl::Seconds(20));
  INFO(daemon->ReadLog());
  REQUIRE(exited.ok());
  CHECK(*exited == 3);
  CHECK(absl::StrContains(daemon->ReadLog(), "ps_coordinator: the job failed: worker 0 (member "));
  CHECK(absl::StrContains(daemon->ReadLog(), "every live member was told"));
}

}  // namespace
}  // namespace ps

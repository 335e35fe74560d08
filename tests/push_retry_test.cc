// A Push whose part for one server cannot get through (that server stopped with SIGSTOP, past
// the client's retry_timeout) fails after its other parts were applied; once the server runs
// again, Client::RetryPush with the PushTicket from the failed status applies every part exactly
// once. A plain Push of the same keys is a new push, applied again. Real ps_coordinator and
// ps_server processes on loopback.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/push_ticket.h"
#include "client/ps_client.h"
#include "common/hash.h"
#include "tests/testing/daemon.h"

namespace ps {
namespace {

constexpr char kJob[] = R"pb(
name: "push_retry"
tables {
  name: "sgd"
  dim: 4
  initializer { kind: UNIFORM low: -0.1 high: 0.1 }
  optimizer { type: "sgd" learning_rate: 0.5 }
}
training { seed: 3 mode: ASYNC }
cluster {
  num_shards: 16
  num_servers: 2
  max_message_bytes: 1048576
  dense_chunk_floats: 1000
}
)pb";
constexpr float kLearningRate = 0.5f;
constexpr uint32_t kDim = 4;

// Every value of `got` is `init` minus `times` applications of `grads` (SGD).
void CheckApplied(const std::vector<float>& init, const std::vector<float>& grads,
                  const std::vector<float>& got, int times) {
  REQUIRE(got.size() == init.size());
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    float expected = init[i];
    for (int t = 0; t < times; ++t) expected -= kLearningRate * grads[i];
    if (got[i] != Approx(expected).margin(1e-5)) ++wrong;
  }
  INFO(wrong << " of " << got.size() << " values are not " << times << " application(s)");
  CHECK(wrong == 0);
}

TEST_CASE("a failed push made again with its ticket applies every server's part exactly once",
          "[integration][push_retry]") {
  const bool shared_memory = GENERATE(false, true);
  INFO("shared_memory " << shared_memory);
  // A stopped server is never declared dead while the test runs: its shards stay where they are.
  auto coordinator =
      testing::StartCoordinator(kJob, "push_retry_job", {"--dead_after_ms=600000"});
  REQUIRE(coordinator.ok());
  std::vector<std::unique_ptr<testing::Daemon>> servers;
  for (int i = 0; i < 2; ++i) {
    auto server = testing::Daemon::Start(
        "server/ps_server", {absl::StrCat("--coordinator=", (*coordinator)->address())});
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    servers.push_back(std::move(*server));
  }
  ClientOptions options;
  options.coordinator = (*coordinator)->address();
  options.connect_timeout = absl::Seconds(30);
  options.max_keys_per_request = 64;  // several requests per server
  options.shared_memory = shared_memory;
  options.request_timeout = absl::Milliseconds(300);
  options.retry_timeout = absl::Seconds(1);
  auto connected = Client::Connect(options);
  INFO(connected.status().ToString());
  REQUIRE(connected.ok());
  Client& client = **connected;

  // Keys on both servers; which are on the server that will be stopped.
  const rpc::ShardMap map = client.shard_map();
  uint32_t stopped_id = 0;
  for (const rpc::ServerInfo& s : map.servers()) {
    if (s.address() == servers[1]->address()) stopped_id = s.server_id();
  }
  std::vector<uint64_t> keys(1000);
  std::mt19937_64 random(20261127);
  for (uint64_t& key : keys) key = random();
  std::vector<float> grads(keys.size() * kDim);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& g : grads) g = uniform(random);
  std::vector<uint64_t> live_keys;
  std::vector<float> live_grads;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t shard = ShardOf(NameHash("sgd"), keys[i], map.num_shards());
    if (map.shards(shard).primary() == stopped_id) continue;
    live_keys.push_back(keys[i]);
    live_grads.insert(live_grads.end(), grads.begin() + i * kDim, grads.begin() + (i + 1) * kDim);
  }
  REQUIRE(!live_keys.empty());
  REQUIRE(live_keys.size() < keys.size());

  std::vector<float> init(keys.size() * kDim);
  REQUIRE(client.Pull("sgd", keys, absl::MakeSpan(init)).ok());
  std::vector<float> live_init(live_keys.size() * kDim);
  REQUIRE(client.Pull("sgd", live_keys, absl::MakeSpan(live_init)).ok());

  // The push: its part for the stopped server times out until retry_timeout has passed.
  // Stopped for certain before the push: a server answering from shared memory on the other core
  // could otherwise take the push in the moment between kill() and the stop.
  REQUIRE(servers[1]->Pause().ok());
  bool stopped = true;
  absl::Cleanup resume = [&] {
    if (stopped) ::kill(servers[1]->pid(), SIGCONT);
  };
  const absl::Status failed = client.Push("sgd", keys, grads);
  INFO(failed.ToString());
  REQUIRE(!failed.ok());
  CHECK((absl::IsDeadlineExceeded(failed) || absl::IsUnavailable(failed)));
  const std::optional<PushTicket> ticket = PushTicket::FromStatus(failed);
  REQUIRE(ticket.has_value());
  CHECK(ticket->worker_id == client.worker_id());
  CHECK(ticket->table == "sgd");
  CHECK(ticket->runs.size() > 2);
  // The live server applied its part.
  std::vector<float> live(live_keys.size() * kDim);
  REQUIRE(client.Pull("sgd", live_keys, absl::MakeSpan(live)).ok());
  CheckApplied(live_init, live_grads, live, 1);

  // A ticket is refused with other gradients, for another table, or from another client.
  std::vector<float> other_grads = grads;
  other_grads[5] += 1.0f;
  CHECK(absl::IsInvalidArgument(client.RetryPush(*ticket, "sgd", keys, other_grads)));
  PushTicket foreign = *ticket;
  foreign.worker_id += 1000;
  const absl::Status refused = client.RetryPush(foreign, "sgd", keys, grads);
  CHECK(absl::IsInvalidArgument(refused));
  CHECK(absl::StrContains(refused.message(), "worker"));

  REQUIRE(::kill(servers[1]->pid(), SIGCONT) == 0);
  stopped = false;
  const absl::Status retried = client.RetryPush(*ticket, "sgd", keys, grads);
  INFO(retried.ToString());
  REQUIRE(retried.ok());
  std::vector<float> after(keys.size() * kDim);
  REQUIRE(client.Pull("sgd", keys, absl::MakeSpan(after)).ok());
  CheckApplied(init, grads, after, 1);

  // Again with the same ticket (asynchronously): every part is a duplicate, nothing changes.
  std::future<absl::Status> again = client.RetryPushAsync(*ticket, "sgd", keys, grads);
  REQUIRE(again.get().ok());
  REQUIRE(client.Pull("sgd", keys, absl::MakeSpan(after)).ok());
  CheckApplied(init, grads, after, 1);

  // A plain Push is a new push: applied a second time.
  REQUIRE(client.Push("sgd", keys, grads).ok());
  REQUIRE(client.Pull("sgd", keys, absl::MakeSpan(after)).ok());
  CheckApplied(init, grads, after, 2);

  // Past the servers' window (1024 sequences later) whether it was applied cannot be told: the
  // ticket is refused, naming the limit, and nothing is applied.
  const std::vector<uint64_t> one = {keys[0]};
  const std::vector<float> zero(kDim, 0.0f);
  for (int i = 0; i < 1030; ++i) REQUIRE(client.Push("sgd", one, zero).ok());
  const absl::Status too_old = client.RetryPush(*ticket, "sgd", keys, grads);
  CHECK(absl::IsInvalidArgument(too_old));
  CHECK(absl::StrContains(too_old.message(), "1024"));
  REQUIRE(client.Pull("sgd", keys, absl::MakeSpan(after)).ok());
  CheckApplied(init, grads, after, 2);
}

}  // namespace
}  // namespace ps

// A real cluster on loopback: a ps_coordinator and two ps_server processes, driven through the
// client library from several threads, every value compared with a single-process reference built
// from the same storage code; then bad requests, and a server killed for real.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "common/hash.h"
#include "common/job_config.h"
#include "proto/ps.grpc.pb.h"
#include "server/storage/embedding_table.h"
#include "tests/testing/daemon.h"
#include "tests/testing/server_status.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace {

// One table per optimizer, with different dims and initializers.
constexpr char kJob[] = R"pb(
name: "integration"
tables {
  name: "sgd"
  dim: 8
  initializer { kind: UNIFORM low: -0.1 high: 0.1 }
  optimizer { type: "sgd" learning_rate: 0.1 }
}
tables {
  name: "adagrad"
  dim: 16
  initializer { kind: NORMAL stddev: 0.05 }
  optimizer { type: "adagrad" learning_rate: 0.05 initial_accumulator: 0.1 }
}
tables {
  name: "adam"
  dim: 4
  initializer { kind: TRUNCATED_NORMAL stddev: 0.02 }
  optimizer { type: "adam" learning_rate: 0.01 }
}
tables {
  name: "ftrl"
  dim: 3
  initializer { kind: ZEROS }
  optimizer { type: "ftrl" learning_rate: 0.1 l1: 0.001 l2: 0.01 }
}
training { seed: 11 mode: ASYNC }  # pushes apply on arrival (no steps)
cluster {
  num_shards: 16
  num_servers: 2
  max_message_bytes: 1048576
  dense_chunk_floats: 1000
}
)pb";

struct Cluster {
  std::unique_ptr<testing::Daemon> coordinator;
  std::vector<std::unique_ptr<testing::Daemon>> servers;
  std::unique_ptr<Client> client;
};

ClientOptions ClientOf(const Cluster& cluster) {
  ClientOptions options;
  options.coordinator = cluster.coordinator->address();
  options.connect_timeout = absl::Seconds(30);
  options.max_keys_per_request = 500;  // many requests per call, to exercise the splitting
  return options;
}

// `send_threads`: the client's ClientOptions.send_threads (-1: automatic, none on 2 cores);
// `shared_memory`, `calls`: its ClientOptions.shared_memory and .shared_memory_calls;
// `server_flags`: more flags of each server.
Cluster StartCluster(int send_threads = -1, bool shared_memory = true,
                     const std::vector<std::string>& server_flags = {}, bool calls = true) {
  Cluster cluster;
  auto coordinator = testing::StartCoordinator(kJob, "integration_job");
  REQUIRE(coordinator.ok());
  cluster.coordinator = std::move(*coordinator);
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> flags = {
        absl::StrCat("--coordinator=", cluster.coordinator->address())};
    flags.insert(flags.end(), server_flags.begin(), server_flags.end());
    auto server = testing::Daemon::Start("server/ps_server", flags);
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    cluster.servers.push_back(std::move(*server));
  }
  ClientOptions options = ClientOf(cluster);
  options.send_threads = send_threads;
  options.shared_memory = shared_memory;
  options.shared_memory_calls = calls;
  auto client = Client::Connect(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  cluster.client = std::move(*client);
  return cluster;
}

rpc::ServerStatus StatusOf(const testing::Daemon& server) {
  absl::StatusOr<rpc::ServerStatus> status = testing::ServerStatusOf(server);
  INFO(status.status().ToString());
  REQUIRE(status.ok());
  return *std::move(status);
}

// The single-process reference: one TableShard per table holding every key.
struct Reference {
  std::vector<std::unique_ptr<server::TableSpec>> specs;
  std::map<std::string, std::unique_ptr<server::TableShard>> tables;

  explicit Reference(const config::Job& job) {
    for (const config::Table& t : job.tables()) {
      auto spec = server::TableSpec::Create(t, job.training().seed());
      REQUIRE(spec.ok());
      tables[t.name()] = std::make_unique<server::TableShard>(spec->get(), 0);
      specs.push_back(std::move(*spec));
    }
  }
};

TEST_CASE("a real cluster matches the single-process reference", "[integration]") {
  // Requests started by the calling threads alone and by a send pool beside them; calls made in
  // the shared memory the servers lend (and RPCs when every slot is taken); RPCs with their
  // payloads in that memory; payloads in the messages only; and servers that lend none.
  struct Transport {
    int send_threads;
    bool shared_memory;
    std::vector<std::string> server_flags;
    bool calls = true;
  };
  const Transport transport =
      GENERATE(Transport{0, true, {}}, Transport{3, true, {}}, Transport{0, true, {}, false},
               Transport{0, false, {}}, Transport{0, true, {"--shared_memory_mb=0"}});
  const bool lent = transport.shared_memory && transport.server_flags.empty();
  CAPTURE(transport.send_threads, transport.shared_memory, transport.server_flags,
          transport.calls);
  Cluster cluster = StartCluster(transport.send_threads, transport.shared_memory,
                                 transport.server_flags, transport.calls);
  Client& client = *cluster.client;
  const absl::StatusOr<config::Job> job = ParseJob(kJob, "job");
  REQUIRE(job.ok());
  Reference reference(*job);

  constexpr int kThreads = 4;
  constexpr int kSteps = 12;
  constexpr uint64_t kKeysPerThread = 3000;
  // Each thread owns a key range, so the order of pushes per key is its thread's order and the
  // reference can replay it; keys repeat within a push, and every table is touched.
  struct Push {
    std::string table;
    std::vector<uint64_t> keys;
    std::vector<float> grads;
  };
  std::vector<std::vector<Push>> plans(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937_64 rng(1000 + t);
    for (int step = 0; step < kSteps; ++step) {
      for (const config::Table& table : job->tables()) {
        Push push;
        push.table = table.name();
        const int n = 200 + static_cast<int>(rng() % 1500);
        for (int i = 0; i < n; ++i) {
          // Power of two spread over the full uint64 range, plus small ids with many repeats.
          const uint64_t local = (rng() % 4 == 0) ? rng() % 16 : rng() % kKeysPerThread;
          push.keys.push_back(local * kThreads + t + (local % 7 == 0 ? (uint64_t{1} << 63) : 0));
        }
        std::normal_distribution<float> g(0.0f, 1.0f);
        for (size_t i = 0; i < push.keys.size() * table.dim(); ++i) push.grads.push_back(g(rng));
        plans[t].push_back(std::move(push));
      }
    }
  }

  std::vector<std::thread> threads;
  std::vector<absl::Status> failures(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (const Push& push : plans[t]) {
        // A pull first (creates the rows as the reference will), then the push.
        const uint32_t dim = *client.Dim(push.table);
        std::vector<float> rows(push.keys.size() * dim);
        absl::Status s = client.Pull(push.table, push.keys, absl::MakeSpan(rows));
        if (s.ok()) s = client.Push(push.table, push.keys, push.grads);
        if (!s.ok()) {
          failures[t] = s;
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const absl::Status& s : failures) REQUIRE(s.ok());

  // The reference applies each thread's pushes in order (threads touch disjoint keys).
  std::map<std::string, std::vector<uint64_t>> all_keys;
  for (int t = 0; t < kThreads; ++t) {
    for (const Push& push : plans[t]) {
      server::TableShard& table = *reference.tables.at(push.table);
      const uint32_t dim = table.spec().dim;
      std::vector<float> ignored(push.keys.size() * dim);
      table.Pull(push.keys, ignored.data());
      table.Push(push.keys, push.grads.data());
      all_keys[push.table].insert(all_keys[push.table].end(), push.keys.begin(),
                                  push.keys.end());
    }
  }

  for (const auto& [name, keys] : all_keys) {
    const uint32_t dim = *client.Dim(name);
    std::vector<float> got(keys.size() * dim);
    REQUIRE(client.Pull(name, keys, absl::MakeSpan(got)).ok());
    std::vector<float> want(keys.size() * dim);
    reference.tables.at(name)->Pull(keys, want.data());
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= 1e-6f * std::max(1.0f, std::fabs(want[i])))) {
        ++mismatches;
      }
    }
    INFO("table " << name << ": " << mismatches << " of " << got.size() << " values differ");
    CHECK(mismatches == 0);
  }

  {  // Dense tensors round-trip across servers.
    std::vector<float> dense(4321);
    for (size_t i = 0; i < dense.size(); ++i) dense[i] = 0.5f * i;
    REQUIRE(client.PushDense("mlp", dense, DenseUpdate::kAssign).ok());
    std::vector<float> grads(dense.size(), 1.0f);
    REQUIRE(client.PushDense("mlp", grads, DenseUpdate::kGradient).ok());
    std::vector<float> back(dense.size());
    REQUIRE(client.PullDense("mlp", absl::MakeSpan(back)).ok());
    for (size_t i = 0; i < dense.size(); ++i) {
      CHECK(back[i] == Approx(dense[i] - 0.01f).margin(1e-6));  // sgd, lr 0.01 (default)
    }
    std::vector<float> wrong_size(10);
    CHECK(client.PullDense("mlp", absl::MakeSpan(wrong_size)).code() ==
          absl::StatusCode::kInvalidArgument);
    CHECK(client.PullDense("nope", absl::MakeSpan(wrong_size)).code() ==
          absl::StatusCode::kNotFound);
  }

  {  // Asynchronous calls.
    const std::vector<uint64_t> keys = {1, 2, 3, 1};
    std::vector<float> rows(keys.size() * 8);
    std::future<absl::Status> pulled = client.PullAsync("sgd", keys, absl::MakeSpan(rows));
    REQUIRE(pulled.get().ok());
    CHECK(std::equal(rows.begin(), rows.begin() + 8, rows.begin() + 24));  // key 1 twice
  }

  // Each server lent this client one region, if any, and has it back once the client is gone.
  for (const auto& server : cluster.servers) {
    const rpc::ServerStatus status = StatusOf(*server);
    CHECK(status.shared_regions() == (lent ? 1u : 0u));
    CHECK((status.shared_region_bytes() > 0) == lent);
  }
  cluster.client.reset();
  for (const auto& server : cluster.servers) CHECK(StatusOf(*server).shared_regions() == 0);
}

TEST_CASE("a client that cannot map a server's region gives it back and uses the channel",
          "[integration]") {
  // Servers in a pid namespace of their own, as on another host: the /proc/<pid>/fd/<fd> they
  // name is not theirs from here (it is this namespace's pid 1 or nothing).
  Cluster cluster;
  auto coordinator = testing::StartCoordinator(kJob, "integration_job");
  REQUIRE(coordinator.ok());
  cluster.coordinator = std::move(*coordinator);
  for (int i = 0; i < 2; ++i) {
    auto server = testing::Daemon::Start(
        "/usr/bin/unshare", {"--pid", "--fork", "--kill-child", "server/ps_server",
                             absl::StrCat("--coordinator=", cluster.coordinator->address())});
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    cluster.servers.push_back(std::move(*server));
  }
  auto client = Client::Connect(ClientOf(cluster));
  REQUIRE(client.ok());
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 64; ++k) keys.push_back(k);
  std::vector<float> before(keys.size() * 8);
  REQUIRE((*client)->Pull("sgd", keys, absl::MakeSpan(before)).ok());
  const std::vector<float> grads(keys.size() * 8, 1.0f);
  REQUIRE((*client)->Push("sgd", keys, grads).ok());
  std::vector<float> after(keys.size() * 8);
  REQUIRE((*client)->Pull("sgd", keys, absl::MakeSpan(after)).ok());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i] == Approx(before[i] - 0.1f).margin(1e-6));  // sgd, lr 0.1, once
  }
  // Each server lent the client one region, which it gave back at once; none is held.
  for (const auto& server : cluster.servers) {
    const rpc::ServerStatus status = StatusOf(*server);
    CHECK(status.shared_regions_opened() == 1);
    CHECK(status.shared_regions() == 0);
  }
}

TEST_CASE("a client whose shared region expired opens another and loses nothing",
          "[integration]") {
  Cluster cluster = StartCluster(-1, true, {"--shared_memory_idle_s=1"});
  Client& first = *cluster.client;
  // Keys of both servers' shards, key 5 twice.
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 64; ++k) keys.push_back(k);
  keys.push_back(5);
  const std::vector<float> grads(keys.size() * 8, 1.0f);
  std::vector<float> before(keys.size() * 8);
  REQUIRE(first.Pull("sgd", keys, absl::MakeSpan(before)).ok());
  for (const auto& server : cluster.servers) REQUIRE(StatusOf(*server).shared_regions() == 1);

  // Past the idle time (not a synchronisation: the expiry under test is one of time), a second
  // client's region makes each server close the first's.
  absl::SleepFor(absl::Milliseconds(1500));
  auto second = Client::Connect(ClientOf(cluster));
  REQUIRE(second.ok());
  std::vector<float> rows(keys.size() * 8);
  REQUIRE((*second)->Pull("sgd", keys, absl::MakeSpan(rows)).ok());
  for (const auto& server : cluster.servers) CHECK(StatusOf(*server).shared_regions() == 1);

  // The first client's next requests are refused for the region, and resent through a new one.
  REQUIRE(first.Push("sgd", keys, grads).ok());
  REQUIRE(first.Pull("sgd", keys, absl::MakeSpan(rows)).ok());
  for (const auto& server : cluster.servers) {
    const rpc::ServerStatus status = StatusOf(*server);
    CHECK(status.shared_regions() == 2);
    CHECK(status.shared_regions_opened() == 3);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    // Key 5 twice in the push: its gradients summed (sgd, lr 0.1); the push applied once.
    const float pushes = keys[i / 8] == 5 ? 2.0f : 1.0f;
    CHECK(rows[i] == Approx(before[i] - 0.1f * pushes).margin(1e-6));
  }
}

TEST_CASE("a client with options out of range is refused before it connects", "[client]") {
  ClientOptions options;
  options.coordinator = "127.0.0.1:1";  // never reached
  std::string want;
  SECTION("send_threads") {
    options.send_threads = GENERATE(-2, 65);
    want = "send_threads must be -1 (automatic) or in [0, 64]";
  }
  SECTION("channels_per_server") {
    options.channels_per_server = 0;
    want = "channels_per_server and max_keys_per_request must be >= 1";
  }
  auto client = Client::Connect(options);
  CHECK(client.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(client.status().message()), Catch::Contains(want));
}

TEST_CASE("ps_server refuses an out-of-range flag at start-up, naming it", "[integration]") {
  struct Refused {
    const char* flag;
    const char* says;
  };
  const Refused refused =
      GENERATE(Refused{"--lookup_threads=-2", "--lookup_threads must be -1"},
               Refused{"--shared_memory_mb=-1", "--shared_memory_mb must be in [0, 1073741824]"},
               Refused{"--shared_memory_idle_s=0", "--shared_memory_idle_s must be > 0"});
  CAPTURE(refused.flag);
  auto server = testing::Daemon::Launch(
      "server/ps_server", {"--coordinator=127.0.0.1:1", refused.flag, "--dry_run"});
  REQUIRE(server.ok());
  const absl::StatusOr<int> exit_status = (*server)->Wait(absl::Seconds(30));
  REQUIRE(exit_status.ok());
  CHECK(*exit_status == 2);
  CHECK_THAT((*server)->ReadLog(), Catch::Contains(refused.says));
}

TEST_CASE("bad requests get specific errors and the servers keep serving", "[integration]") {
  // With and without the client's send threads.
  const int send_threads = GENERATE(0, 2);
  CAPTURE(send_threads);
  Cluster cluster = StartCluster(send_threads);
  Client& client = *cluster.client;
  const std::vector<uint64_t> keys = {5, 6, 7};
  std::vector<float> before(keys.size() * 8);
  REQUIRE(client.Pull("sgd", keys, absl::MakeSpan(before)).ok());

  std::vector<float> rows(keys.size() * 8);
  std::vector<float> grads(keys.size() * 8, 1.0f);
  CHECK(client.Pull("nope", keys, absl::MakeSpan(rows)).code() == absl::StatusCode::kNotFound);
  CHECK(client.Push("nope", keys, grads).code() == absl::StatusCode::kNotFound);
  CHECK(client.Pull("sgd", keys, absl::MakeSpan(rows).subspan(1)).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(client.Push("sgd", keys, absl::MakeSpan(grads).subspan(1)).code() ==
        absl::StatusCode::kInvalidArgument);
  grads[5] = std::numeric_limits<float>::quiet_NaN();
  CHECK(client.Push("sgd", keys, grads).code() == absl::StatusCode::kInvalidArgument);
  grads[5] = 1.0f;
  grads[20] = -std::numeric_limits<float>::infinity();  // key 7's row
  CHECK(client.Push("sgd", keys, grads).code() == absl::StatusCode::kInvalidArgument);
  // And with a key repeated (its gradients summed first).
  const std::vector<uint64_t> repeated = {5, 6, 7, 6};
  std::vector<float> repeated_grads(repeated.size() * 8, 1.0f);
  repeated_grads[25] = std::numeric_limits<float>::quiet_NaN();  // the second 6's row
  CHECK(client.Push("sgd", repeated, repeated_grads).code() ==
        absl::StatusCode::kInvalidArgument);
  // Nothing of these pushes was applied, on any server.
  REQUIRE(client.Pull("sgd", keys, absl::MakeSpan(rows)).ok());
  CHECK(rows == before);

  // The same through a raw stub, past the client's own checks: the servers refuse too.
  const rpc::ShardMap map = client.shard_map();
  auto channel_args = grpc::ChannelArguments();
  channel_args.SetMaxSendMessageSize(-1);
  channel_args.SetMaxReceiveMessageSize(-1);
  auto stub = rpc::ParameterServer::NewStub(grpc::CreateCustomChannel(
      map.servers(0).address(), grpc::InsecureChannelCredentials(), channel_args));
  const uint64_t table_hash = NameHash("sgd");
  auto raw_push = [&](uint64_t key, float grad, uint64_t sequence) {
    rpc::PushRequest request;
    request.mutable_header()->set_map_version(map.version());
    request.mutable_header()->set_worker_id(client.worker_id());
    request.mutable_header()->set_sequence(sequence);
    request.set_table("sgd");
    request.set_keys(std::string(reinterpret_cast<const char*>(&key), 8));
    rpc::ShardRun* run = request.add_runs();
    run->set_shard(ShardOf(table_hash, key, map.num_shards()));
    run->set_count(1);
    std::vector<float> g(8, grad);
    request.set_grads(std::string(reinterpret_cast<const char*>(g.data()), 32));
    rpc::PushResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->Push(&context, request, &response);
    return std::make_pair(status, response.duplicate_keys());
  };
  // A key served by server 0 and one served by server 1.
  uint64_t mine = 0, theirs = 0;
  while (map.shards(ShardOf(table_hash, mine, map.num_shards())).primary() != 0) ++mine;
  while (map.shards(ShardOf(table_hash, theirs, map.num_shards())).primary() != 1) ++theirs;
  {
    const auto [status, duplicates] = raw_push(theirs, 1.0f, 1ull << 40);
    CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(absl::StrContains(status.error_message(),
                            absl::StrCat("shard map version ", map.version())));
  }
  {
    // Sent twice with one sequence: applied once.
    std::vector<float> row(8);
    REQUIRE(client.Pull("sgd", {mine}, absl::MakeSpan(row)).ok());
    const uint64_t sequence = (1ull << 40) + 1;
    CHECK(raw_push(mine, 1.0f, sequence).first.ok());
    const auto [status, duplicates] = raw_push(mine, 1.0f, sequence);
    CHECK(status.ok());
    CHECK(duplicates == 1);
    std::vector<float> after(8);
    REQUIRE(client.Pull("sgd", {mine}, absl::MakeSpan(after)).ok());
    CHECK(after[0] == Approx(row[0] - 0.1f));
  }
  {
    // A pull whose answer would exceed the job's 1 MiB message limit.
    rpc::PullRequest request;
    request.mutable_header()->set_map_version(map.version());
    request.set_table("sgd");
    std::vector<uint64_t> many;
    for (uint64_t k = 0; many.size() < 40000; ++k) {  // 40000 x 32 bytes > 1 MiB
      if (map.shards(ShardOf(table_hash, k, map.num_shards())).primary() == 0) many.push_back(k);
    }
    std::map<uint32_t, std::vector<uint64_t>> by_shard;
    for (uint64_t k : many) by_shard[ShardOf(table_hash, k, map.num_shards())].push_back(k);
    std::string bytes;
    for (const auto& [shard, ks] : by_shard) {
      rpc::ShardRun* run = request.add_runs();
      run->set_shard(shard);
      run->set_count(ks.size());
      bytes.append(reinterpret_cast<const char*>(ks.data()), ks.size() * 8);
    }
    request.set_keys(bytes);
    rpc::PullResponse response;
    grpc::ClientContext context;
    CHECK(stub->Pull(&context, request, &response).error_code() ==
          grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  // Nothing of the refused pushes was applied, and the servers still serve.
  REQUIRE(client.Pull("sgd", keys, absl::MakeSpan(rows)).ok());
  CHECK(rows == before);
}

// The wire contract (proto/ps.proto) as the daemons enforce it, through raw stubs as a client in
// another language would send: a push's worker_id must be a member id from Coordinator.Register,
// and a malformed request is INVALID_ARGUMENT naming what is wrong.
TEST_CASE("pushes from worker ids never registered are PERMISSION_DENIED; malformed requests "
          "INVALID_ARGUMENT",
          "[integration][wire]") {
  Cluster cluster = StartCluster();
  Client& client = *cluster.client;
  const rpc::ShardMap map = client.shard_map();
  const uint64_t table_hash = NameHash("sgd");
  std::vector<std::unique_ptr<rpc::ParameterServer::Stub>> stubs;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const rpc::ServerInfo& server : map.servers()) {
    channels.push_back(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    stubs.push_back(rpc::ParameterServer::NewStub(channels.back()));
  }
  // A key of each server's.
  std::vector<uint64_t> key_of(map.servers_size());
  for (int s = 0; s < map.servers_size(); ++s) {
    while (map.shards(ShardOf(table_hash, key_of[s], map.num_shards())).primary() !=
           static_cast<uint32_t>(s)) {
      ++key_of[s];
    }
  }
  auto make_push = [&](int server, uint32_t worker_id, uint64_t sequence) {
    rpc::PushRequest request;
    request.mutable_header()->set_map_version(map.version());
    request.mutable_header()->set_worker_id(worker_id);
    request.mutable_header()->set_sequence(sequence);
    request.mutable_header()->set_clock(-1);
    request.set_table("sgd");
    const uint64_t key = key_of[server];
    request.set_keys(std::string(reinterpret_cast<const char*>(&key), 8));
    rpc::ShardRun* run = request.add_runs();
    run->set_shard(ShardOf(table_hash, key, map.num_shards()));
    run->set_count(1);
    const std::vector<float> g(8, 1.0f);
    request.set_grads(std::string(reinterpret_cast<const char*>(g.data()), 32));
    return request;
  };
  auto push = [&](int server, const rpc::PushRequest& request) {
    rpc::PushResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return stubs[server]->Push(&context, request, &response);
  };
  std::vector<float> before(map.servers_size() * 8);
  REQUIRE(client.Pull("sgd", key_of, absl::MakeSpan(before)).ok());

  // Every server refuses a worker id the coordinator never issued, and says what to use.
  for (int s = 0; s < map.servers_size(); ++s) {
    const grpc::Status status = push(s, make_push(s, 4000000000u, 1));
    INFO("server " << s << ": " << status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK(absl::StrContains(status.error_message(),
                            "worker_id 4000000000 was never registered with the coordinator"));
    CHECK(absl::StrContains(status.error_message(), "Coordinator.Register"));
    CHECK(push(s, make_push(s, 0, 1)).error_code() == grpc::StatusCode::PERMISSION_DENIED);
  }
  {  // Dense gradients and step ends of a stranger too.
    rpc::PushDenseRequest dense;
    dense.mutable_header()->set_map_version(map.version());
    dense.mutable_header()->set_worker_id(4000000000u);
    dense.mutable_header()->set_sequence(1);
    dense.set_name("mlp");
    dense.set_kind(rpc::PushDenseRequest::GRADIENT);
    dense.set_total_floats(1);
    rpc::DenseChunk* chunk = dense.add_chunks();
    chunk->set_chunk(0);
    const float one = 1.0f;
    chunk->set_values(std::string(reinterpret_cast<const char*>(&one), 4));
    rpc::PushDenseResponse response;
    grpc::ClientContext context;
    CHECK(stubs[0]->PushDense(&context, dense, &response).error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
    rpc::EndStepRequest end;
    end.mutable_header()->set_map_version(map.version());
    end.mutable_header()->set_worker_id(4000000000u);
    rpc::EndStepResponse ended;
    grpc::ClientContext end_context;
    CHECK(stubs[1]->EndStep(&end_context, end, &ended).error_code() ==
          grpc::StatusCode::PERMISSION_DENIED);
  }

  // The registered client's pushes work, through the library and through a raw stub.
  const std::vector<float> grads(map.servers_size() * 8, 1.0f);
  REQUIRE(client.Push("sgd", key_of, grads).ok());
  for (int s = 0; s < map.servers_size(); ++s) {
    const grpc::Status status = push(s, make_push(s, client.worker_id(), uint64_t{1} << 40));
    INFO(status.error_message());
    CHECK(status.ok());
  }
  // A member registered after the servers last asked the coordinator: they ask again.
  auto coordinator = CoordinatorClient::Connect(cluster.coordinator->address(), absl::Seconds(10));
  REQUIRE(coordinator.ok());
  const absl::StatusOr<rpc::RegisterResponse> late = (*coordinator)->Register(rpc::CLIENT, "", -1);
  REQUIRE(late.ok());
  for (int s = 0; s < map.servers_size(); ++s) {
    const grpc::Status status = push(s, make_push(s, late->member_id(), 1));
    INFO(status.error_message());
    CHECK(status.ok());
  }
  // Applied: the library's push and two raw ones per key, SGD with learning rate 0.1.
  std::vector<float> after(before.size());
  REQUIRE(client.Pull("sgd", key_of, absl::MakeSpan(after)).ok());
  for (size_t i = 0; i < after.size(); ++i) CHECK(after[i] == Approx(before[i] - 0.3f));

  // Malformed requests: INVALID_ARGUMENT, naming what is wrong, nothing applied.
  auto refused = [&](const rpc::PushRequest& request, const std::string& says) {
    const grpc::Status status = push(0, request);
    INFO(says << ": " << status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(absl::StrContains(status.error_message(), says));
  };
  uint64_t sequence = 100;
  {
    rpc::PushRequest torn = make_push(0, client.worker_id(), ++sequence);
    torn.mutable_keys()->pop_back();
    refused(torn, "keys are 7 bytes, not a multiple of 8");
  }
  {
    rpc::PushRequest short_grads = make_push(0, client.worker_id(), ++sequence);
    short_grads.mutable_grads()->resize(28);
    refused(short_grads, "gradients are 28 bytes, 1 keys of dim 8 need 32");
  }
  {
    rpc::PushRequest runs = make_push(0, client.worker_id(), ++sequence);
    runs.mutable_runs(0)->set_count(2);
    refused(runs, "shard runs cover 2 keys, the request has 1");
  }
  {
    rpc::PushRequest out_of_range = make_push(0, client.worker_id(), ++sequence);
    out_of_range.mutable_runs(0)->set_shard(map.num_shards());
    refused(out_of_range, absl::StrCat("shard ", map.num_shards(), " out of range"));
  }
  {
    rpc::PushRequest no_sequence = make_push(0, client.worker_id(), 0);
    refused(no_sequence, "without a sequence number");
  }
  {  // Bytes that are no PushRequest at all.
    grpc::GenericStub generic(channels[0]);
    // Split: "\x10abc" would be one (out-of-range) hex escape, and the literal 2 bytes long.
    const std::string garbage("\x0a\x10" "abc", 5);
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, "/ps.rpc.ParameterServer/Push", grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    INFO(status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(absl::StrContains(status.error_message(), "does not parse as a ps.rpc.PushRequest"));
  }
  std::vector<float> last(before.size());
  REQUIRE(client.Pull("sgd", key_of, absl::MakeSpan(last)).ok());
  CHECK(last == after);
}

// With replication_factor 1 a killed server's shards have no copy left: the coordinator, told by
// the client that the server cannot be reached, marks them lost, and calls name them.
TEST_CASE("a killed server's shards answer DATA_LOSS (or UNAVAILABLE), never hang",
          "[integration]") {
  Cluster cluster = StartCluster();
  ClientOptions options;
  options.coordinator = cluster.coordinator->address();
  options.retry_timeout = absl::Seconds(1);
  options.request_timeout = absl::Seconds(1);
  auto client = Client::Connect(options);
  REQUIRE(client.ok());
  std::vector<uint64_t> keys(1000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  std::vector<float> rows(keys.size() * 8);
  REQUIRE((*client)->Pull("sgd", keys, absl::MakeSpan(rows)).ok());

  cluster.servers[1]->Kill();
  const absl::Status status = (*client)->Pull("sgd", keys, absl::MakeSpan(rows));
  INFO(status.ToString());
  CHECK((status.code() == absl::StatusCode::kDataLoss ||
         status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded));

  // The surviving server, the coordinator and the other server's clean shutdown.
  CHECK(cluster.servers[0]->Terminate(absl::Seconds(10)).ok());
  const absl::Status stopped = cluster.coordinator->Terminate(absl::Seconds(10));
  INFO(stopped.ToString());
  CHECK(stopped.ok());
}

}  // namespace
}  // namespace ps

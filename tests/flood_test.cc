// Floods (issue 16, item 5): a real ps_coordinator and ps_server on loopback; 8 threads send
// oversized and malformed requests as fast as they can for 10 seconds, each on a connection of its
// own, while a legitimate client (the project's client library) keeps pulling and pushing. Every
// legitimate call must succeed, the server's resident memory must stay bounded, the flooders must
// have been refused (RESOURCE_EXHAUSTED, INVALID_ARGUMENT, ...), and the server must still serve
// and stop cleanly at the end.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/hash.h"
#include "proto/ps.grpc.pb.h"
#include "tests/testing/daemon.h"

namespace ps {
namespace {

constexpr char kJob[] = R"pb(
  name: "flood"
  tables {
    name: "emb"
    dim: 16
    initializer { kind: UNIFORM low: -0.1 high: 0.1 }
    optimizer { type: "sgd" learning_rate: 0.1 }
  }
  training { seed: 5 mode: ASYNC }
  cluster { num_shards: 8 num_servers: 1 max_message_bytes: 1048576 dense_chunk_floats: 1000 }
)pb";

constexpr int kFlooders = 8;
constexpr absl::Duration kFlood = absl::Seconds(10);
// Calls a flooder sends at once on its connection, above the server's per-peer limit below.
constexpr int kBurst = 32;
constexpr int kPerPeerRequests = 16;
// The bound on the server's resident memory above its baseline.
constexpr int64_t kRssBoundBytes = int64_t{256} << 20;

// VmRSS of `pid` in bytes, or -1 if it cannot be read.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::string number;
    for (char c : line) {
      if (c >= '0' && c <= '9') number.push_back(c);
    }
    int64_t kib = 0;
    if (absl::SimpleAtoi(number, &kib)) return kib * 1024;
  }
  return -1;
}

std::string Bytes(const void* data, size_t size) {
  return std::string(static_cast<const char*>(data), size);
}

// The status codes the flooders saw, counted. Thread-safe.
struct CodeCounts {
  std::array<std::atomic<int64_t>, 17> counts{};
  // The RESOURCE_EXHAUSTED of these that the admission gave ("server busy: ...").
  std::atomic<int64_t> busy{0};
  void Add(const grpc::Status& status) {
    counts[static_cast<int>(status.error_code()) % 17].fetch_add(1);
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
        status.error_message().rfind("server busy", 0) == 0) {
      busy.fetch_add(1);
    }
  }
  int64_t Of(grpc::StatusCode code) const { return counts[static_cast<int>(code)].load(); }
};

// One flooder: a connection of its own (a local subchannel pool), requests from a seeded engine.
class Flooder {
 public:
  // `worker_id`: a registered member's, so that malformed pushes get past the worker check.
  Flooder(const std::string& address, uint32_t seed, uint32_t worker_id, CodeCounts* codes)
      : rng_(seed), worker_id_(worker_id), codes_(codes) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxSendMessageSize(-1);
    args.SetMaxReceiveMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
    // Above the job's 1 MiB message limit: a pull of 200000 keys (1.6 MB asking for 12.8 MB).
    rpc::PullRequest oversized;
    oversized.set_table("emb");
    std::vector<uint64_t> keys(200000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
    oversized.set_keys(Bytes(keys.data(), keys.size() * sizeof(uint64_t)));
    rpc::ShardRun* run = oversized.add_runs();
    run->set_shard(0);
    run->set_count(keys.size());
    oversized_ = oversized.SerializeAsString();
  }

  // Sends bursts until `deadline`: each burst is kBurst malformed requests at once, then one
  // oversized request.
  void Run(absl::Time deadline) {
    while (absl::Now() < deadline) {
      std::vector<std::pair<std::string, std::string>> burst;
      for (int i = 0; i < kBurst; ++i) burst.push_back(Malformed());
      Send(burst);
      Send({{"Pull", oversized_}});
    }
  }

 private:
  // A request that must be refused: random bytes, an unknown table, a dim that disagrees with the
  // table's, or runs that claim far more keys than the bytes hold.
  std::pair<std::string, std::string> Malformed() {
    const char* method = rng_() % 2 == 0 ? "Push" : "Pull";
    switch (rng_() % 4) {
      case 0: {
        std::string random(rng_() % 4096, '\0');
        for (char& c : random) c = static_cast<char>(rng_());
        return {method, random};
      }
      case 1: {
        rpc::PullRequest pull;
        pull.set_table("no_such_table");
        const uint64_t key = rng_();
        pull.set_keys(Bytes(&key, sizeof(key)));
        return {"Pull", pull.SerializeAsString()};
      }
      case 2: {
        rpc::PushRequest push;  // 3 keys, gradients of dim 7 (the table's is 16)
        push.set_table("emb");
        push.mutable_header()->set_worker_id(worker_id_);
        push.mutable_header()->set_sequence(1 + rng_() % 1000);
        const uint64_t keys[3] = {rng_(), rng_(), rng_()};
        push.set_keys(Bytes(keys, sizeof(keys)));
        rpc::ShardRun* run = push.add_runs();
        run->set_shard(0);
        run->set_count(3);
        push.set_grads(std::string(3 * 7 * sizeof(float), '\0'));
        return {"Push", push.SerializeAsString()};
      }
      default: {
        rpc::PullRequest pull;  // runs claiming 2^33 keys, 2 keys' bytes
        pull.set_table("emb");
        const uint64_t keys[2] = {rng_(), rng_()};
        pull.set_keys(Bytes(keys, sizeof(keys)));
        for (int i = 0; i < 2; ++i) {
          rpc::ShardRun* run = pull.add_runs();
          run->set_shard(rng_() % 8);
          run->set_count(0xffffffffu);
        }
        return {"Pull", pull.SerializeAsString()};
      }
    }
  }

  // Sends every request of `calls` at once and waits for all the answers.
  void Send(const std::vector<std::pair<std::string, std::string>>& calls) {
    struct Call {
      grpc::ClientContext context;
      grpc::ByteBuffer request;
      grpc::ByteBuffer response;
    };
    std::vector<std::unique_ptr<Call>> in_flight;
    absl::Mutex mu;
    size_t done = 0;
    for (const auto& [method, bytes] : calls) {
      auto call = std::make_unique<Call>();
      call->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      grpc::Slice slice(bytes);
      call->request = grpc::ByteBuffer(&slice, 1);
      stub_->UnaryCall(&call->context, "/ps.rpc.ParameterServer/" + method, grpc::StubOptions(),
                       &call->request, &call->response, [this, &mu, &done](grpc::Status status) {
                         codes_->Add(status);
                         absl::MutexLock lock(&mu);
                         ++done;
                       });
      in_flight.push_back(std::move(call));
    }
    absl::MutexLock lock(&mu);
    auto all_done = [&done, &calls] { return done == calls.size(); };
    mu.Await(absl::Condition(&all_done));
  }

  std::mt19937_64 rng_;
  const uint32_t worker_id_;
  CodeCounts* const codes_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
  std::string oversized_;
};

TEST_CASE("Floods: oversized and malformed requests from 8 threads for 10 s", "[flood]") {
  auto coordinator = testing::StartCoordinator(kJob, "flood_job");
  INFO(coordinator.status().ToString());
  REQUIRE(coordinator.ok());
  auto server = testing::Daemon::Start(
      "server/ps_server", {absl::StrCat("--coordinator=", (*coordinator)->address()),
                           absl::StrCat("--max_inflight_requests_per_peer=", kPerPeerRequests),
                           "--max_inflight_bytes_per_peer=16777216"});
  INFO(server.status().ToString());
  REQUIRE(server.ok());

  ClientOptions options;
  options.coordinator = (*coordinator)->address();
  options.connect_timeout = absl::Seconds(30);
  auto client = Client::Connect(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  constexpr int kKeys = 1000;
  std::vector<uint64_t> keys(kKeys);
  for (int i = 0; i < kKeys; ++i) keys[i] = i * 7919;
  std::vector<float> rows(kKeys * 16);
  std::vector<float> grads(kKeys * 16, 0.001f);
  REQUIRE((*client)->Pull("emb", keys, absl::MakeSpan(rows)).ok());
  const int64_t baseline = ResidentBytes((*server)->pid());
  REQUIRE(baseline > 0);

  CodeCounts codes;
  std::atomic<bool> flooding{true};
  const absl::Time deadline = absl::Now() + kFlood;
  std::vector<std::thread> threads;
  for (int t = 0; t < kFlooders; ++t) {
    threads.emplace_back([&, t] {
      Flooder flooder((*server)->address(), 1000 + t, (*client)->worker_id(), &codes);
      flooder.Run(deadline);
    });
  }
  // The server's resident memory, sampled while the flood lasts.
  std::atomic<int64_t> peak{baseline};
  std::thread sampler([&] {
    while (flooding.load()) {
      const int64_t rss = ResidentBytes((*server)->pid());
      if (rss > peak.load()) peak.store(rss);
      absl::SleepFor(absl::Milliseconds(20));  // a sampling interval, not a synchronisation
    }
  });
  // The legitimate client, pulling and pushing all along.
  int64_t pulls = 0;
  int64_t pushes = 0;
  std::vector<std::string> failures;
  while (absl::Now() < deadline) {
    const absl::Status pulled = (*client)->Pull("emb", keys, absl::MakeSpan(rows));
    if (pulled.ok()) {
      ++pulls;
    } else {
      failures.push_back(pulled.ToString());
    }
    const absl::Status pushed = (*client)->Push("emb", keys, grads);
    if (pushed.ok()) {
      ++pushes;
    } else {
      failures.push_back(pushed.ToString());
    }
  }
  for (std::thread& thread : threads) thread.join();
  flooding.store(false);
  sampler.join();

  const int64_t refused_busy = codes.Of(grpc::StatusCode::RESOURCE_EXHAUSTED);
  const int64_t refused_invalid = codes.Of(grpc::StatusCode::INVALID_ARGUMENT);
  std::printf(
      "flood: %lld RESOURCE_EXHAUSTED (%lld of them admission's \"server busy\"), %lld "
      "INVALID_ARGUMENT, %lld NOT_FOUND, %lld "
      "FAILED_PRECONDITION, %lld UNAVAILABLE, %lld PERMISSION_DENIED, %lld DEADLINE_EXCEEDED, %lld "
      "OK; legitimate: %lld pulls, %lld pushes, %zu failures; server RSS baseline %.1f MiB, peak "
      "%.1f MiB (bound: baseline + %lld MiB)\n",
      static_cast<long long>(refused_busy), static_cast<long long>(codes.busy.load()),
      static_cast<long long>(refused_invalid),
      static_cast<long long>(codes.Of(grpc::StatusCode::NOT_FOUND)),
      static_cast<long long>(codes.Of(grpc::StatusCode::FAILED_PRECONDITION)),
      static_cast<long long>(codes.Of(grpc::StatusCode::UNAVAILABLE)),
      static_cast<long long>(codes.Of(grpc::StatusCode::PERMISSION_DENIED)),
      static_cast<long long>(codes.Of(grpc::StatusCode::DEADLINE_EXCEEDED)),
      static_cast<long long>(codes.Of(grpc::StatusCode::OK)), static_cast<long long>(pulls),
      static_cast<long long>(pushes), failures.size(), baseline / 1048576.0,
      peak.load() / 1048576.0, static_cast<long long>(kRssBoundBytes >> 20));
  std::fflush(stdout);
  INFO((failures.empty() ? std::string("no failure") : failures.front()));
  CHECK(failures.empty());
  CHECK(pulls > 0);
  CHECK(refused_busy > 0);
  CHECK(refused_invalid > 0);
  CHECK(peak.load() - baseline < kRssBoundBytes);
  // Still serving, and it stops cleanly.
  REQUIRE((*client)->Pull("emb", keys, absl::MakeSpan(rows)).ok());
  client->reset();
  const absl::Status stopped = (*server)->Terminate(absl::Seconds(30));
  INFO(stopped.ToString());
  CHECK(stopped.ok());
}

}  // namespace
}  // namespace ps

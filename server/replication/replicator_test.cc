#include "server/replication/replicator.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "server/storage/embedding_table.h"

namespace ps {
namespace server {
namespace {

constexpr uint32_t kDim = 4;

struct Tables {
  Tables() {
    config::Table table;
    table.set_name("emb");
    table.set_dim(kDim);
    table.mutable_optimizer()->set_type("adam");
    table.mutable_optimizer()->set_learning_rate(0.1f);
    table.mutable_initializer()->set_kind(config::Initializer::UNIFORM);
    auto spec = TableSpec::Create(table, 5);
    REQUIRE(spec.ok());
    tables.push_back(std::move(spec).value());
    config::Optimizer dense;
    dense.set_type("sgd");
    dense.set_learning_rate(1.0f);
    dense_optimizer = std::move(Optimizer::Create(dense)).value();
    config.tables = &tables;
    config.dense_optimizer = dense_optimizer.get();
    config.dense_chunk_floats = 16;
  }
  std::vector<std::unique_ptr<TableSpec>> tables;
  std::unique_ptr<Optimizer> dense_optimizer;
  ShardConfig config;
};

// Delivers calls only when the test pumps them, to copies held by "servers" by address; an
// address that is "down" fails its calls with UNAVAILABLE.
class FakeTransport : public ReplicationTransport {
 public:
  void Send(const std::string& address, grpc::ByteBuffer request,
            std::function<void(absl::StatusOr<rpc::ReplicateResponse>)> done) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back({address, std::move(request), std::move(done)});
  }

  // Delivers every call queued so far (and none that their answers cause); returns how many.
  int Pump() {
    std::deque<Call> calls;
    {
      absl::MutexLock lock(&mu_);
      calls.swap(calls_);
    }
    for (Call& call : calls) {
      if (down.count(call.address) > 0) {
        call.done(absl::UnavailableError("connection refused"));
        continue;
      }
      rpc::ReplicateResponse response;
      std::map<uint32_t, std::unique_ptr<Shard>>& copies = servers[call.address];
      const absl::Status applied = ApplyReplicateRequest(
          call.request,
          [&](uint32_t shard) -> Shard* {
            auto it = copies.find(shard);
            return it == copies.end() ? nullptr : it->second.get();
          },
          &response);
      if (applied.ok()) {
        call.done(std::move(response));
      } else {
        call.done(applied);
      }
    }
    return static_cast<int>(calls.size());
  }

  // Pumps until nothing is sent any more.
  void PumpAll() {
    while (Pump() > 0) {
    }
  }

  std::map<std::string, std::map<uint32_t, std::unique_ptr<Shard>>> servers;
  std::set<std::string> down;

 private:
  struct Call {
    std::string address;
    grpc::ByteBuffer request;
    std::function<void(absl::StatusOr<rpc::ReplicateResponse>)> done;
  };
  absl::Mutex mu_;
  std::deque<Call> calls_ ABSL_GUARDED_BY(mu_);
};

std::vector<float> Rows(Shard& shard, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * kDim);
  shard.Pull(0, keys, out.data());
  return out;
}

uint64_t PushRandom(Shard& shard, std::mt19937_64* rng, uint32_t worker, uint64_t sequence) {
  std::vector<uint64_t> keys = {(*rng)() % 50, 50 + (*rng)() % 50};
  std::vector<float> grads(keys.size() * kDim);
  for (float& g : grads) g = static_cast<float>((*rng)() % 1000) / 500.0f - 1.0f;
  shard.Push(0, worker, sequence, keys, grads.data());
  return shard.applied_sequence();
}

TEST_CASE("SYNC replication holds a push until every live copy applied it", "[replication]") {
  Tables t;
  FakeTransport transport;
  transport.servers["r1"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  transport.servers["r2"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  Replicator::Options options;
  options.server_id = 0;
  Replicator replicator(options, &transport);
  Shard primary(0, t.config, {});
  replicator.SetTargets(&primary, {{1, "r1", true}, {2, "r2", true}});

  std::mt19937_64 rng(11);
  const uint64_t sequence = PushRandom(primary, &rng, 1, 1);
  bool done = false;
  absl::Status result;
  replicator.WhenReplicated({{0, sequence}}, [&](absl::Status s) {
    done = true;
    result = s;
  });
  CHECK_FALSE(done);  // nothing delivered yet
  transport.PumpAll();
  CHECK(done);
  CHECK(result.ok());
  const std::vector<uint64_t> keys = {1, 2, 3, 60, 70};
  Shard& r1 = *transport.servers["r1"][0];
  CHECK(r1.complete());
  CHECK(r1.applied_sequence() == primary.applied_sequence());
  CHECK(Rows(r1, keys) == Rows(primary, keys));
  // The copies had no rows of their own: they were created by the pull above on each side alike.
  CHECK(Rows(*transport.servers["r2"][0], keys) == Rows(primary, keys));

  // A catching-up copy does not hold pushes back.
  transport.servers["r3"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  replicator.SetTargets(&primary, {{1, "r1", true}, {2, "r2", true}, {3, "r3", false}});
  const uint64_t next = PushRandom(primary, &rng, 1, 2);
  bool second = false;
  replicator.WhenReplicated({{0, next}}, [&](absl::Status) { second = true; });
  transport.Pump();  // one batch per server: r3's holds the snapshot and the push
  CHECK(second);
  transport.PumpAll();
  CHECK(transport.servers["r3"][0]->applied_sequence() == primary.applied_sequence());
  CHECK(Rows(*transport.servers["r3"][0], keys) == Rows(primary, keys));
}

TEST_CASE("a cork sends a thread's records together when it ends", "[replication]") {
  Tables t;
  FakeTransport transport;
  transport.servers["r1"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  Replicator::Options options;
  options.lanes = 1;
  // The retry thread would send queued records of an idle lane after retry_after: not here.
  options.retry_after = absl::Hours(1);
  Replicator replicator(options, &transport);
  Shard primary(0, t.config, {});
  replicator.SetTargets(&primary, {{1, "r1", true}});
  transport.PumpAll();  // the snapshot
  std::mt19937_64 rng(13);
  Shard& r1 = *transport.servers["r1"][0];

  SECTION("without a cork the first record leaves alone, the others after its answer") {
    for (uint64_t s = 1; s <= 3; ++s) PushRandom(primary, &rng, 1, s);
    CHECK(transport.Pump() == 1);
    CHECK(r1.applied_sequence() == primary.applied_sequence() - 2);
    CHECK(transport.Pump() == 1);
  }
  SECTION("with one, nothing leaves until it ends, then all in one call") {
    {
      Replicator::Cork cork(&replicator);
      Replicator::Cork nested(&replicator);
      for (uint64_t s = 1; s <= 3; ++s) PushRandom(primary, &rng, 1, s);
      CHECK(transport.Pump() == 0);
    }
    CHECK(transport.Pump() == 1);
    CHECK(transport.Pump() == 0);
  }
  SECTION("a cork of another replicator, or of none, holds nothing back") {
    Replicator other(options, &transport);
    Replicator::Cork cork(&other);
    Replicator::Cork none(nullptr);
    PushRandom(primary, &rng, 1, 1);
    CHECK(transport.Pump() == 1);
  }
  CHECK(r1.applied_sequence() == primary.applied_sequence());
  const std::vector<uint64_t> keys = {1, 2, 3, 60, 70};
  CHECK(Rows(r1, keys) == Rows(primary, keys));
}

TEST_CASE("ASYNC replication answers at once and reports the lag", "[replication]") {
  Tables t;
  FakeTransport transport;
  transport.servers["r1"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  Replicator::Options options;
  options.sync = false;
  Replicator replicator(options, &transport);
  Shard primary(0, t.config, {});
  replicator.SetTargets(&primary, {{1, "r1", true}});
  transport.PumpAll();
  std::mt19937_64 rng(12);
  bool done = false;
  for (uint64_t s = 1; s <= 5; ++s) PushRandom(primary, &rng, 1, s);
  replicator.WhenReplicated({{0, primary.applied_sequence()}}, [&](absl::Status) { done = true; });
  CHECK(done);
  std::vector<rpc::ReplicaLag> lags = replicator.Lags(0);
  REQUIRE(lags.size() == 1);
  CHECK(lags[0].server_id() == 1);
  CHECK(lags[0].records() == 5);
  CHECK(lags[0].bytes() > 0);
  transport.PumpAll();
  lags = replicator.Lags(0);
  CHECK(lags[0].records() == 0);
  CHECK(transport.servers["r1"][0]->applied_sequence() == primary.applied_sequence());
}

TEST_CASE("an unreachable copy is reported and retried; a removed one releases the pushes",
          "[replication]") {
  Tables t;
  FakeTransport transport;
  transport.servers["r1"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  transport.servers["r2"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  std::vector<uint32_t> reported;
  absl::Mutex reported_mu;
  Replicator::Options options;
  options.retry_after = absl::Milliseconds(1);
  options.on_unreachable = [&](uint32_t server, const absl::Status&) {
    absl::MutexLock lock(&reported_mu);
    reported.push_back(server);
  };
  Replicator replicator(options, &transport);
  Shard primary(0, t.config, {});
  transport.down.insert("r2");
  replicator.SetTargets(&primary, {{1, "r1", true}, {2, "r2", true}});
  std::mt19937_64 rng(13);
  const uint64_t sequence = PushRandom(primary, &rng, 1, 1);
  bool done = false;
  replicator.WhenReplicated({{0, sequence}}, [&](absl::Status s) { done = s.ok(); });
  transport.Pump();
  CHECK_FALSE(done);
  {
    absl::MutexLock lock(&reported_mu);
    CHECK(std::count(reported.begin(), reported.end(), 2u) >= 1);
  }
  // The coordinator drops the dead copy from the map: the push no longer waits for it.
  replicator.SetTargets(&primary, {{1, "r1", true}});
  transport.PumpAll();
  CHECK(done);
}

TEST_CASE("a copy that lost the stream gets a new snapshot", "[replication]") {
  Tables t;
  FakeTransport transport;
  transport.servers["r1"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  Replicator replicator(Replicator::Options(), &transport);
  Shard primary(0, t.config, {});
  replicator.SetTargets(&primary, {{1, "r1", true}});
  std::mt19937_64 rng(14);
  for (uint64_t s = 1; s <= 3; ++s) PushRandom(primary, &rng, 1, s);
  transport.PumpAll();
  // The copy is replaced by an empty one (its server restarted with the same address).
  transport.servers["r1"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  const uint64_t sequence = PushRandom(primary, &rng, 1, 4);
  bool done = false;
  replicator.WhenReplicated({{0, sequence}}, [&](absl::Status s) { done = s.ok(); });
  transport.PumpAll();
  CHECK(done);
  Shard& copy = *transport.servers["r1"][0];
  CHECK(copy.complete());
  CHECK(copy.applied_sequence() == primary.applied_sequence());
  const std::vector<uint64_t> keys = {1, 20, 55, 90};
  CHECK(Rows(copy, keys) == Rows(primary, keys));
}

TEST_CASE("pushes waiting on a shard that moves are told to retry; after Shutdown every wait fails",
          "[replication]") {
  Tables t;
  FakeTransport transport;
  transport.servers["r1"][0] = std::make_unique<Shard>(0, t.config, std::vector<size_t>{}, false);
  auto replicator = std::make_unique<Replicator>(Replicator::Options(), &transport);
  Shard primary(0, t.config, {});
  replicator->SetTargets(&primary, {{1, "r1", true}});
  std::mt19937_64 rng(15);
  const uint64_t sequence = PushRandom(primary, &rng, 1, 1);
  absl::Status result;
  replicator->WhenReplicated({{0, sequence}}, [&](absl::Status s) { result = s; });
  replicator->RemoveShard(&primary);
  CHECK(absl::IsUnavailable(result));
  transport.Pump();  // Shutdown waits for the calls in flight
  bool later = false;
  replicator->Shutdown();
  replicator->WhenReplicated({{0, sequence}},
                             [&](absl::Status s) { later = absl::IsUnavailable(s); });
  CHECK(later);
}

}  // namespace
}  // namespace server
}  // namespace ps

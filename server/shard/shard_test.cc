#include "server/shard/shard.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "server/storage/embedding_table.h"

namespace ps {
namespace server {
namespace {

constexpr uint32_t kDim = 4;

// Two tables ("a" with adagrad, "b" with sgd) and an sgd dense optimizer.
struct Fixture {
  explicit Fixture(bool sync) {
    for (const char* name : {"a", "b"}) {
      config::Table table;
      table.set_name(name);
      table.set_dim(kDim);
      table.mutable_optimizer()->set_type(std::string(name) == "a" ? "adagrad" : "sgd");
      table.mutable_optimizer()->set_learning_rate(0.5f);
      table.mutable_initializer()->set_kind(config::Initializer::NORMAL);
      auto spec = TableSpec::Create(table, /*job_seed=*/7);
      REQUIRE(spec.ok());
      tables.push_back(std::move(spec).value());
    }
    config::Optimizer dense;
    dense.set_type("sgd");
    dense.set_learning_rate(1.0f);
    auto opt = Optimizer::Create(dense);
    REQUIRE(opt.ok());
    dense_optimizer = std::move(opt).value();
    config.tables = &tables;
    config.dense_optimizer = dense_optimizer.get();
    config.dense_chunk_floats = 8;
    config.sync = sync;
  }

  std::vector<std::unique_ptr<TableSpec>> tables;
  std::unique_ptr<Optimizer> dense_optimizer;
  ShardConfig config;
};

std::vector<float> PullRows(Shard& shard, size_t table, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * kDim);
  shard.Pull(table, keys, out.data());
  return out;
}

TEST_CASE("a push is applied once per (worker, sequence) and counted in the sequence", "[shard]") {
  Fixture f(/*sync=*/false);
  Shard shard(3, f.config, {16, 0});
  CHECK(shard.id() == 3);
  CHECK(shard.applied_sequence() == 0);
  const std::vector<uint64_t> keys = {5, 9, 5};
  const std::vector<float> before = PullRows(shard, 1, {5, 9});
  std::vector<float> grads(keys.size() * kDim, 1.0f);
  CHECK(shard.Push(1, /*worker=*/2, /*sequence=*/1, keys, grads.data()) ==
        ApplyWindow::Verdict::kApply);
  CHECK(shard.applied_sequence() == 1);
  // A retry changes nothing.
  CHECK(shard.Push(1, 2, 1, keys, grads.data()) == ApplyWindow::Verdict::kDuplicate);
  CHECK(shard.applied_sequence() == 1);
  // sgd at rate 0.5: key 5 got two gradients of 1 (summed), key 9 one.
  const std::vector<float> after = PullRows(shard, 1, {5, 9});
  for (uint32_t j = 0; j < kDim; ++j) {
    CHECK(after[j] == before[j] - 1.0f);
    CHECK(after[kDim + j] == before[kDim + j] - 0.5f);
  }
  // Another worker's sequence 1 is its own.
  CHECK(shard.Push(1, 3, 1, keys, grads.data()) == ApplyWindow::Verdict::kApply);
  CHECK(shard.applied_sequence() == 2);
  std::vector<uint64_t> rows(2, 0), bytes(2, 0);
  shard.AddSizes(&rows, &bytes);
  CHECK(rows == std::vector<uint64_t>{0, 2});
  CHECK(bytes[1] > 0);
}

TEST_CASE("sync pushes wait for ApplyStep, which applies their sum once", "[shard]") {
  Fixture f(/*sync=*/true);
  Shard shard(0, f.config, {});
  const std::vector<uint64_t> keys = {11};
  const std::vector<float> before = PullRows(shard, 1, keys);
  std::vector<float> grads(kDim, 2.0f);
  REQUIRE(shard.Push(1, 1, 1, keys, grads.data()) == ApplyWindow::Verdict::kApply);
  REQUIRE(shard.Push(1, 2, 1, keys, grads.data()) == ApplyWindow::Verdict::kApply);
  CHECK(PullRows(shard, 1, keys) == before);
  CHECK(shard.applied_step() == -1);
  shard.ApplyStep(0);
  CHECK(shard.applied_step() == 0);
  CHECK(shard.applied_sequence() == 3);
  const std::vector<float> after = PullRows(shard, 1, keys);
  for (uint32_t j = 0; j < kDim; ++j) CHECK(after[j] == before[j] - 2.0f);
  // The sums were consumed: an empty step changes no row.
  shard.ApplyStep(1);
  CHECK(PullRows(shard, 1, keys) == after);
  CHECK(shard.applied_step() == 1);
}

TEST_CASE("dense chunks: assign, gradients once per sequence, refused writes record nothing",
          "[shard]") {
  Fixture f(/*sync=*/false);
  Shard shard(0, f.config, {});
  std::vector<float> values;
  uint64_t total = 0;
  CHECK(shard.ReadDense("w", 0, &values, &total).code() == absl::StatusCode::kNotFound);
  const std::vector<float> init(8, 1.0f);
  REQUIRE(shard.AssignDense("w", 0, init, 10).ok());
  CHECK(shard.applied_sequence() == 1);
  REQUIRE(shard.ReadDense("w", 0, &values, &total).ok());
  CHECK(values == init);
  CHECK(total == 10);
  // A gradient of the wrong length is refused and does not use up its sequence.
  const std::vector<float> short_grad(3, 1.0f);
  CHECK(shard.ApplyDenseGradient("w", 0, short_grad, 10, 1, 5).status().code() ==
        absl::StatusCode::kInvalidArgument);
  const std::vector<float> grad(8, 0.25f);
  auto applied = shard.ApplyDenseGradient("w", 0, grad, 10, 1, 5);
  REQUIRE(applied.ok());
  CHECK(*applied == ApplyWindow::Verdict::kApply);
  auto again = shard.ApplyDenseGradient("w", 0, grad, 10, 1, 5);
  REQUIRE(again.ok());
  CHECK(*again == ApplyWindow::Verdict::kDuplicate);
  REQUIRE(shard.ReadDense("w", 0, &values, &total).ok());
  CHECK(values == std::vector<float>(8, 0.75f));
  CHECK(shard.applied_sequence() == 2);
}

// Everything a shard holds, by key, so that two shards with different histories compare.
struct Dump {
  uint64_t sequence = 0;
  int64_t step = -1;
  std::map<std::pair<uint32_t, uint64_t>, std::string> rows;      // (table, id) -> row bytes
  std::map<std::pair<std::string, uint32_t>, std::string> dense;  // (name, chunk) -> values+state
  std::map<uint32_t, std::string> window;                         // worker -> highest+bitmap
  std::map<std::pair<uint32_t, uint64_t>, std::string> pending;   // (table, id) -> sums
  bool operator==(const Dump& o) const {
    return std::tie(sequence, step, rows, dense, window, pending) ==
           std::tie(o.sequence, o.step, o.rows, o.dense, o.window, o.pending);
  }
};

std::vector<rpc::ShardRecord> SnapshotOf(Shard& shard, size_t max_bytes = 1 << 20) {
  std::vector<rpc::ShardRecord> records;
  shard.Snapshot(
      /*snapshot_id=*/1, max_bytes, [&](rpc::ShardRecord&& r) { records.push_back(std::move(r)); },
      [] {});
  return records;
}

void AddRows(const rpc::RowsChange& change, size_t floats_per_key,
             std::map<std::pair<uint32_t, uint64_t>, std::string>* out) {
  const size_t n = change.keys().size() / 8;
  for (size_t i = 0; i < n; ++i) {
    uint64_t id;
    std::memcpy(&id, change.keys().data() + 8 * i, 8);
    (*out)[{change.table(), id}] =
        change.values().substr(i * floats_per_key * 4, floats_per_key * 4);
  }
}

Dump DumpOf(Shard& shard, const Fixture& f) {
  Dump d;
  for (const rpc::ShardRecord& r : SnapshotOf(shard)) {
    d.sequence = r.sequence();
    if (r.has_snapshot_begin()) d.step = r.snapshot_begin().applied_step();
    if (r.has_rows()) AddRows(r.rows(), f.tables[r.rows().table()]->row_floats(), &d.rows);
    if (r.has_pending()) AddRows(r.pending(), f.tables[r.pending().table()]->dim, &d.pending);
    if (r.has_dense()) {
      d.dense[{r.dense().name(), r.dense().chunk()}] = r.dense().values() + "|" + r.dense().state();
    }
    if (r.has_window()) {
      d.window[r.window().worker_id()] = std::to_string(r.window().highest()) + r.window().seen();
    }
  }
  CHECK(d.sequence == shard.applied_sequence());
  return d;
}

// Random pushes (some retried), dense writes and, in sync mode, steps.
void RandomChanges(Shard& shard, bool sync, std::mt19937_64* rng, int n) {
  std::uniform_int_distribution<uint64_t> key(0, 200);
  for (int i = 0; i < n; ++i) {
    const int what = static_cast<int>((*rng)() % 10);
    if (what == 0) {
      std::vector<float> grad(8);
      for (float& g : grad) g = static_cast<float>((*rng)() % 100) / 100.0f;
      const uint64_t sequence = 1000 + (*rng)() % 50;
      REQUIRE(
          shard.ApplyDenseGradient("w", static_cast<uint32_t>((*rng)() % 2), grad, 16, 9, sequence)
              .ok());
    } else if (what == 1 && sync) {
      shard.ApplyStep(shard.applied_step() + 1);
    } else {
      std::vector<uint64_t> keys(1 + (*rng)() % 20);
      for (uint64_t& k : keys) k = key(*rng);
      std::vector<float> grads(keys.size() * kDim);
      for (float& g : grads) g = static_cast<float>(static_cast<int>((*rng)() % 200) - 100) / 50;
      const uint32_t worker = 1 + (*rng)() % 3;
      const uint64_t sequence = 1 + (*rng)() % 40;  // repeats: retries
      shard.Push((*rng)() % 2, worker, sequence, keys, grads.data());
    }
  }
}

TEST_CASE("a copy that applies the primary's records holds the same state bit for bit",
          "[shard][replication]") {
  const bool sync = GENERATE(false, true);
  CAPTURE(sync);
  Fixture f(sync);
  Shard primary(5, f.config, {});
  Shard copy(5, f.config, {});
  std::vector<rpc::ShardRecord> stream;
  primary.SetRecordSink([&](rpc::ShardRecord&& r) { stream.push_back(std::move(r)); });
  std::mt19937_64 rng(42);
  RandomChanges(primary, sync, &rng, 300);
  REQUIRE(stream.size() == primary.applied_sequence());
  for (const rpc::ShardRecord& r : stream) {
    CHECK(r.shard() == 5);
    const absl::Status applied = copy.ApplyRecord(r);
    INFO(applied.ToString());
    REQUIRE(applied.ok());
  }
  CHECK(DumpOf(copy, f) == DumpOf(primary, f));
  // A batch sent again changes nothing.
  REQUIRE(copy.ApplyRecord(stream[stream.size() / 2]).ok());
  CHECK(DumpOf(copy, f) == DumpOf(primary, f));
  if (sync) CHECK(copy.applied_step() == primary.applied_step());
}

TEST_CASE("a new copy catches up from a snapshot, then the stream's tail", "[shard][replication]") {
  const bool sync = GENERATE(false, true);
  CAPTURE(sync);
  Fixture f(sync);
  Shard primary(1, f.config, {});
  std::mt19937_64 rng(7);
  RandomChanges(primary, sync, &rng, 200);

  Shard copy(1, f.config, {}, /*complete=*/false);
  CHECK_FALSE(copy.complete());
  // As a replicator does: the sink is set, and the copy becomes one of its targets in `then`.
  std::vector<rpc::ShardRecord> stream;
  bool attached = false;
  primary.SetRecordSink([&](rpc::ShardRecord&& r) {
    if (attached) stream.push_back(std::move(r));
  });
  primary.Snapshot(
      /*snapshot_id=*/7, /*max_record_bytes=*/512,
      [&](rpc::ShardRecord&& r) { stream.push_back(std::move(r)); }, [&] { attached = true; });
  REQUIRE(stream.size() > 3);  // small records: the rows come in several
  RandomChanges(primary, sync, &rng, 100);
  for (size_t i = 0; i < stream.size(); ++i) {
    const absl::Status applied = copy.ApplyRecord(stream[i]);
    INFO("record " << i << ": " << applied.ToString());
    REQUIRE(applied.ok());
  }
  CHECK(copy.complete());
  CHECK(copy.snapshot_id() == 7);
  CHECK(DumpOf(copy, f) == DumpOf(primary, f));
}

TEST_CASE("records out of sequence or malformed are refused and change nothing",
          "[shard][replication]") {
  Fixture f(/*sync=*/false);
  Shard primary(0, f.config, {});
  std::vector<rpc::ShardRecord> stream;
  primary.SetRecordSink([&](rpc::ShardRecord&& r) { stream.push_back(std::move(r)); });
  std::mt19937_64 rng(3);
  RandomChanges(primary, false, &rng, 10);
  REQUIRE(stream.size() >= 3);

  Shard copy(0, f.config, {});
  // A gap: record 2 before record 1.
  CHECK(copy.ApplyRecord(stream[1]).code() == absl::StatusCode::kAborted);
  CHECK(copy.applied_sequence() == 0);
  // A copy waiting for a snapshot takes no stream record.
  Shard waiting(0, f.config, {}, /*complete=*/false);
  CHECK(waiting.ApplyRecord(stream[0]).code() == absl::StatusCode::kAborted);

  rpc::ShardRecord bad = stream[0];
  if (bad.has_rows()) {
    bad.mutable_rows()->mutable_values()->pop_back();
  } else {
    bad.mutable_dense()->mutable_values()->append("x");
  }
  CHECK(copy.ApplyRecord(bad).code() == absl::StatusCode::kInvalidArgument);
  rpc::ShardRecord unknown_table = stream[0];
  unknown_table.clear_change();
  unknown_table.mutable_rows()->set_table(7);
  CHECK(copy.ApplyRecord(unknown_table).code() == absl::StatusCode::kInvalidArgument);
  CHECK(copy.applied_sequence() == 0);
  for (const rpc::ShardRecord& r : stream) REQUIRE(copy.ApplyRecord(r).ok());
  CHECK(DumpOf(copy, f) == DumpOf(primary, f));
}

}  // namespace
}  // namespace server
}  // namespace ps

#include "server/shard/shard.h"

#include <stdlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/half.h"
#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "server/storage/embedding_table.h"
#include "server/storage/row_tier.h"

namespace ps {
namespace server {
namespace {

constexpr uint32_t kDim = 4;

// Two tables ("a" with adagrad, or `a_optimizer`, "b" with sgd), their weights stored as
// `value_type`, and an sgd dense optimizer.
struct Fixture {
  explicit Fixture(bool sync, config::Table::ValueType value_type = config::Table::FP32,
                   const std::string& a_optimizer = "adagrad") {
    for (const char* name : {"a", "b"}) {
      config::Table table;
      table.set_name(name);
      table.set_dim(kDim);
      table.set_value_type(value_type);
      table.mutable_optimizer()->set_type(std::string(name) == "a" ? a_optimizer : "sgd");
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

// Replaces `shard` with `cut` as a server restoring a checkpoint does (server_checkpoint.cc):
// BeginRestore, then FinishRestore with the cut's records.
absl::Status RestoreCut(Shard& shard, const ShardCut& cut) {
  shard.BeginRestore();
  return shard.FinishRestore(cut);
}

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
  // CheckDenseWrite says beforehand what a write would say, and changes nothing.
  CHECK(shard.CheckDenseWrite("w", 0, 8, 10).ok());
  CHECK(shard.CheckDenseWrite("w", 1, 2, 10).ok());
  CHECK(shard.CheckDenseWrite("w", 1, 3, 10).code() == absl::StatusCode::kInvalidArgument);
  CHECK(shard.CheckDenseWrite("w", 0, 8, 12).code() == absl::StatusCode::kInvalidArgument);
  CHECK(shard.CheckDenseWrite("w", 2, 8, 10).code() == absl::StatusCode::kInvalidArgument);
  CHECK(shard.applied_sequence() == 1);
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
    if (r.has_tiered_rows()) {
      AddRows(r.tiered_rows(), f.tables[r.tiered_rows().table()]->row_floats(), &d.rows);
    }
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
  const auto value_type =
      GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  const std::string optimizer = GENERATE("adagrad", "rowwise_adagrad", "adam");
  CAPTURE(sync, value_type, optimizer);
  Fixture f(sync, value_type, optimizer);
  Shard primary(5, f.config, {});
  Shard copy(5, f.config, {});
  std::vector<rpc::ShardRecord> stream;
  primary.SetRecordSink([&](RecordOut&& r) { stream.push_back(r.Whole()); });
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
  // The same stream with the rows' values apart, in runs cut anywhere (inside rows too), as a
  // Replicate call's slices hold them.
  Shard in_place(5, f.config, {});
  for (const rpc::ShardRecord& r : stream) {
    if (!r.has_rows()) {
      REQUIRE(in_place.ApplyRecord(r).ok());
      continue;
    }
    const std::string& values = r.rows().values();
    std::vector<absl::string_view> runs;
    for (size_t at = 0; at < values.size();) {
      const size_t n = std::min<size_t>(values.size() - at, 1 + rng() % 300);
      runs.emplace_back(values.data() + at, n);
      if (rng() % 8 == 0) runs.emplace_back();  // an empty run, inside a row or not
      at += n;
    }
    rpc::ShardRecord without = r;
    without.mutable_rows()->clear_values();
    const absl::Status applied = in_place.ApplyRowsRecord(without, runs);
    INFO(applied.ToString());
    REQUIRE(applied.ok());
  }
  CHECK(DumpOf(in_place, f) == DumpOf(primary, f));
  // A batch sent again changes nothing.
  REQUIRE(copy.ApplyRecord(stream[stream.size() / 2]).ok());
  CHECK(DumpOf(copy, f) == DumpOf(primary, f));
  if (sync) CHECK(copy.applied_step() == primary.applied_step());
}

TEST_CASE("a new copy catches up from a snapshot, then the stream's tail", "[shard][replication]") {
  const bool sync = GENERATE(false, true);
  const auto value_type =
      GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  CAPTURE(sync, value_type);
  Fixture f(sync, value_type, "rowwise_adagrad");
  Shard primary(1, f.config, {});
  std::mt19937_64 rng(7);
  RandomChanges(primary, sync, &rng, 200);

  Shard copy(1, f.config, {}, /*complete=*/false);
  CHECK_FALSE(copy.complete());
  // As a replicator does: the sink is set, and the copy becomes one of its targets in `then`.
  std::vector<rpc::ShardRecord> stream;
  bool attached = false;
  primary.SetRecordSink([&](RecordOut&& r) {
    if (attached) stream.push_back(r.Whole());
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

TEST_CASE("a compact table's records carry fp32 rows whose weights are values of its type",
          "[shard][replication][compact]") {
  const auto value_type = GENERATE(config::Table::FP16, config::Table::BF16);
  CAPTURE(value_type);
  Fixture f(/*sync=*/false, value_type, "rowwise_adagrad");
  Shard primary(2, f.config, {});
  std::vector<rpc::ShardRecord> stream;
  primary.SetRecordSink([&](RecordOut&& r) { stream.push_back(r.Whole()); });
  std::mt19937_64 rng(11);
  RandomChanges(primary, false, &rng, 100);
  size_t rows = 0;
  for (const rpc::ShardRecord& r : stream) {
    if (!r.has_rows()) continue;
    const size_t row_floats = f.tables[r.rows().table()]->row_floats();
    const size_t n = r.rows().keys().size() / 8;
    REQUIRE(r.rows().values().size() == n * row_floats * sizeof(float));
    for (size_t i = 0; i < n; ++i) {
      float w[kDim];
      std::memcpy(w, r.rows().values().data() + i * row_floats * sizeof(float), sizeof(w));
      for (float x : w) {
        const float stored = value_type == config::Table::FP16
                                 ? Fp16ToFloat(FloatToFp16(x, Fp16Overflow::kSaturate))
                                 : Bf16ToFloat(FloatToBf16(x));
        REQUIRE(std::memcmp(&stored, &x, sizeof(x)) == 0);
      }
      ++rows;
    }
  }
  CHECK(rows > 0);
}

TEST_CASE("records out of sequence or malformed are refused and change nothing",
          "[shard][replication]") {
  Fixture f(/*sync=*/false);
  Shard primary(0, f.config, {});
  std::vector<rpc::ShardRecord> stream;
  primary.SetRecordSink([&](RecordOut&& r) { stream.push_back(r.Whole()); });
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
  // Values apart that do not hold a row a key, a record that is not rows, an unknown table.
  const rpc::ShardRecord* rows = nullptr;
  for (const rpc::ShardRecord& r : stream) {
    if (r.has_rows() && rows == nullptr) rows = &r;
  }
  REQUIRE(rows != nullptr);
  rpc::ShardRecord first_rows = *rows;
  first_rows.set_sequence(1);  // the copy's next: only its values are wrong
  const std::string& values = rows->rows().values();
  const std::vector<absl::string_view> short_runs = {
      absl::string_view(values.data(), 3),
      absl::string_view(values.data() + 3, values.size() - 4)};
  CHECK(copy.ApplyRowsRecord(first_rows, short_runs).code() ==
        absl::StatusCode::kInvalidArgument);
  rpc::ShardRecord not_rows;
  not_rows.set_sequence(1);
  not_rows.set_snapshot_end(true);
  CHECK(copy.ApplyRowsRecord(not_rows, {}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(copy.ApplyRowsRecord(unknown_table, {}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(copy.applied_sequence() == 0);
  for (const rpc::ShardRecord& r : stream) REQUIRE(copy.ApplyRecord(r).ok());
  CHECK(DumpOf(copy, f) == DumpOf(primary, f));
}

// The rows of a cut, by (table, id).
std::map<std::pair<uint32_t, uint64_t>, std::string> RowsOf(const ShardCut& cut, const Fixture& f) {
  std::map<std::pair<uint32_t, uint64_t>, std::string> rows;
  for (const rpc::ShardRecord& r : cut.records) {
    if (r.has_rows()) AddRows(r.rows(), f.tables[r.rows().table()]->row_floats(), &rows);
  }
  return rows;
}

// What a restore of a chain does: the rows of every cut, oldest first, then the newest's dense
// chunks and window, at its sequence and step.
ShardCut Merged(const std::vector<const ShardCut*>& chain) {
  ShardCut merged;
  const ShardCut& newest = *chain.back();
  merged.shard = newest.shard;
  merged.sequence = newest.sequence;
  merged.applied_step = newest.applied_step;
  for (const ShardCut* cut : chain) {
    for (const rpc::ShardRecord& r : cut->records) {
      if (r.has_rows() || cut == &newest) {
        merged.records.push_back(r);
        merged.records.back().set_sequence(newest.sequence);
      }
    }
  }
  return merged;
}

// A dump without the pending sync sums, which cuts leave out.
Dump CutDumpOf(Shard& shard, const Fixture& f) {
  Dump d = DumpOf(shard, f);
  d.pending.clear();
  return d;
}

TEST_CASE("an incremental cut holds the rows changed since its base's cut; the chain is the shard",
          "[shard][checkpoint]") {
  const bool sync = GENERATE(false, true);
  const auto value_type =
      GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  CAPTURE(sync, value_type);
  Fixture f(sync, value_type);
  Shard shard(3, f.config, {});
  std::mt19937_64 rng(sync ? 5 : 6);
  RandomChanges(shard, sync, &rng, 200);
  CHECK(shard.generation() == 1);
  const ShardCut full = shard.Cut(1 << 10, {/*checkpoint_id=*/10, /*base_id=*/0});
  CHECK_FALSE(full.incremental);
  CHECK(full.base_id == 0);
  CHECK(shard.generation() == 2);
  CHECK(RowsOf(full, f) == CutDumpOf(shard, f).rows);

  std::vector<ShardCut> increments;
  std::vector<const ShardCut*> chain = {&full};
  uint64_t base = 10;
  for (int i = 0; i < 3; ++i) {
    const auto before = CutDumpOf(shard, f).rows;
    RandomChanges(shard, sync, &rng, 30);
    // New rows by pulls too, unchanged since they were created.
    PullRows(shard, 1, {1000 + static_cast<uint64_t>(i), 2000});
    if (sync) shard.ApplyStep(shard.applied_step() + 1);  // a boundary: no pending sums
    const auto after = CutDumpOf(shard, f).rows;
    increments.push_back(shard.Cut(1 << 10, {base + 1, base}));
    const ShardCut& inc = increments.back();
    CHECK(inc.incremental);
    CHECK(inc.base_id == base);
    const auto rows = RowsOf(inc, f);
    // Every row that differs is there, with its value now; and not every row is.
    for (const auto& [key, row] : after) {
      auto was = before.find(key);
      if (was == before.end() || was->second != row) {
        REQUIRE(rows.count(key) == 1);
        CHECK(rows.at(key) == row);
      }
    }
    for (const auto& [key, row] : rows) CHECK(after.at(key) == row);
    CHECK(rows.size() < after.size());
    ++base;
  }
  for (const ShardCut& inc : increments) chain.push_back(&inc);
  Shard restored(3, f.config, {}, /*complete=*/false);
  REQUIRE(RestoreCut(restored, Merged(chain)).ok());
  CHECK(CutDumpOf(restored, f) == CutDumpOf(shard, f));

  // The middle of the chain is the shard at that cut: rows of the cuts up to it.
  Shard middle(3, f.config, {}, /*complete=*/false);
  REQUIRE(RestoreCut(middle, Merged({&full, &increments[0]})).ok());
  auto rows = RowsOf(full, f);
  for (const auto& [key, row] : RowsOf(increments[0], f)) rows[key] = row;
  CHECK(CutDumpOf(middle, f).rows == rows);
}

TEST_CASE("a full cut's rows are read afterwards as of the cut, while the shard keeps changing",
          "[shard][checkpoint]") {
  const bool sync = GENERATE(false, true);
  const auto value_type =
      GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  const std::string optimizer = GENERATE("adagrad", "rowwise_adagrad");
  CAPTURE(sync, value_type, optimizer);
  Fixture f(sync, value_type, optimizer);
  Shard shard(4, f.config, {});
  std::mt19937_64 rng(sync ? 7 : 8);
  RandomChanges(shard, sync, &rng, 300);
  if (sync) shard.ApplyStep(shard.applied_step() + 1);  // a boundary: no pending sums
  const Dump at_cut = CutDumpOf(shard, f);

  ShardCut cut = shard.StartCut(/*max_record_bytes=*/256, {/*checkpoint_id=*/1, /*base_id=*/0});
  CHECK(cut.rows_to_read != 0);
  CHECK(RowsOf(cut, f).empty());
  int records = 0;
  while (true) {
    RandomChanges(shard, sync, &rng, 20);
    absl::StatusOr<bool> more = shard.ReadCutRows(256, &cut);
    REQUIRE(more.ok());
    if (!*more) break;
    ++records;
  }
  CHECK(records > 1);
  CHECK(cut.rows_to_read == 0);
  CHECK(RowsOf(cut, f) == at_cut.rows);
  CHECK(CutDumpOf(shard, f).rows != at_cut.rows);
  Shard restored(4, f.config, {}, /*complete=*/false);
  REQUIRE(RestoreCut(restored, cut).ok());
  CHECK(CutDumpOf(restored, f) == at_cut);

  // The rows changed since are the next increment's.
  const Dump now = CutDumpOf(shard, f);
  const ShardCut inc = shard.Cut(1 << 20, {2, 1});
  CHECK(inc.incremental);
  auto chained = RowsOf(cut, f);
  for (const auto& [key, row] : RowsOf(inc, f)) chained[key] = row;
  CHECK(chained == now.rows);
}

TEST_CASE("reading a cut's rows is ABORTED once abandoned, replaced by a newer cut or restored",
          "[shard][checkpoint]") {
  Fixture f(/*sync=*/false);
  Shard shard(5, f.config, {});
  std::mt19937_64 rng(9);
  RandomChanges(shard, false, &rng, 100);
  const std::string how = GENERATE(as<std::string>{}, "abandoned", "newer cut", "restored");
  CAPTURE(how);
  const ShardCut whole = shard.Cut(1 << 20);
  ShardCut cut = shard.StartCut(256);
  REQUIRE(shard.ReadCutRows(256, &cut).ok());
  if (how == "abandoned") {
    shard.AbandonCutRows();
  } else if (how == "newer cut") {
    shard.StartCut(256);
  } else {
    REQUIRE(RestoreCut(shard, whole).ok());
  }
  absl::StatusOr<bool> more = shard.ReadCutRows(256, &cut);
  CHECK(absl::IsAborted(more.status()));
  // Nothing is kept for an abandoned read: a cut with nothing to read reads nothing.
  ShardCut empty;
  CHECK_FALSE(*shard.ReadCutRows(256, &empty));
}

TEST_CASE("a restore in pieces: rows streamed in, then the cut's state", "[shard][checkpoint]") {
  const auto value_type =
      GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  CAPTURE(value_type);
  Fixture f(/*sync=*/false, value_type);
  Shard shard(6, f.config, {});
  std::mt19937_64 rng(10);
  RandomChanges(shard, false, &rng, 200);
  const ShardCut whole = shard.Cut(1 << 20);
  // The cut split: its rows (twice, the second time newer values of some: the later one wins),
  // and its state.
  ShardCut state = whole;
  state.records.clear();
  std::vector<const rpc::RowsChange*> rows;
  for (const rpc::ShardRecord& r : whole.records) {
    if (r.has_rows()) {
      rows.push_back(&r.rows());
    } else {
      state.records.push_back(r);
    }
  }
  REQUIRE_FALSE(rows.empty());
  Shard restored(6, f.config, {}, /*complete=*/false);
  uint64_t id = 0;
  std::vector<float> junk(f.tables[0]->row_floats(), 7.0f);
  CHECK(restored.RestoreRows(0, &id, junk.data(), 1).code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(restored.FinishRestore(state).code() == absl::StatusCode::kFailedPrecondition);
  restored.BeginRestore();
  CHECK_FALSE(restored.complete());
  for (const rpc::RowsChange* change : rows) {
    const size_t n = change->keys().size() / sizeof(uint64_t);
    std::vector<uint64_t> ids(n);
    std::memcpy(ids.data(), change->keys().data(), n * sizeof(uint64_t));
    // An older value first, replaced by the cut's.
    std::vector<float> older(n * f.tables[change->table()]->row_floats(), 1.5f);
    REQUIRE(restored.RestoreRows(change->table(), ids.data(), older.data(), n).ok());
    std::vector<float> values(older.size());
    std::memcpy(values.data(), change->values().data(), change->values().size());
    REQUIRE(restored.RestoreRows(change->table(), ids.data(), values.data(), n).ok());
  }
  REQUIRE(restored.FinishRestore(state).ok());
  CHECK(restored.complete());
  CHECK(CutDumpOf(restored, f) == CutDumpOf(shard, f));
  CHECK(restored.RestoreRows(0, &id, junk.data(), 1).code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a cut is incremental only on the base this shard object cut last",
          "[shard][checkpoint]") {
  Fixture f(/*sync=*/false);
  auto shard = std::make_unique<Shard>(0, f.config, std::vector<size_t>{});
  std::mt19937_64 rng(9);
  RandomChanges(*shard, false, &rng, 50);
  CHECK_FALSE(shard->Cut(4096, {1, 0}).incremental);  // asked for a full one
  CHECK(shard->Cut(4096, {2, 1}).incremental);
  CHECK_FALSE(shard->Cut(4096, {3, 1}).incremental);  // 1 is not the previous cut
  CHECK(shard->Cut(4096, {4, 3}).incremental);
  CHECK_FALSE(shard->Cut(4096, {5, 99}).incremental);  // a checkpoint this shard never cut
  CHECK_FALSE(shard->Cut(4096, {6, 4}).incremental);   // no longer the previous one
  // A cut for no checkpoint is no base, but keeps the previous one valid.
  shard->Cut(4096, {});
  CHECK(shard->Cut(4096, {7, 6}).incremental);

  SECTION("a restored shard is written in full first") {
    const ShardCut cut = shard->Cut(4096, {8, 7});
    auto restored = std::make_unique<Shard>(0, f.config, std::vector<size_t>{}, false);
    REQUIRE(RestoreCut(*restored, cut).ok());
    CHECK_FALSE(restored->Cut(4096, {9, 8}).incremental);
    // Restoring over a shard replaces its rows: no base either.
    REQUIRE(RestoreCut(*shard, cut).ok());
    CHECK_FALSE(shard->Cut(4096, {9, 8}).incremental);
  }
  SECTION("a copy rebuilt from a snapshot is written in full first") {
    std::vector<rpc::ShardRecord> snapshot = SnapshotOf(*shard);
    Shard copy(0, f.config, {}, false);
    for (const rpc::ShardRecord& r : snapshot) REQUIRE(copy.ApplyRecord(r).ok());
    copy.Cut(4096, {8, 0});
    CHECK(copy.Cut(4096, {9, 8}).incremental);
    for (const rpc::ShardRecord& r : SnapshotOf(*shard)) REQUIRE(copy.ApplyRecord(r).ok());
    CHECK_FALSE(copy.Cut(4096, {10, 9}).incremental);
  }
}

TEST_CASE("generations wrap around after 2^16 - 1 cuts and increments stay exact",
          "[shard][checkpoint]") {
  Fixture f(/*sync=*/false);
  Shard shard(2, f.config, {});
  constexpr uint32_t kMax = TableShard::kMaxGeneration;
  shard.SetGenerationForTesting(kMax - 1);
  std::mt19937_64 rng(12);
  RandomChanges(shard, false, &rng, 100);
  const ShardCut full = shard.Cut(4096, {1, 0});
  CHECK(shard.generation() == kMax);
  PullRows(shard, 0, {5000});
  const ShardCut first = shard.Cut(4096, {2, 1});  // closes 2^32 - 1: every row to 0
  CHECK(first.incremental);
  CHECK(RowsOf(first, f).size() == 1);
  CHECK(shard.generation() == 1);
  PullRows(shard, 0, {5001});
  const ShardCut second = shard.Cut(4096, {3, 2});
  CHECK(second.incremental);
  const auto rows = RowsOf(second, f);
  REQUIRE(rows.size() == 1);
  CHECK(rows.begin()->first == std::make_pair(uint32_t{0}, uint64_t{5001}));
  Shard restored(2, f.config, {}, false);
  REQUIRE(RestoreCut(restored, Merged({&full, &first, &second})).ok());
  CHECK(CutDumpOf(restored, f) == CutDumpOf(shard, f));
  // A cut for no checkpoint at the wrap forgets the base: nothing older can be told apart.
  shard.SetGenerationForTesting(kMax);
  shard.Cut(4096, {});
  CHECK_FALSE(shard.Cut(4096, {4, 3}).incremental);
}

}  // namespace
}  // namespace server
}  // namespace ps

namespace ps {
namespace server {
namespace {

// A temporary directory, removed with what it holds.
struct TempDir {
  TempDir() {
    char pattern[] = "/tmp/shard_test_XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

std::unique_ptr<RowTier> OpenTier(const std::string& dir, const Fixture& f,
                                  const std::atomic<uint32_t>* ticks) {
  RowTier::Options options;
  options.dir = dir;
  options.max_disk_bytes = int64_t{1} << 30;
  for (const auto& spec : f.tables) {
    options.stored_row_bytes.push_back(static_cast<uint32_t>(spec->stored_row_bytes()));
  }
  options.use_ticks = ticks;
  options.write_buffer_bytes = 1 << 20;
  options.block_cache_bytes = 1 << 20;
  auto tier = RowTier::Open(options);
  REQUIRE(tier.ok());
  return std::move(tier).value();
}

// Whether `a` and `b` hold the same rows, a row missing on one side being its table's initial
// row there: a primary creates rows for pulls, which its copies create only when a push changes
// them.
bool SameRowsUpToInitial(const std::map<std::pair<uint32_t, uint64_t>, std::string>& a,
                         const std::map<std::pair<uint32_t, uint64_t>, std::string>& b,
                         const Fixture& f) {
  auto initial = [&f](const std::pair<uint32_t, uint64_t>& key) {
    TableShard scratch(f.tables[key.first].get(), 0);
    std::vector<float> out(kDim);
    scratch.Pull({key.second}, out.data());
    std::vector<float> row(f.tables[key.first]->row_floats());
    scratch.Read(key.second, row.data());
    return std::string(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(float));
  };
  size_t differ = 0;
  for (const auto& [key, row] : a) {
    const auto it = b.find(key);
    differ += (it == b.end() ? initial(key) : it->second) != row;
  }
  for (const auto& [key, row] : b) {
    if (a.count(key) == 0) differ += initial(key) != row;
  }
  INFO(differ << " rows differ");
  CHECK(differ == 0);
  return differ == 0;
}

// Sweeps until every table is at most `high` rows.
void EvictTo(Shard& shard, size_t high, size_t low) {
  shard.SetMaxRows({high, high});
  const TableSweep sweep{/*ttl_ticks=*/0, high, low, /*evict_only=*/true};
  const std::vector<TableSweep> sweeps = {sweep, sweep};
  for (int i = 0; i < 1000 && !shard.Sweep(sweeps, 4096).within; ++i) {
  }
}

TEST_CASE("rows demoted to the tier come back bit for bit; copies, snapshots and cuts hold them",
          "[shard][tier]") {
  const bool sync = GENERATE(false, true);
  const auto value_type = GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  CAPTURE(sync, value_type);
  Fixture f(sync, value_type, "adagrad");
  std::atomic<uint32_t> ticks[2] = {{100}, {100}};
  f.config.use_ticks = ticks;
  TempDir dir;
  std::unique_ptr<RowTier> tier = OpenTier(dir.path, f, ticks);
  f.config.tier = tier.get();
  Shard primary(2, f.config, {});
  Shard copy(2, f.config, {});  // the same tier: copies keep apart by incarnation
  std::vector<rpc::ShardRecord> stream;
  primary.SetRecordSink([&](RecordOut&& r) { stream.push_back(r.Whole()); });
  auto follow = [&] {
    for (const rpc::ShardRecord& r : stream) {
      const absl::Status applied = copy.ApplyRecord(r);
      INFO(applied.ToString());
      REQUIRE(applied.ok());
    }
    stream.clear();
  };
  std::mt19937_64 rng(sync ? 11 : 12);
  RandomChanges(primary, sync, &rng, 300);
  if (sync) primary.ApplyStep(primary.applied_step() + 1);
  const Dump before = DumpOf(primary, f);
  REQUIRE(before.rows.size() > 200);

  // Demoted: the rows are the same, wherever they are.
  EvictTo(primary, 40, 30);
  std::vector<uint64_t> rows(2), bytes(2);
  primary.AddSizes(&rows, &bytes);
  CHECK(rows[0] <= 40);
  CHECK(rows[1] <= 40);
  std::vector<TableShard::Counters> counters(2);
  primary.AddCounters(&counters);
  CHECK(counters[0].demoted + counters[1].demoted + 80 >= before.rows.size());
  CHECK(counters[0].evicted_budget + counters[1].evicted_budget == 0);
  CHECK(DumpOf(primary, f).rows == before.rows);
  CHECK(tier->GetStats().rows[0] + tier->GetStats().rows[1] + rows[0] + rows[1] ==
        before.rows.size());
  follow();
  CHECK(DumpOf(copy, f).rows == before.rows);

  // A full cut holds every row, read after the cut while rows move.
  ShardCut cut = primary.StartCut(/*max_record_bytes=*/256, {/*checkpoint_id=*/1, 0});
  std::vector<float> out(200 * kDim);
  std::vector<uint64_t> all(200);
  for (uint64_t k = 0; k < 200; ++k) all[k] = k;
  while (true) {
    // Pulls promote rows (and create some), changes and sweeps demote others.
    primary.Pull(0, absl::MakeConstSpan(all).subspan(rng() % 150, 50), out.data());
    RandomChanges(primary, sync, &rng, 5);
    EvictTo(primary, 40, 30);
    absl::StatusOr<bool> more = primary.ReadCutRows(256, &cut);
    REQUIRE(more.ok());
    if (!*more) break;
  }
  CHECK(RowsOf(cut, f) == before.rows);

  // Pulls and pushes promote; the copy follows demotions, promotions and changes.
  if (sync) primary.ApplyStep(primary.applied_step() + 1);
  primary.Pull(1, all, out.data());
  counters.assign(2, {});
  primary.AddCounters(&counters);
  CHECK(counters[1].promoted > 0);
  RandomChanges(primary, sync, &rng, 200);
  if (sync) primary.ApplyStep(primary.applied_step() + 1);
  EvictTo(primary, 40, 30);
  follow();
  const Dump now = DumpOf(primary, f);
  CHECK(SameRowsUpToInitial(DumpOf(copy, f).rows, now.rows, f));

  // A new copy from a snapshot of a primary with tiered rows holds them all.
  Shard fresh(2, f.config, {}, /*complete=*/false);
  fresh.SetMaxRows({40, 40});
  for (const rpc::ShardRecord& r : SnapshotOf(primary, 512)) REQUIRE(fresh.ApplyRecord(r).ok());
  CHECK(DumpOf(fresh, f).rows == now.rows);

  // A restore onto a copy with a smaller cap puts what does not fit in the tier.
  const ShardCut full = primary.Cut(1 << 20, {/*checkpoint_id=*/2, 0});
  Shard restored(2, f.config, {}, /*complete=*/false);
  restored.SetMaxRows({20, 20});
  restored.BeginRestore();
  ShardCut state = full;
  state.records.clear();
  for (const rpc::ShardRecord& r : full.records) {
    if (!r.has_rows()) {
      state.records.push_back(r);
      continue;
    }
    const size_t n = r.rows().keys().size() / 8;
    std::vector<uint64_t> ids(n);
    std::memcpy(ids.data(), r.rows().keys().data(), n * 8);
    REQUIRE(restored
                .RestoreRows(r.rows().table(), ids.data(),
                             reinterpret_cast<const float*>(r.rows().values().data()), n)
                .ok());
  }
  REQUIRE(restored.FinishRestore(state).ok());
  rows.assign(2, 0);
  bytes.assign(2, 0);
  restored.AddSizes(&rows, &bytes);
  CHECK(rows[0] <= 20 + 256);
  CHECK(DumpOf(restored, f).rows == now.rows);
}

}  // namespace
}  // namespace server
}  // namespace ps

#include "server/storage/embedding_table.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/half.h"
#include "common/hash.h"

namespace ps {
namespace server {
namespace {

constexpr uint64_t kMaxId = std::numeric_limits<uint64_t>::max();

std::unique_ptr<TableSpec> Spec(const std::string& optimizer, uint32_t dim,
                                const std::string& name = "emb",
                                const config::Table& bounds = config::Table()) {
  config::Table table = bounds;
  table.set_name(name);
  table.set_dim(dim);
  table.mutable_optimizer()->set_type(optimizer);
  table.mutable_optimizer()->set_learning_rate(0.1f);
  if (optimizer == "ftrl") table.mutable_optimizer()->set_l1(0.001f);
  table.mutable_initializer()->set_kind(config::Initializer::NORMAL);
  auto spec = TableSpec::Create(table, /*job_seed=*/99);
  REQUIRE(spec.ok());
  return std::move(spec).value();
}

// A table of `value_type`, for Spec's `bounds`.
config::Table Typed(config::Table::ValueType value_type) {
  config::Table table;
  table.set_value_type(value_type);
  return table;
}

// Rounds dim weights to what a table of `spec`'s value type stores, one at a time with the
// scalar codecs (the shard uses the bulk ones).
void RoundWeights(const TableSpec& spec, float* weights) {
  for (uint32_t k = 0; k < spec.dim; ++k) {
    if (spec.value_type == config::Table::FP16) {
      weights[k] = Fp16ToFloat(FloatToFp16(weights[k], Fp16Overflow::kSaturate));
    } else if (spec.value_type == config::Table::BF16) {
      weights[k] = Bf16ToFloat(FloatToBf16(weights[k]));
    }
  }
}

// What a TableShard must behave like: whole rows in a map, duplicates summed in ids order; the
// weights of a compact table rounded after every change (decode, update in fp32, encode).
class ReferenceShard {
 public:
  explicit ReferenceShard(const TableSpec* spec) : spec_(spec) {}

  std::vector<float>& Row(uint64_t id) {
    auto it = rows_.find(id);
    if (it == rows_.end()) {
      std::vector<float> row(spec_->row_floats());
      spec_->initializer->Fill(id, spec_->dim, row.data());
      RoundWeights(*spec_, row.data());
      spec_->optimizer->InitState(spec_->dim, row.data() + spec_->dim);
      it = rows_.emplace(id, std::move(row)).first;
    }
    return it->second;
  }

  std::vector<float> Pull(const std::vector<uint64_t>& ids) {
    std::vector<float> out;
    for (uint64_t id : ids) {
      const std::vector<float>& row = Row(id);
      out.insert(out.end(), row.begin(), row.begin() + spec_->dim);
    }
    return out;
  }

  void Push(const std::vector<uint64_t>& ids, const std::vector<float>& grads) {
    const uint32_t dim = spec_->dim;
    std::unordered_map<uint64_t, std::vector<float>> sums;
    std::vector<uint64_t> order;
    for (size_t i = 0; i < ids.size(); ++i) {
      Row(ids[i]);
      auto [it, inserted] = sums.try_emplace(ids[i], dim, 0.0f);
      if (inserted) order.push_back(ids[i]);
      for (uint32_t k = 0; k < dim; ++k) it->second[k] += grads[i * dim + k];
    }
    for (uint64_t id : order) {
      std::vector<float>& row = Row(id);
      spec_->optimizer->Apply(dim, sums[id].data(), row.data(), row.data() + dim);
      RoundWeights(*spec_, row.data());
    }
  }

  void Erase(uint64_t id) { rows_.erase(id); }

  const std::unordered_map<uint64_t, std::vector<float>>& rows() const { return rows_; }

 private:
  const TableSpec* const spec_;
  std::unordered_map<uint64_t, std::vector<float>> rows_;
};

// Ids of a batch: mostly from a small range (hits and duplicates), some anywhere in 64 bits, and
// the extreme ids now and then.
std::vector<uint64_t> RandomIds(std::mt19937_64& rng, size_t n, uint64_t range) {
  std::vector<uint64_t> ids(n);
  for (uint64_t& id : ids) {
    const uint64_t r = rng() % 100;
    if (r == 0) {
      id = 0;
    } else if (r == 1) {
      id = kMaxId;
    } else if (r < 80) {
      id = rng() % range;
    } else {
      id = rng();
    }
  }
  return ids;
}

std::vector<float> RandomGrads(std::mt19937_64& rng, size_t n) {
  std::vector<float> grads(n);
  for (float& g : grads) g = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 1000;
  return grads;
}

// The whole row of `id` as TableShard::Read gives it, or empty if the shard has none.
std::vector<float> RowOf(const TableShard& shard, uint64_t id) {
  std::vector<float> row(shard.spec().row_floats());
  if (!shard.Read(id, row.data())) row.clear();
  return row;
}

void ExpectSameRows(const TableShard& shard, const ReferenceShard& reference) {
  const uint32_t row_floats = shard.spec().row_floats();
  REQUIRE(shard.size() == reference.rows().size());
  for (const auto& [id, row] : reference.rows()) {
    const std::vector<float> found = RowOf(shard, id);
    REQUIRE(!found.empty());
    REQUIRE(std::memcmp(found.data(), row.data(), row_floats * sizeof(float)) == 0);
  }
  size_t visited = 0;
  shard.ForEach([&](uint64_t id, const float* row) {
    ++visited;
    const auto it = reference.rows().find(id);
    REQUIRE(it != reference.rows().end());
    REQUIRE(std::memcmp(row, it->second.data(), row_floats * sizeof(float)) == 0);
  });
  REQUIRE(visited == reference.rows().size());
}

TEST_CASE("TableSpec::Create checks the table", "[storage][embedding_table]") {
  config::Table table;
  table.set_name("emb");
  table.set_dim(8);
  table.mutable_optimizer()->set_type("adam");
  auto spec = TableSpec::Create(table, 1);
  REQUIRE(spec.ok());
  CHECK((*spec)->row_floats() == 8 + 17);
  CHECK((*spec)->name_hash == NameHash("emb"));

  struct Case {
    const char* what;
    void (*mutate)(config::Table*);
  };
  const Case c = GENERATE(values<Case>({
      {"no name", [](config::Table* t) { t->clear_name(); }},
      {"dim 0", [](config::Table* t) { t->set_dim(0); }},
      {"dim 4097", [](config::Table* t) { t->set_dim(4097); }},
      {"fp16 dim 1025",
       [](config::Table* t) {
         t->set_dim(1025);
         t->set_value_type(config::Table::FP16);
       }},
      {"bf16 dim 4096",
       [](config::Table* t) {
         t->set_dim(4096);
         t->set_value_type(config::Table::BF16);
       }},
      {"unknown optimizer", [](config::Table* t) { t->mutable_optimizer()->set_type("lion"); }},
      {"zero stddev",
       [](config::Table* t) {
         t->mutable_initializer()->set_kind(config::Initializer::NORMAL);
         t->mutable_initializer()->set_stddev(0.0f);
       }},
  }));
  config::Table bad = table;
  c.mutate(&bad);
  CAPTURE(c.what);
  CAPTURE(bad.ShortDebugString());
  const auto refused = TableSpec::Create(bad, 1);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Pull and Push behave like a map of rows", "[storage][embedding_table]") {
  const std::string optimizer = GENERATE("sgd", "adagrad", "adam", "ftrl");
  // 0 grows the index through many rehashes; 3000 is exceeded, so it grows past its presize too.
  const size_t expected_rows = GENERATE(size_t{0}, size_t{3000});
  const uint32_t dim = GENERATE(1u, 5u);
  CAPTURE(optimizer, expected_rows, dim);
  const auto spec = Spec(optimizer, dim);
  TableShard shard(spec.get(), expected_rows);
  ReferenceShard reference(spec.get());
  std::mt19937_64 rng(expected_rows * 31 + dim);

  // Over 65536 rows in the end, so rows live in more than one slab block.
  for (int round = 0; round < 60; ++round) {
    const uint64_t range = 100 + round * 1500;
    const std::vector<uint64_t> pull_ids = RandomIds(rng, 1 + rng() % 2000, range);
    std::vector<float> pulled(pull_ids.size() * dim);
    shard.Pull(pull_ids, pulled.data());
    REQUIRE(pulled == reference.Pull(pull_ids));

    const std::vector<uint64_t> push_ids = RandomIds(rng, 1 + rng() % 2000, range);
    const std::vector<float> grads = RandomGrads(rng, push_ids.size() * dim);
    shard.Push(push_ids, grads.data());
    reference.Push(push_ids, grads);
    REQUIRE(shard.size() == reference.rows().size());
  }
  CHECK(shard.size() > 65536);
  ExpectSameRows(shard, reference);
}

TEST_CASE("a push of one id many times applies the sum once", "[storage][embedding_table]") {
  const auto spec = Spec("sgd", 2);
  TableShard shard(spec.get(), 0);
  const std::vector<uint64_t> ids = {7, 7, 7, kMaxId, 7};
  const std::vector<float> grads = {1, 2, 1, 2, 1, 2, 5, 5, 1, 2};
  float before[4];
  shard.Pull(std::vector<uint64_t>{7, kMaxId}, before);
  shard.Push(ids, grads.data());
  const std::vector<float> row = RowOf(shard, 7);
  REQUIRE(!row.empty());
  // sgd with lr 0.1: w -= 0.1 * (sum of the four gradients).
  CHECK(row[0] == before[0] - 0.1f * 4.0f);
  CHECK(row[1] == before[1] - 0.1f * 8.0f);
  CHECK(RowOf(shard, kMaxId)[0] == before[2] - 0.1f * 5.0f);
  CHECK(shard.size() == 2);
}

TEST_CASE("Read never creates rows", "[storage][embedding_table]") {
  const auto spec = Spec("adagrad", 4);
  TableShard shard(spec.get(), 0);
  CHECK(RowOf(shard, 0).empty());
  CHECK(RowOf(shard, kMaxId).empty());
  CHECK(shard.size() == 0);
  float out[4];
  shard.Pull(std::vector<uint64_t>{kMaxId}, out);
  CHECK(RowOf(shard, 0).empty());
  REQUIRE(!RowOf(shard, kMaxId).empty());
  CHECK(std::memcmp(RowOf(shard, kMaxId).data(), out, sizeof(out)) == 0);
  shard.Pull({}, nullptr);
  shard.Push({}, nullptr);
  CHECK(shard.size() == 1);
}

TEST_CASE("Assign overwrites whole rows", "[storage][embedding_table]") {
  const auto value_type =
      GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  CAPTURE(value_type);
  const auto spec = Spec("adam", 3, "emb", Typed(value_type));
  TableShard source(spec.get(), 0);
  std::mt19937_64 rng(5);
  std::vector<uint64_t> ids = RandomIds(rng, 500, 1000);
  source.Push(ids, RandomGrads(rng, ids.size() * 3).data());

  // A replica rebuilt from the source's rows holds the same rows.
  TableShard copy(spec.get(), source.size());
  source.ForEach([&](uint64_t id, const float* row) { copy.Assign(id, row); });
  REQUIRE(copy.size() == source.size());
  source.ForEach([&](uint64_t id, const float* row) {
    REQUIRE(!RowOf(copy, id).empty());
    CHECK(std::memcmp(RowOf(copy, id).data(), row, spec->row_floats() * sizeof(float)) == 0);
  });
}

TEST_CASE("Peek reads rows, and the initial rows of missing ids without creating them",
          "[storage][embedding_table]") {
  const auto spec = Spec("adam", 6);
  TableShard shard(spec.get(), 0);
  TableShard fresh(spec.get(), 0);
  std::mt19937_64 rng(8);
  const std::vector<uint64_t> pushed = RandomIds(rng, 50, 1000);
  shard.Push(pushed, RandomGrads(rng, pushed.size() * 6).data());
  const size_t rows = shard.size();
  const std::vector<uint64_t> ids = RandomIds(rng, 200, 1000);
  std::vector<float> peeked(ids.size() * 6), pulled(ids.size() * 6), created(ids.size() * 6);
  shard.Peek(ids, peeked.data());
  CHECK(shard.size() == rows);
  shard.Pull(ids, pulled.data());
  CHECK(peeked == pulled);
  // A missing id reads as the row a pull would create.
  fresh.Peek(ids, created.data());
  CHECK(fresh.size() == 0);
  TableShard other(spec.get(), 0);
  std::vector<float> initial(ids.size() * 6);
  other.Pull(ids, initial.data());
  CHECK(created == initial);
}

TEST_CASE("a push hands out the rows it leaves, and AssignRows copies them",
          "[storage][embedding_table]") {
  const auto value_type =
      GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  const std::string optimizer = GENERATE("adagrad", "rowwise_adagrad");
  CAPTURE(value_type, optimizer);
  const auto spec = Spec(optimizer, 5, "emb", Typed(value_type));
  TableShard source(spec.get(), 0);
  std::mt19937_64 rng(6);
  const uint32_t row_floats = spec->row_floats();
  TableShard copy(spec.get(), 0);
  for (int round = 0; round < 5; ++round) {
    // Repeated ids: each position gets its id's row after the whole push.
    const std::vector<uint64_t> ids = RandomIds(rng, 300, 400);
    std::vector<float> rows(ids.size() * row_floats);
    source.Push(ids, RandomGrads(rng, ids.size() * 5).data(), rows.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      REQUIRE(!RowOf(source, ids[i]).empty());
      CHECK(std::memcmp(RowOf(source, ids[i]).data(), &rows[i * row_floats], row_floats * 4) == 0);
    }
    copy.AssignRows(ids, rows.data());
  }
  REQUIRE(copy.size() == source.size());
  source.ForEach([&](uint64_t id, const float* row) {
    REQUIRE(!RowOf(copy, id).empty());
    CHECK(std::memcmp(RowOf(copy, id).data(), row, row_floats * sizeof(float)) == 0);
  });
}

// Every row's bytes, by id (compared bit for bit: assigned rows may hold NaN).
using RowBytes = std::map<uint64_t, std::string>;
RowBytes AllRows(const TableShard& shard) {
  RowBytes rows;
  shard.ForEach([&](uint64_t id, const float* row) {
    rows[id].assign(reinterpret_cast<const char*>(row), shard.spec().row_floats() * sizeof(float));
  });
  return rows;
}

// Reads the next pieces of the cut under way into `read`; false once it is read.
bool ReadPiece(TableShard* shard, size_t piece, RowBytes* read) {
  const uint32_t row_floats = shard->spec().row_floats();
  std::vector<uint64_t> ids(piece);
  std::vector<float> rows(piece * row_floats);
  const size_t n = shard->ReadCut(piece, ids.data(), rows.data());
  for (size_t i = 0; i < n; ++i) {
    CHECK(read->count(ids[i]) == 0);
    (*read)[ids[i]].assign(reinterpret_cast<const char*>(rows.data() + i * row_floats),
                           row_floats * sizeof(float));
  }
  return n > 0;
}

TEST_CASE("a cut reads every row as of its start while pushes, assigns and new rows go on",
          "[storage][embedding_table][cut]") {
  const std::string optimizer = GENERATE("adagrad", "adam", "sgd", "rowwise_adagrad");
  const auto value_type =
      GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  CAPTURE(optimizer, value_type);
  const auto spec = Spec(optimizer, 4, "emb", Typed(value_type));
  const uint32_t row_floats = spec->row_floats();
  TableShard shard(spec.get(), 0);
  std::mt19937_64 rng(21);
  std::vector<uint64_t> ids = RandomIds(rng, 3000, 5000);
  shard.Push(ids, RandomGrads(rng, ids.size() * 4).data());
  const RowBytes at_start = AllRows(shard);

  shard.StartCut();
  CHECK(shard.cutting());
  RowBytes read;
  const size_t piece = GENERATE(size_t{1}, size_t{97}, size_t{100000});
  int round = 0;
  do {
    // Between pieces: pushes to old and new ids, a row assigned, rows assigned together.
    const std::vector<uint64_t> pushed = RandomIds(rng, 200, 10000);
    shard.Push(pushed, RandomGrads(rng, pushed.size() * 4).data());
    std::vector<float> row(row_floats, 0.5f + round);
    shard.Assign(ids[rng() % ids.size()], row.data());
    const std::vector<uint64_t> assigned = RandomIds(rng, 20, 8000);
    shard.AssignRows(assigned, RandomGrads(rng, assigned.size() * row_floats).data());
    ++round;
  } while (ReadPiece(&shard, piece, &read));
  CHECK(read == at_start);
  CHECK(AllRows(shard) != at_start);  // the shard did change meanwhile
  shard.EndCut();
  CHECK_FALSE(shard.cutting());
  CHECK_FALSE(ReadPiece(&shard, piece, &read));

  // A new cut sees the rows as they are now.
  const RowBytes now = AllRows(shard);
  shard.StartCut();
  read.clear();
  while (ReadPiece(&shard, piece, &read)) {
  }
  CHECK(read == now);
  shard.EndCut();
}

TEST_CASE("a cut ended early leaves changes unrecorded, and an empty shard's cut is empty",
          "[storage][embedding_table][cut]") {
  const auto spec = Spec("adagrad", 2);
  TableShard shard(spec.get(), 0);
  uint64_t id;
  float row[4];
  shard.StartCut();
  CHECK(shard.ReadCut(1, &id, row) == 0);
  shard.EndCut();

  std::mt19937_64 rng(22);
  const std::vector<uint64_t> ids = RandomIds(rng, 100, 1000);
  shard.Push(ids, RandomGrads(rng, ids.size() * 2).data());
  const size_t idle = shard.MemoryBytes();
  shard.StartCut();
  shard.Push(ids, RandomGrads(rng, ids.size() * 2).data());
  CHECK(shard.MemoryBytes() > idle);  // the old rows were kept for the cut
  shard.EndCut();
  CHECK(shard.MemoryBytes() == idle);
  shard.Push(ids, RandomGrads(rng, ids.size() * 2).data());
  CHECK(shard.MemoryBytes() == idle);  // no cut: nothing kept
}

TEST_CASE("every change stamps the row with the current generation; reads do not",
          "[storage][embedding_table][generation]") {
  const auto spec = Spec("adagrad", 4);
  const uint32_t row_floats = spec->row_floats();
  TableShard shard(spec.get(), 0);
  std::vector<float> out(4 * 4);
  shard.set_generation(1);
  shard.Pull(std::vector<uint64_t>{1, 2, 3}, out.data());  // created: generation 1
  shard.set_generation(2);
  shard.Pull(std::vector<uint64_t>{1, 2, 3, 4}, out.data());  // only 4 is new
  CHECK(shard.RowGeneration(1) == 1);
  CHECK(shard.RowGeneration(4) == 2);
  CHECK(shard.RowGeneration(99) == -1);
  shard.set_generation(3);
  shard.Push(std::vector<uint64_t>{2, 2}, std::vector<float>(8, 0.5f).data());
  std::vector<float> row(row_floats, 1.0f);
  shard.set_generation(4);
  shard.Assign(3, row.data());
  shard.set_generation(5);
  shard.AssignRows(std::vector<uint64_t>{5}, row.data());
  shard.Peek(std::vector<uint64_t>{1, 6}, out.data());
  CHECK(!RowOf(shard, 1).empty());
  CHECK(shard.RowGeneration(1) == 1);
  CHECK(shard.RowGeneration(2) == 3);
  CHECK(shard.RowGeneration(3) == 4);
  CHECK(shard.RowGeneration(4) == 2);
  CHECK(shard.RowGeneration(5) == 5);
  CHECK(shard.RowGeneration(6) == -1);

  std::map<uint64_t, std::vector<float>> changed;
  const size_t n = shard.ForEachChangedSince(
      2, [&](uint64_t id, const float* r) { changed[id].assign(r, r + row_floats); });
  CHECK(n == 3);
  REQUIRE(changed.size() == 3);
  CHECK(changed.count(2) == 1);
  CHECK(changed.count(3) == 1);
  CHECK(changed.count(5) == 1);
  CHECK(changed[3] == row);
  CHECK(shard.ForEachChangedSince(5, [](uint64_t, const float*) {}) == 0);

  shard.ResetGenerations();
  for (uint64_t id = 1; id <= 5; ++id) CHECK(shard.RowGeneration(id) == 0);
  CHECK(shard.ForEachChangedSince(0, [](uint64_t, const float*) {}) == 0);
}

TEST_CASE("changed rows are found across slab blocks and growth",
          "[storage][embedding_table][generation]") {
  const auto spec = Spec("sgd", 2);
  TableShard shard(spec.get(), 0);
  shard.set_generation(7);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> ids(200000);
  for (uint64_t& id : ids) id = rng();
  std::vector<float> out(ids.size() * 2);
  shard.Pull(ids, out.data());  // three slab blocks, the index grown many times
  REQUIRE(shard.size() == ids.size());
  shard.set_generation(8);
  std::set<uint64_t> pushed;
  for (int i = 0; i < 1000; ++i) pushed.insert(ids[rng() % ids.size()]);
  const std::vector<uint64_t> keys(pushed.begin(), pushed.end());
  shard.Push(keys, std::vector<float>(keys.size() * 2, 1.0f).data());
  std::set<uint64_t> seen;
  bool rows_right = true;
  const size_t n = shard.ForEachChangedSince(7, [&](uint64_t id, const float* row) {
    const std::vector<float> found = RowOf(shard, id);
    rows_right &= !found.empty() &&
                  std::memcmp(row, found.data(), found.size() * sizeof(float)) == 0;
    seen.insert(id);
  });
  CHECK(n == pushed.size());
  CHECK(rows_right);
  CHECK(seen == pushed);
  size_t all = 0;
  shard.ForEachChangedSince(6, [&](uint64_t, const float*) { ++all; });
  CHECK(all == ids.size());
}

// The design target: 10M rows of dim 16 with adagrad (128 bytes raw per row) over 64 shards, each
// presized, within 15% of the raw bytes.
TEST_CASE("memory per row stays within 1.15x of the raw row", "[storage][embedding_table]") {
  const auto spec = Spec("adagrad", 16);
  const size_t raw = spec->row_floats() * sizeof(float);
  REQUIRE(raw == 128);
  const size_t rows = GENERATE(size_t{10000000 / 64}, size_t{1000000});
  CAPTURE(rows);
  TableShard shard(spec.get(), rows);
  const size_t empty_bytes = shard.MemoryBytes();
  std::vector<uint64_t> ids(100000);
  std::vector<float> out(ids.size() * 16);
  std::mt19937_64 rng(rows);
  while (shard.size() < rows) {
    ids.resize(std::min(ids.size(), rows - shard.size()));
    for (uint64_t& id : ids) id = rng();  // 2^64 ids: collisions are negligible
    shard.Pull(ids, out.data());
  }
  REQUIRE(shard.size() == rows);
  const double ratio = static_cast<double>(shard.MemoryBytes()) / shard.size() / raw;
  INFO("MemoryBytes / size / 128 = " << ratio);
  CHECK(ratio <= 1.15);
  // Presized: the index did not grow, the slabs hold about what the rows need.
  CHECK(shard.MemoryBytes() - empty_bytes < rows * raw * 1.01);
}

TEST_CASE("memory per row without a presize", "[storage][embedding_table]") {
  const auto spec = Spec("adagrad", 16);
  TableShard shard(spec.get(), 0);
  std::vector<uint64_t> ids(10000);
  std::vector<float> out(ids.size() * 16);
  std::mt19937_64 rng(1);
  double worst = 0;
  while (shard.size() < 1000000) {
    for (uint64_t& id : ids) id = rng();
    shard.Pull(ids, out.data());
    if (shard.size() >= 100000) {
      worst = std::max(worst, static_cast<double>(shard.MemoryBytes()) / shard.size() / 128);
    }
  }
  INFO("worst MemoryBytes / size / 128 between 100k and 1M rows = " << worst);
  // Right after a growth the index is 0.85 / 1.5 full: 16 / 0.567 = 28 bytes a row (+22%); the
  // last slab block has at most a quarter block spare: 16384 rows, +16% of 100k rows.
  CHECK(worst <= 1.35);
}

}  // namespace
}  // namespace server
}  // namespace ps

namespace ps {
namespace server {
namespace {

// --- Removal, caps, admission and eviction ---

config::Table Bounds(const std::string& text_policy, uint32_t min_count = 0) {
  config::Table table;
  table.mutable_eviction()->set_policy(text_policy == "lfu" ? config::Eviction::LFU
                                                             : config::Eviction::LRU);
  if (min_count > 0) table.mutable_admission()->set_min_count(min_count);
  return table;
}

TEST_CASE("erased rows free their slots, which new rows reuse, and the rest stay exact",
          "[storage][embedding_table][evict]") {
  const auto spec = Spec(GENERATE(as<std::string>{}, "adagrad", "sgd"), 8);
  TableShard shard(spec.get(), 0);
  ReferenceShard reference(spec.get());
  std::mt19937_64 rng(5);
  size_t peak_rows = 0;
  size_t created = 0;
  for (int round = 0; round < 60; ++round) {
    const size_t before = reference.rows().size();
    const std::vector<uint64_t> ids = RandomIds(rng, 300, 3000);
    const std::vector<float> grads = RandomGrads(rng, ids.size() * 8);
    shard.Push(ids, grads.data());
    reference.Push(ids, grads);
    created += reference.rows().size() - before;
    peak_rows = std::max(peak_rows, reference.rows().size());
    // Erase about as many rows as were created: the shard's size stays about the same.
    std::vector<uint64_t> held;
    for (const auto& [id, row] : reference.rows()) held.push_back(id);
    std::sort(held.begin(), held.end());
    for (int i = 0; i < 150 && !held.empty(); ++i) {
      const uint64_t id = held[rng() % held.size()];
      CHECK(shard.Erase(id) == (reference.rows().count(id) == 1));
      reference.Erase(id);
    }
    CHECK_FALSE(shard.Erase(12345678901234ull));
    ExpectSameRows(shard, reference);
  }
  // Slots are reused: the shard is sized by the most rows it held at once, not by every row it
  // ever created (the index grows in steps of 1.5x, the slabs by doubling).
  REQUIRE(created > 3 * peak_rows);
  CHECK(shard.MemoryBytes() <= 2 * TableShard::BytesForRows(*spec, peak_rows));
}

TEST_CASE("a cut skips holes and keeps the rows erased or reused while it reads",
          "[storage][embedding_table][evict][cut]") {
  const auto spec = Spec("adagrad", 4);
  TableShard shard(spec.get(), 0);
  std::mt19937_64 rng(8);
  std::vector<uint64_t> ids = RandomIds(rng, 3000, 4000);
  shard.Push(ids, RandomGrads(rng, ids.size() * 4).data());
  // Holes before the cut.
  for (int i = 0; i < 500; ++i) shard.Erase(ids[rng() % ids.size()]);
  const RowBytes at_start = AllRows(shard);
  shard.StartCut();
  RowBytes read;
  const size_t piece = GENERATE(size_t{1}, size_t{61}, size_t{100000});
  do {
    // Rows erased (not yet read, or read) and new rows taking their slots.
    for (int i = 0; i < 40; ++i) shard.Erase(ids[rng() % ids.size()]);
    const std::vector<uint64_t> fresh = RandomIds(rng, 60, 100000);
    shard.Push(fresh, RandomGrads(rng, fresh.size() * 4).data());
  } while (ReadPiece(&shard, piece, &read));
  CHECK(read == at_start);
  shard.EndCut();
}

TEST_CASE("at the row cap a pull answers the initial row and a push is dropped, both counted",
          "[storage][embedding_table][evict]") {
  const auto spec = Spec("adagrad", 4);
  TableShard shard(spec.get(), 0);
  shard.SetMaxRows(100);
  std::vector<uint64_t> ids(150);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 7919;
  std::vector<float> pulled(ids.size() * 4);
  shard.Pull(ids, pulled.data());
  CHECK(shard.size() == 100);
  CHECK(shard.counters().full_refused == 50);
  std::vector<float> initial(4);
  spec->initializer->Fill(ids[120], 4, initial.data());
  CHECK(std::memcmp(pulled.data() + 120 * 4, initial.data(), 16) == 0);
  std::vector<uint64_t> kept;
  const std::vector<float> grads(ids.size() * 4, 0.5f);
  std::vector<float> rows_after(ids.size() * spec->row_floats());
  CHECK(shard.Push(ids, grads.data(), rows_after.data(), &kept) == 50);
  CHECK(kept == std::vector<uint64_t>(ids.begin(), ids.begin() + 100));
  CHECK(std::memcmp(rows_after.data() + 99 * spec->row_floats(), RowOf(shard, ids[99]).data(),
                    spec->row_floats() * sizeof(float)) == 0);
  CHECK(RowOf(shard, ids[120]).empty());
  // The index and slabs stay at what 100 rows need.
  CHECK(shard.MemoryBytes() <= TableShard::BytesForRows(*spec, 100) + 4096);
  // Room again after an eviction: the next new id gets a row.
  CHECK(shard.EvictToRows(99, 1000, nullptr) == 1);
  CHECK(shard.Push({ids[120]}, grads.data()) == 0);
  CHECK(!RowOf(shard, ids[120]).empty());
}

TEST_CASE("rows taken out come back bit for bit; a soft cap creates rows past the cap",
          "[storage][embedding_table][tier]") {
  const auto value_type = GENERATE(config::Table::FP32, config::Table::FP16);
  config::Table table;
  table.set_name("emb");
  table.set_dim(5);
  table.set_value_type(value_type);
  table.mutable_optimizer()->set_type("adagrad");
  table.mutable_optimizer()->set_learning_rate(0.1f);
  auto created = TableSpec::Create(table, 3);
  REQUIRE(created.ok());
  const std::unique_ptr<TableSpec> spec = std::move(created).value();
  TableShard shard(spec.get(), 0);
  shard.SetMaxRows(100);
  shard.SetSoftCap(true);
  shard.SetTick(7);
  std::mt19937_64 rng(21);
  std::vector<uint64_t> ids(150);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i * 0x9E3779B97F4A7C15ull;
  // Past the cap: a soft cap refuses nothing.
  CHECK(shard.Push(ids, RandomGrads(rng, ids.size() * 5).data()) == 0);
  CHECK(shard.size() == 150);
  CHECK(shard.counters().full_refused == 0);
  const RowBytes before = AllRows(shard);
  // Out and back in, as the tier stores them.
  TableShard::Departed departed;
  CHECK(shard.EvictToRows(90, 10000, nullptr, &departed) == 60);
  CHECK(departed.ids.size() == 60);
  CHECK(departed.stored.size() == 60 * shard.stored_row_bytes());
  shard.NoteDemoted(60);
  CHECK(shard.counters().demoted == 60);
  CHECK(shard.counters().evicted_budget == 0);
  std::vector<uint64_t> missing;
  shard.FindMissing(ids, &missing);
  CHECK(missing.size() == 60);
  for (size_t i = 0; i < departed.ids.size(); ++i) {
    CHECK(shard.InsertStored(departed.ids[i], departed.stored.data() + i * shard.stored_row_bytes(),
                             departed.last_use[i], departed.generations[i], true,
                             departed.use_counts[i]));
    // A row here already is left as it is.
    CHECK_FALSE(shard.InsertStored(departed.ids[i], departed.stored.data(), 0, 0));
  }
  CHECK(shard.counters().promoted == 60);
  CHECK(AllRows(shard) == before);
  // TakeRows takes the rows it holds, and encode/decode of a stored row are exact.
  departed.clear();
  CHECK(shard.TakeRows({ids[0], ids[1], 12345}, &departed) == 2);
  std::vector<float> row(spec->row_floats());
  shard.DecodeStored(departed.stored.data(), row.data());
  std::string stored(shard.stored_row_bytes(), '\0');
  shard.EncodeStored(row.data(), &stored[0]);
  CHECK(stored == departed.stored.substr(0, shard.stored_row_bytes()));
}

TEST_CASE("admission: a row at the min_count-th push; pulls answer the initial row",
          "[storage][embedding_table][admission]") {
  const uint32_t min_count = GENERATE(2u, 3u);
  const auto spec = Spec("sgd", 4, "emb", Bounds("lru", min_count));
  TableShard shard(spec.get(), 0, 1 << 12);
  ReferenceShard reference(spec.get());
  const std::vector<uint64_t> ids = {1, 2, 3};
  const std::vector<float> grads(12, 1.0f);
  std::vector<float> out(12), initial(12);
  for (uint32_t push = 1; push <= min_count; ++push) {
    shard.Pull(ids, out.data());
    CHECK(shard.size() == (push == 1 ? 0 : 0));
    for (int i = 0; i < 3; ++i) spec->initializer->Fill(ids[i], 4, initial.data() + 4 * i);
    CHECK(out == initial);
    const size_t dropped = shard.Push(ids, grads.data());
    CHECK(dropped == (push < min_count ? 3 : 0));
  }
  // The admitted rows were created from the initializer, then the admitting push applied.
  reference.Push(ids, grads);
  ExpectSameRows(shard, reference);
  CHECK(shard.counters().admission_refused == 3 * (min_count - 1));
}

TEST_CASE("Sweep evicts rows unused for longer than the TTL on a fake clock, and only them",
          "[storage][embedding_table][evict]") {
  const auto spec = Spec("adagrad", 4, "emb", Bounds(GENERATE(as<std::string>{}, "lru", "lfu")));
  TableShard shard(spec.get(), 0);
  std::vector<uint64_t> old_ids, new_ids;
  for (uint64_t i = 0; i < 500; ++i) old_ids.push_back(i * 31 + 1);
  for (uint64_t i = 0; i < 500; ++i) new_ids.push_back(i * 37 + 100000);
  std::vector<float> out(500 * 4);
  shard.SetTick(10);
  shard.Pull(old_ids, out.data());
  shard.SetTick(700);
  shard.Pull(new_ids, out.data());
  // At tick 1100 with a TTL of 1000: the old rows (age 1090) go, the new ones (age 400) stay.
  shard.SetTick(1100);
  std::vector<uint64_t> evicted;
  size_t swept = 0;
  for (int i = 0; i < 10; ++i) swept += shard.Sweep(200, 1000, &evicted);
  CHECK(swept == 500);
  std::sort(evicted.begin(), evicted.end());
  CHECK(evicted == old_ids);
  CHECK(shard.size() == 500);
  CHECK(shard.counters().evicted_ttl == 500);
  for (uint64_t id : new_ids) CHECK(!RowOf(shard, id).empty());
}

TEST_CASE("stamps of rows never used again do not wrap around while sweeps go on",
          "[storage][embedding_table][evict]") {
  const auto spec = Spec("sgd", 4, "emb", Bounds("lru"));
  TableShard shard(spec.get(), 0);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 300; ++i) ids.push_back(i + 1);
  std::vector<float> out(300 * 4);
  shard.SetTick(0);
  shard.Pull(ids, out.data());
  // The clock runs through many 12-bit wraps; sweeps without a TTL saturate the stamps, and a
  // TTL applied later still finds these rows old.
  for (uint32_t tick = 0; tick < 40000; tick += 500) {
    shard.SetTick(tick);
    shard.Sweep(1 << 20, 0, nullptr);
  }
  CHECK(shard.size() == 300);
  CHECK(shard.Sweep(1 << 20, TableShard::kMaxTtlTicks, nullptr) == 300);
}

TEST_CASE("EvictToRows evicts the least recently used rows (LRU) or least used (LFU) first",
          "[storage][embedding_table][evict]") {
  const std::string policy = GENERATE(as<std::string>{}, "lru", "lfu");
  const auto spec = Spec("sgd", 4, "emb", Bounds(policy));
  TableShard shard(spec.get(), 0);
  std::vector<uint64_t> cold, hot;
  for (uint64_t i = 0; i < 2000; ++i) (i % 2 ? hot : cold).push_back(i * 2654435761ull);
  std::vector<float> out(2000 * 4);
  shard.SetTick(1);
  shard.Pull(cold, out.data());
  shard.Pull(hot, out.data());
  // The hot half: used again later (LRU) and many times (LFU).
  for (int i = 0; i < 40; ++i) {
    shard.SetTick(2 + i);
    shard.Pull(hot, out.data());
  }
  std::vector<uint64_t> evicted;
  CHECK(shard.EvictToRows(1000, 1 << 20, &evicted) == 1000);
  CHECK(shard.size() == 1000);
  CHECK(shard.counters().evicted_budget == 1000);
  size_t hot_kept = 0;
  for (uint64_t id : hot) hot_kept += !RowOf(shard, id).empty();
  // Sampled slices: not exact, but the hot rows survive.
  CHECK(hot_kept >= 900);
  // What EvictToRows says it evicted is gone.
  for (uint64_t id : evicted) CHECK(RowOf(shard, id).empty());
}

}  // namespace
}  // namespace server
}  // namespace ps

namespace ps {
namespace server {
namespace {

// --- Compact rows (value_type FP16 and BF16) ---

TEST_CASE("compact rows: pulls and pushes match a reference that decodes, updates and encodes",
          "[storage][embedding_table][compact]") {
  const auto value_type =
      GENERATE(config::Table::FP32, config::Table::FP16, config::Table::BF16);
  const std::string optimizer = GENERATE("sgd", "adagrad", "rowwise_adagrad", "adam", "ftrl");
  const uint32_t dim = GENERATE(1u, 5u, 16u);
  CAPTURE(value_type, optimizer, dim);
  const auto spec = Spec(optimizer, dim, "emb", Typed(value_type));
  TableShard shard(spec.get(), 0);
  ReferenceShard reference(spec.get());
  std::mt19937_64 rng(dim * 7 + value_type);
  for (int round = 0; round < 20; ++round) {
    const uint64_t range = 100 + round * 200;
    const std::vector<uint64_t> pull_ids = RandomIds(rng, 1 + rng() % 500, range);
    std::vector<float> pulled(pull_ids.size() * dim);
    shard.Pull(pull_ids, pulled.data());
    REQUIRE(pulled == reference.Pull(pull_ids));
    // Peek of ids with and without rows agrees with the pull.
    std::vector<float> peeked(pull_ids.size() * dim);
    shard.Peek(pull_ids, peeked.data());
    REQUIRE(peeked == pulled);

    const std::vector<uint64_t> push_ids = RandomIds(rng, 1 + rng() % 500, range);
    const std::vector<float> grads = RandomGrads(rng, push_ids.size() * dim);
    shard.Push(push_ids, grads.data());
    reference.Push(push_ids, grads);
  }
  ExpectSameRows(shard, reference);
  // Every stored weight is a value of the type: encoding the decoded row changes nothing.
  shard.ForEach([&](uint64_t, const float* row) {
    std::vector<float> rounded(row, row + dim);
    RoundWeights(*spec, rounded.data());
    REQUIRE(std::memcmp(rounded.data(), row, dim * sizeof(float)) == 0);
  });
}

TEST_CASE("compact rows: a replica assigning a primary's rows holds them bit for bit",
          "[storage][embedding_table][compact]") {
  const auto value_type = GENERATE(config::Table::FP16, config::Table::BF16);
  const std::string optimizer = GENERATE("adagrad", "rowwise_adagrad", "adam");
  CAPTURE(value_type, optimizer);
  const auto spec = Spec(optimizer, 7, "emb", Typed(value_type));
  const uint32_t row_floats = spec->row_floats();
  TableShard primary(spec.get(), 0);
  TableShard by_rows(spec.get(), 0);    // the replication stream: AssignRows of rows_after
  TableShard by_assign(spec.get(), 0);  // a snapshot: Assign of ForEach's rows
  TableShard by_cut(spec.get(), 0);     // a checkpoint: AssignRows of ReadCut's rows
  std::mt19937_64 rng(value_type);
  for (int round = 0; round < 10; ++round) {
    const std::vector<uint64_t> ids = RandomIds(rng, 400, 2000);
    std::vector<float> rows_after(ids.size() * row_floats);
    primary.Push(ids, RandomGrads(rng, ids.size() * 7).data(), rows_after.data());
    by_rows.AssignRows(ids, rows_after.data());
  }
  primary.ForEach([&](uint64_t id, const float* row) { by_assign.Assign(id, row); });
  primary.StartCut();
  std::vector<uint64_t> ids(64);
  std::vector<float> rows(64 * row_floats);
  while (size_t n = primary.ReadCut(64, ids.data(), rows.data())) {
    by_cut.AssignRows(absl::MakeConstSpan(ids.data(), n), rows.data());
  }
  primary.EndCut();
  const RowBytes want = AllRows(primary);
  CHECK(AllRows(by_rows) == want);
  CHECK(AllRows(by_assign) == want);
  CHECK(AllRows(by_cut) == want);
  CHECK(primary.MemoryBytes() > 0);
}

TEST_CASE("fp16 weights saturate at +-65504; bf16 keeps float's range",
          "[storage][embedding_table][compact]") {
  const auto fp16 = Spec("sgd", 2, "emb", Typed(config::Table::FP16));
  TableShard shard(fp16.get(), 0);
  // sgd with lr 0.1: w -= 0.1 * g, so -1e6 drives the first weight to about +1e5.
  const std::vector<float> grads = {-1e6f, 1e6f};
  std::vector<float> rows_after(fp16->row_floats());
  shard.Push({1}, grads.data(), rows_after.data());
  std::vector<float> row = RowOf(shard, 1);
  CHECK(row[0] == 65504.0f);
  CHECK(row[1] == -65504.0f);
  CHECK(rows_after[0] == 65504.0f);
  // Still saturated, never infinite, however far it is pushed (while the fp32 arithmetic itself
  // stays finite: a sum of gradients past FLT_MAX is infinite in any value type).
  shard.Push({1, 1, 1}, std::vector<float>{-1e37f, 1e37f, -1e37f, 1e37f, -1e37f, 1e37f}.data());
  row = RowOf(shard, 1);
  CHECK(row[0] == 65504.0f);
  CHECK(row[1] == -65504.0f);
  // An fp32 row assigned with a weight beyond the range saturates too.
  const std::vector<float> big(fp16->row_floats(), 1e9f);
  shard.Assign(2, big.data());
  CHECK(RowOf(shard, 2)[0] == 65504.0f);

  const auto bf16 = Spec("sgd", 2, "emb", Typed(config::Table::BF16));
  TableShard wide(bf16.get(), 0);
  wide.Push({1}, grads.data());
  const float initial = RowOf(wide, 1)[0];
  CHECK(RowOf(wide, 1)[0] == Bf16ToFloat(FloatToBf16(initial)));
  CHECK(RowOf(wide, 1)[0] > 99000.0f);
}

TEST_CASE("compact rows: an update below half a step of the type is lost (round to nearest)",
          "[storage][embedding_table][compact]") {
  // Documented in server/README.md#compact-rows: w = 1 holds steps of 2^-10 (fp16) and 2^-7
  // (bf16) above it; an sgd step of lr 0.1 x grad smaller than half of that leaves w at 1.
  const auto value_type = GENERATE(config::Table::FP16, config::Table::BF16);
  CAPTURE(value_type);
  const auto spec = Spec("sgd", 1, "emb", Typed(value_type));
  TableShard shard(spec.get(), 0);
  const float one = 1.0f;
  shard.Assign(5, &one);
  const float step = value_type == config::Table::FP16 ? 0x1.0p-10f : 0x1.0p-7f;
  const float small = -0.4f * step / 0.1f;  // w += 0.4 step: rounds back to 1
  shard.Push({5}, &small);
  CHECK(RowOf(shard, 5)[0] == 1.0f);
  const float large = -0.6f * step / 0.1f;  // w += 0.6 step: rounds up to 1 + step
  shard.Push({5}, &large);
  CHECK(RowOf(shard, 5)[0] == 1.0f + step);
}

TEST_CASE("compact rows: bytes a row, padding, and the initial row of an uncreated id",
          "[storage][embedding_table][compact]") {
  // FP16 dim 16 with rowwise_adagrad: 32 bytes of weights and 4 of state; the index's 19.
  const auto compact = Spec("rowwise_adagrad", 16, "emb", Typed(config::Table::FP16));
  CHECK(compact->row_floats() == 17);
  CHECK(compact->row_words() == 9);
  CHECK(TableShard::BytesPerRow(*compact) == 36 + 19);
  const auto full = Spec("adagrad", 16);
  CHECK(TableShard::BytesPerRow(*full) == 128 + 19);
  CHECK(TableShard::BytesForRows(*compact, 1000000) < TableShard::BytesForRows(*full, 1000000) / 2);
  // An odd dim pads the weights to whole words so that the fp32 state is aligned.
  const auto odd = Spec("adagrad", 5, "emb", Typed(config::Table::BF16));
  CHECK(odd->weight_words() == 3);
  CHECK(odd->row_words() == 3 + 5);

  // Memory per row of a presized shard, within 1.15x of the stored row plus its index share.
  TableShard shard(compact.get(), 100000);
  std::mt19937_64 rng(3);
  std::vector<uint64_t> ids(100000);
  for (uint64_t& id : ids) id = rng();
  std::vector<float> out(ids.size() * 16);
  shard.Pull(ids, out.data());
  REQUIRE(shard.size() == ids.size());
  const double per_row = static_cast<double>(shard.MemoryBytes()) / shard.size();
  INFO("bytes per row = " << per_row);
  CHECK(per_row <= 55 * 1.15);

  // At the row cap, the initial row of an id without a row is rounded as a created one is.
  TableShard capped(compact.get(), 0);
  capped.SetMaxRows(1);
  std::vector<float> pulled(2 * 16);
  capped.Pull({1, 2}, pulled.data());
  REQUIRE(capped.size() == 1);
  std::vector<float> initial(16);
  compact->initializer->Fill(2, 16, initial.data());
  RoundWeights(*compact, initial.data());
  CHECK(std::memcmp(pulled.data() + 16, initial.data(), 16 * sizeof(float)) == 0);
  CHECK(std::memcmp(pulled.data(), RowOf(capped, 1).data(), 16 * sizeof(float)) == 0);
}

}  // namespace
}  // namespace server
}  // namespace ps

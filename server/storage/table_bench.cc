// Measures a TableShard (dim 16, adagrad; 1M rows by default): memory per row presized and grown,
// and the single-thread rates of Pull, Push and AssignRows (a replica's apply of whole rows) of
// 100k random existing ids. Prints one JSON line. An argument sets the rows: tables whose index
// and rows do not fit in the caches show the cost of each cache miss.
//
//   bazel run -c opt //server/storage:table_bench [-- ROWS]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "server/storage/embedding_table.h"

namespace ps {
namespace server {
namespace {

constexpr size_t kBatch = 100000;
constexpr int kRounds = 30;
constexpr uint32_t kDim = 16;

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Main(size_t num_rows) {
  config::Table table;
  table.set_name("bench");
  table.set_dim(kDim);
  table.mutable_optimizer()->set_type("adagrad");
  auto spec = TableSpec::Create(table, 1);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
    return 1;
  }
  const double raw = (*spec)->row_floats() * sizeof(float);

  std::mt19937_64 rng(42);
  std::vector<uint64_t> ids(num_rows);
  for (uint64_t& id : ids) id = rng();
  std::vector<float> out(num_rows * kDim);

  TableShard grown(spec->get(), 0);
  auto start = std::chrono::steady_clock::now();
  grown.Pull(ids, out.data());
  const double insert_s = Seconds(start);
  const double grown_ratio = grown.MemoryBytes() / static_cast<double>(grown.size()) / raw;

  TableShard shard(spec->get(), num_rows);
  shard.Pull(ids, out.data());
  const double presized_ratio = shard.MemoryBytes() / static_cast<double>(shard.size()) / raw;

  std::vector<uint64_t> batch(kBatch);
  std::vector<float> grads(kBatch * kDim, 0.001f);
  std::vector<float> rows(kBatch * (*spec)->row_floats(), 0.5f);
  double pull_s = 0, push_s = 0, assign_s = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (uint64_t& id : batch) id = ids[rng() % num_rows];
    start = std::chrono::steady_clock::now();
    shard.Pull(batch, out.data());
    pull_s += Seconds(start);
    start = std::chrono::steady_clock::now();
    shard.Push(batch, grads.data());
    push_s += Seconds(start);
    for (uint64_t& id : batch) id = ids[rng() % num_rows];
    start = std::chrono::steady_clock::now();
    shard.AssignRows(batch, rows.data());
    assign_s += Seconds(start);
  }
  std::printf(
      "{\"bench\":\"table_shard\",\"rows\":%zu,\"dim\":%u,\"optimizer\":\"adagrad\","
      "\"memory_ratio_presized\":%.4f,\"memory_ratio_grown\":%.4f,\"insert_rows_per_s\":%.0f,"
      "\"pull_ids_per_s\":%.0f,\"push_ids_per_s\":%.0f,\"assign_ids_per_s\":%.0f,\"batch\":%zu}\n",
      shard.size(), kDim, presized_ratio, grown_ratio, num_rows / insert_s,
      kRounds * kBatch / pull_s, kRounds * kBatch / push_s, kRounds * kBatch / assign_s, kBatch);
  return 0;
}

}  // namespace
}  // namespace server
}  // namespace ps

int main(int argc, char** argv) {
  const long long rows = argc > 1 ? std::atoll(argv[1]) : 1000000;
  if (rows < 1) {
    std::fprintf(stderr, "usage: %s [ROWS > 0]\n", argv[0]);
    return 2;
  }
  return ps::server::Main(static_cast<size_t>(rows));
}

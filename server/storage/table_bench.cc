// Measures a TableShard of 1M rows (dim 16, adagrad): memory per row presized and grown, and the
// single-thread rates of Pull and Push of 100k random existing ids. Prints one JSON line.
//
//   bazel run -c opt //server/storage:table_bench
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "server/storage/embedding_table.h"

namespace ps {
namespace server {
namespace {

constexpr size_t kRows = 1000000;
constexpr size_t kBatch = 100000;
constexpr int kRounds = 30;
constexpr uint32_t kDim = 16;

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Main() {
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
  std::vector<uint64_t> ids(kRows);
  for (uint64_t& id : ids) id = rng();
  std::vector<float> out(kRows * kDim);

  TableShard grown(spec->get(), 0);
  auto start = std::chrono::steady_clock::now();
  grown.Pull(ids, out.data());
  const double insert_s = Seconds(start);
  const double grown_ratio = grown.MemoryBytes() / static_cast<double>(grown.size()) / raw;

  TableShard shard(spec->get(), kRows);
  shard.Pull(ids, out.data());
  const double presized_ratio = shard.MemoryBytes() / static_cast<double>(shard.size()) / raw;

  std::vector<uint64_t> batch(kBatch);
  std::vector<float> grads(kBatch * kDim, 0.001f);
  double pull_s = 0, push_s = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (uint64_t& id : batch) id = ids[rng() % kRows];
    start = std::chrono::steady_clock::now();
    shard.Pull(batch, out.data());
    pull_s += Seconds(start);
    start = std::chrono::steady_clock::now();
    shard.Push(batch, grads.data());
    push_s += Seconds(start);
  }
  std::printf(
      "{\"bench\":\"table_shard\",\"rows\":%zu,\"dim\":%u,\"optimizer\":\"adagrad\","
      "\"memory_ratio_presized\":%.4f,\"memory_ratio_grown\":%.4f,\"insert_rows_per_s\":%.0f,"
      "\"pull_ids_per_s\":%.0f,\"push_ids_per_s\":%.0f,\"batch\":%zu}\n",
      shard.size(), kDim, presized_ratio, grown_ratio, kRows / insert_s, kRounds * kBatch / pull_s,
      kRounds * kBatch / push_s, kBatch);
  return 0;
}

}  // namespace
}  // namespace server
}  // namespace ps

int main() { return ps::server::Main(); }

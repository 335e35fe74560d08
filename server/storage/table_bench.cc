// Measures a TableShard (dim 16, adagrad, FP32 weights; 1M rows by default): memory per row
// presized and grown (as a ratio to the raw fp32 row, and in bytes per resident row: index,
// slabs and all, over the rows held), and the single-thread rates of Pull, Push and AssignRows (a
// replica's apply of whole rows) of 100k random existing ids. Prints one JSON line. An argument
// sets the rows: tables whose index and rows do not fit in the caches show the cost of each cache
// miss. --optimizer and --value_type (FP32, FP16, BF16) set the table's.
//
//   bazel run -c opt //server/storage:table_bench [-- [--optimizer=rowwise_adagrad]
//       [--value_type=FP16] [ROWS]]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
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

int Main(size_t num_rows, const std::string& optimizer, config::Table::ValueType value_type) {
  config::Table table;
  table.set_name("bench");
  table.set_dim(kDim);
  table.set_value_type(value_type);
  table.mutable_optimizer()->set_type(optimizer);
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
  const double grown_bytes = grown.MemoryBytes() / static_cast<double>(grown.size());
  const double grown_ratio = grown_bytes / raw;

  TableShard shard(spec->get(), num_rows);
  shard.Pull(ids, out.data());
  const double presized_bytes = shard.MemoryBytes() / static_cast<double>(shard.size());
  const double presized_ratio = presized_bytes / raw;

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
      "{\"bench\":\"table_shard\",\"rows\":%zu,\"dim\":%u,\"optimizer\":\"%s\","
      "\"value_type\":\"%s\",\"bytes_per_resident_row\":%.2f,"
      "\"bytes_per_resident_row_grown\":%.2f,"
      "\"memory_ratio_presized\":%.4f,\"memory_ratio_grown\":%.4f,\"insert_rows_per_s\":%.0f,"
      "\"pull_ids_per_s\":%.0f,\"push_ids_per_s\":%.0f,\"assign_ids_per_s\":%.0f,\"batch\":%zu}\n",
      shard.size(), kDim, optimizer.c_str(), config::Table::ValueType_Name(value_type).c_str(),
      presized_bytes, grown_bytes, presized_ratio, grown_ratio, num_rows / insert_s,
      kRounds * kBatch / pull_s, kRounds * kBatch / push_s, kRounds * kBatch / assign_s, kBatch);
  return 0;
}

}  // namespace
}  // namespace server
}  // namespace ps

int main(int argc, char** argv) {
  long long rows = 1000000;
  std::string optimizer = "adagrad";
  ps::config::Table::ValueType value_type = ps::config::Table::FP32;
  bool ok = true;
  for (int i = 1; i < argc && ok; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--optimizer=", 0) == 0) {
      optimizer = arg.substr(12);
    } else if (arg.rfind("--value_type=", 0) == 0) {
      ok = ps::config::Table::ValueType_Parse(arg.substr(13), &value_type);
    } else {
      rows = std::atoll(arg.c_str());
      ok = rows >= 1;
    }
  }
  if (!ok) {
    std::fprintf(stderr,
                 "usage: %s [--optimizer=NAME] [--value_type=FP32|FP16|BF16] [ROWS > 0]\n",
                 argv[0]);
    return 2;
  }
  return ps::server::Main(static_cast<size_t>(rows), optimizer, value_type);
}

#include "server/memory_keeper.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "common/optimizer.h"
#include "proto/job.pb.h"

namespace ps {
namespace server {
namespace {

constexpr int64_t kMiB = 1 << 20;

// A job of two tables; `with` adds bounds to the first.
struct Job {
  explicit Job(const std::string& with = "") {
    for (const char* name : {"big", "small"}) {
      config::Table* table = job.add_tables();
      table->set_name(name);
      table->set_dim(16);
      table->mutable_optimizer()->set_type("adagrad");
    }
    config::Table* big = job.mutable_tables(0);
    if (with == "ttl_steps") big->mutable_eviction()->set_ttl_steps(100);
    if (with == "ttl_seconds") big->mutable_eviction()->set_ttl_seconds(10);
    if (with == "lfu") big->mutable_eviction()->set_policy(config::Eviction::LFU);
    if (with == "weight") big->set_memory_weight(3);
    if (with == "admission") big->mutable_admission()->set_min_count(2);
    job.mutable_cluster()->set_num_shards(8);
    for (const config::Table& t : job.tables()) {
      auto spec = TableSpec::Create(t, 1);
      REQUIRE(spec.ok());
      specs.push_back(std::move(spec).value());
    }
  }
  std::vector<const TableSpec*> Specs() const {
    std::vector<const TableSpec*> out;
    for (const auto& s : specs) out.push_back(s.get());
    return out;
  }
  config::Job job;
  std::vector<std::unique_ptr<TableSpec>> specs;
};

MemoryKeeper::Options Budget(int64_t mib, int64_t resident_mib = 50) {
  MemoryKeeper::Options options;
  options.budget_bytes = mib * kMiB;
  options.resident_bytes = [resident_mib] { return resident_mib * kMiB; };
  return options;
}

TEST_CASE("a budget below the fixed part is refused with the numbers", "[memory_keeper]") {
  Job job;
  auto keeper = MemoryKeeper::Create(job.job, job.Specs(), 8, Budget(57));
  REQUIRE(keeper.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string message(keeper.status().message());
  CHECK(absl::StrContains(message, "--memory_budget_mb=57"));
  CHECK(absl::StrContains(message, "50.0 MiB resident"));
  CHECK(absl::StrContains(message, "8 shard copies"));
  CHECK(absl::StrContains(message, "a budget of at least"));
  CHECK(MemoryKeeper::Create(job.job, job.Specs(), 8, Budget(200)).ok());
}

TEST_CASE("bounds that need a budget are refused without one, naming the table",
          "[memory_keeper]") {
  const std::string with = GENERATE(as<std::string>{}, "weight", "lfu");
  Job job(with);
  MemoryKeeper::Options none;
  auto keeper = MemoryKeeper::Create(job.job, job.Specs(), 8, none);
  REQUIRE(keeper.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(keeper.status().message(), "tables[0] \"big\""));
  CHECK(absl::StrContains(keeper.status().message(), "--memory_budget_mb"));
  // A TTL works without a budget.
  Job ttl("ttl_steps");
  auto kept = MemoryKeeper::Create(ttl.job, ttl.Specs(), 8, none);
  REQUIRE(kept.ok());
  CHECK((*kept)->active());
  CHECK((*kept)->MaxRows(8) == std::vector<size_t>{0, 0});
}

TEST_CASE("caps split the allowance by weight and copies, and fit it", "[memory_keeper]") {
  Job job("weight");
  auto keeper = MemoryKeeper::Create(job.job, job.Specs(), 8, Budget(1024));
  REQUIRE(keeper.ok());
  const int64_t allowance = (*keeper)->allowance_bytes();
  CHECK(allowance == 1024 * kMiB - 1024 * kMiB / 10 - 50 * kMiB);
  const std::vector<size_t> caps8 = (*keeper)->MaxRows(8);
  const std::vector<size_t> caps16 = (*keeper)->MaxRows(16);
  size_t bytes = 0;
  for (size_t t = 0; t < 2; ++t) bytes += 8 * TableShard::BytesForRows(*job.specs[t], caps8[t]);
  CHECK(bytes <= static_cast<size_t>(allowance));
  CHECK(bytes >= static_cast<size_t>(allowance) * 9 / 10);
  // Weight 3 against 1.
  CHECK(caps8[0] > 2 * caps8[1]);
  // Twice the copies, about half the rows each.
  CHECK(caps16[0] <= caps8[0] / 2 + 1);
  CHECK(caps16[0] >= caps8[0] / 3);
}

TEST_CASE("ticks follow the pushes' steps or the clock", "[memory_keeper]") {
  const std::string with = GENERATE(as<std::string>{}, "ttl_steps", "ttl_seconds");
  Job job(with);
  absl::Time now = absl::FromUnixSeconds(1000);
  MemoryKeeper::Options options;
  options.now = [&now] { return now; };
  auto keeper = MemoryKeeper::Create(job.job, job.Specs(), 8, options);
  REQUIRE(keeper.ok());
  if (with == "ttl_steps") {
    // ttl_steps 100: one tick a step.
    (*keeper)->NoteStep(250);
    (*keeper)->NoteStep(40);  // older: ignored
    // At once, before any sweep: the push's rows are stamped with its step.
    CHECK((*keeper)->use_ticks()[0].load() == 250);
    const std::vector<TableSweep> sweeps = (*keeper)->Sweeps();
    CHECK((*keeper)->use_ticks()[0].load() == 250);
    CHECK(sweeps[0].ttl_ticks == 100);
  } else {
    // ttl_seconds 10: 160 ticks a TTL, 16 a second.
    now += absl::Seconds(25);
    const std::vector<TableSweep> sweeps = (*keeper)->Sweeps();
    CHECK((*keeper)->use_ticks()[0].load() == 400);
    CHECK(sweeps[0].ttl_ticks == 160);
  }
  // The other table has no TTL.
  CHECK((*keeper)->Sweeps()[1].ttl_ticks == 0);
}

TEST_CASE("a sweep evicts expired rows of primaries on a fake clock and tells the copies",
          "[memory_keeper]") {
  Job job("ttl_seconds");
  absl::Time now = absl::FromUnixSeconds(1000);
  MemoryKeeper::Options options;
  options.now = [&now] { return now; };
  auto keeper = MemoryKeeper::Create(job.job, job.Specs(), 8, options);
  REQUIRE(keeper.ok());
  config::Optimizer sgd;
  auto dense = Optimizer::Create(sgd);
  REQUIRE(dense.ok());
  ShardConfig config;
  config.tables = &job.specs;
  config.dense_optimizer = dense->get();
  config.use_ticks = (*keeper)->use_ticks();
  Shard primary(0, config, {}), copy(0, config, {});
  std::vector<rpc::ShardRecord> records;
  primary.SetRecordSink([&records](RecordOut&& out) { records.push_back(out.Whole()); });
  const std::vector<float> grads(16 * 3, 0.25f);
  std::vector<float> out(16 * 3);
  // Rows 1-3 used at second 0, row 4 at second 8.
  (*keeper)->SweepOnce([&](absl::FunctionRef<void(Shard*)> fn) { fn(&primary); });
  primary.Push(0, 1, 1, {1, 2, 3}, grads.data());
  primary.Push(1, 1, 2, {1, 2, 3}, grads.data());
  now += absl::Seconds(8);
  (*keeper)->SweepOnce([&](absl::FunctionRef<void(Shard*)> fn) { fn(&primary); });
  primary.Pull(0, {4}, out.data());
  // At second 12 only the rows of table "big" used at second 0 are older than its 10 s TTL.
  now += absl::Seconds(4);
  const SweepResult result =
      (*keeper)->SweepOnce([&](absl::FunctionRef<void(Shard*)> fn) { fn(&primary); });
  CHECK(result.evicted == 3);
  std::vector<uint64_t> rows(2), bytes(2);
  primary.AddSizes(&rows, &bytes);
  CHECK(rows == std::vector<uint64_t>{1, 3});
  // The copy, applying the primary's records, ends with the same rows.
  for (const rpc::ShardRecord& record : records) REQUIRE(copy.ApplyRecord(record).ok());
  std::vector<uint64_t> copy_rows(2), copy_bytes(2);
  copy.AddSizes(&copy_rows, &copy_bytes);
  CHECK(copy_rows == std::vector<uint64_t>{0, 3});  // row 4 was only pulled: nothing to copy
  REQUIRE(records.back().has_evict());
  CHECK(records.back().evict().keys().size() == 3 * sizeof(uint64_t));
  std::vector<TableShard::Counters> counters(2);
  primary.AddCounters(&counters);
  CHECK(counters[0].evicted_ttl == 3);
}

}  // namespace
}  // namespace server
}  // namespace ps

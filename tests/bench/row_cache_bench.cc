// row_cache_bench: what the worker's row cache (worker/row_cache.h) costs per key, on the host.
// Draws --steps batches of --keys_per_step Zipf(--zipf_s) ids over --ids values (seed 1; each id
// mixed into a 64-bit key, as hashed feature values are), keeps each batch's distinct keys, then
// for each --max_rows runs every step through one table's cache as a worker does: Lookup of the
// distinct keys, then Admit of the misses (their rows made up). Prints one JSON line per cache
// size: the hit rate, and the median over --repeats passes of the nanoseconds per distinct key
// of Lookup and of Admit (each pass on a new cache).
//
//   bazel run -c opt //tests/bench:row_cache_bench -- --max_rows=2000,20000,200000
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/json_line.h"
#include "tests/testing/measure.h"
#include "worker/data/zipf_sampler.h"
#include "worker/row_cache.h"

ABSL_FLAG(uint64_t, ids, 1000000, "distinct ids the Zipf draws range over");
ABSL_FLAG(double, zipf_s, 1.05, "the Zipf exponent");
ABSL_FLAG(int, keys_per_step, 13312, "ids drawn per step (the quickstart's 512 x 26)");
ABSL_FLAG(int, steps, 400, "steps per pass");
ABSL_FLAG(std::string, max_rows, "2000,20000,200000", "cache sizes, comma-separated");
ABSL_FLAG(int, refresh_steps, 2, "training.row_cache.refresh_steps");
ABSL_FLAG(int, min_pulls, 1, "training.row_cache.min_pulls");
ABSL_FLAG(int, dim, 16, "floats a row");
ABSL_FLAG(int, repeats, 5, "passes per cache size (the median counts)");

namespace ps {
namespace {

void Die(const std::string& what) {
  std::fprintf(stderr, "row_cache_bench: %s\n", what.c_str());
  std::exit(1);
}

// splitmix64's finaliser: spreads small ids over 64 bits.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<std::vector<uint64_t>> DrawSteps() {
  absl::StatusOr<worker::ZipfSampler> zipf =
      worker::ZipfSampler::Create(absl::GetFlag(FLAGS_ids), absl::GetFlag(FLAGS_zipf_s));
  if (!zipf.ok()) Die(zipf.status().ToString());
  std::mt19937_64 rng(1);
  std::vector<std::vector<uint64_t>> steps(absl::GetFlag(FLAGS_steps));
  absl::flat_hash_set<uint64_t> seen;
  for (std::vector<uint64_t>& keys : steps) {
    seen.clear();
    for (int i = 0; i < absl::GetFlag(FLAGS_keys_per_step); ++i) {
      const uint64_t key = Mix(zipf->Draw(rng));
      if (seen.insert(key).second) keys.push_back(key);
    }
  }
  return steps;
}

struct Pass {
  double lookup_ns = 0;  // per distinct key
  double admit_ns = 0;   // per distinct key
  double hit_rate = 0;
};

Pass RunPass(const std::vector<std::vector<uint64_t>>& steps, uint64_t max_rows) {
  worker::RowCache::Options options;
  options.max_rows = max_rows;
  options.refresh_steps = absl::GetFlag(FLAGS_refresh_steps);
  options.min_pulls = static_cast<uint32_t>(absl::GetFlag(FLAGS_min_pulls));
  const int dim = absl::GetFlag(FLAGS_dim);
  options.dims = {dim};
  absl::StatusOr<std::unique_ptr<worker::RowCache>> cache = worker::RowCache::Create(options);
  if (!cache.ok()) Die(cache.status().ToString());
  std::vector<float> rows;
  std::vector<float> pulled;
  std::vector<uint32_t> misses;
  std::vector<uint64_t> miss_keys;
  absl::Duration lookup, admit;
  int64_t keys = 0;
  for (size_t step = 0; step < steps.size(); ++step) {
    const std::vector<uint64_t>& batch = steps[step];
    rows.resize(batch.size() * dim);
    keys += static_cast<int64_t>(batch.size());
    const absl::Time t0 = absl::Now();
    (*cache)->Lookup(0, static_cast<int64_t>(step), batch, rows.data(), &misses);
    const absl::Time t1 = absl::Now();
    miss_keys.clear();
    for (uint32_t m : misses) miss_keys.push_back(batch[m]);
    pulled.assign(miss_keys.size() * dim, 0.5f);
    const absl::Time t2 = absl::Now();
    (*cache)->Admit(0, static_cast<int64_t>(step), miss_keys, pulled.data());
    admit += absl::Now() - t2;
    lookup += t1 - t0;
  }
  Pass pass;
  pass.lookup_ns = absl::ToDoubleNanoseconds(lookup) / static_cast<double>(keys);
  pass.admit_ns = absl::ToDoubleNanoseconds(admit) / static_cast<double>(keys);
  pass.hit_rate = (*cache)->stats().hit_rate();
  return pass;
}

int Main() {
  const std::vector<std::vector<uint64_t>> steps = DrawSteps();
  size_t distinct = 0;
  for (const auto& s : steps) distinct += s.size();
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_max_rows), ',')) {
    uint64_t max_rows = 0;
    if (!absl::SimpleAtoi(part, &max_rows)) Die("--max_rows: not a number: " + std::string(part));
    std::vector<double> lookup, admit;
    double hit_rate = 0;
    for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
      const Pass pass = RunPass(steps, max_rows);
      lookup.push_back(pass.lookup_ns);
      admit.push_back(pass.admit_ns);
      hit_rate = pass.hit_rate;
    }
    std::printf(
        "{\"bench\":\"row_cache\",\"max_rows\":%llu,\"min_pulls\":%d,\"refresh_steps\":%d,"
        "\"distinct_per_step\":%s,\"hit_rate\":%s,\"lookup_ns_per_key\":%s,"
        "\"admit_ns_per_key\":%s}\n",
        static_cast<unsigned long long>(max_rows), absl::GetFlag(FLAGS_min_pulls),
        absl::GetFlag(FLAGS_refresh_steps),
        testing::JsonNumber(static_cast<double>(distinct) / steps.size()).c_str(),
        testing::JsonNumber(hit_rate).c_str(),
        testing::JsonNumber(testing::Percentile(lookup, 0.5)).c_str(),
        testing::JsonNumber(testing::Percentile(admit, 0.5)).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ps::Main();
}

#include "worker/progress_report.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace worker {
namespace {

std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST_CASE("ProgressReporter reports the first step, each interval and the last, with the "
          "interval's means",
          "[worker][progress_report]") {
  auto dir = testing::ScopedTempDir::Create("progress_report");
  REQUIRE(dir.ok());
  char* buffer = nullptr;
  size_t size = 0;
  FILE* progress = open_memstream(&buffer, &size);
  REQUIRE(progress != nullptr);
  metrics::Registry registry;
  ProgressReporter::Options options;
  options.progress = progress;
  options.interval = absl::Seconds(10);
  options.rank = 3;
  options.metrics_path = absl::StrCat((*dir)->path(), "/metrics.jsonl");
  options.registry = &registry;
  const absl::Time start = absl::FromUnixSeconds(1000);
  auto reporter = ProgressReporter::Create(options, start);
  REQUIRE(reporter.ok());
  ProgressReporter& r = **reporter;
  REQUIRE(r.metrics_file() != nullptr);

  const std::vector<float> probs = {0.9f, 0.1f};
  const std::vector<float> labels = {1.0f, 0.0f};
  // Each step: 1 ms reading, 4 ms pulling, 2 ms pushing, 0.5 ms other, in the breakdown.
  StepTimes times;
  times[StepPart::kRead] = absl::Milliseconds(1);
  times[StepPart::kPull] = absl::Milliseconds(4);
  times[StepPart::kPush] = absl::Milliseconds(2);
  times[StepPart::kOther] = absl::Microseconds(500);
  times.total = absl::Microseconds(7500);
  // Step 0, reported at once: 2 samples in 2 s.
  r.RecordPull(4.0);
  r.RecordPush(2.0);
  r.RecordStep(times);
  r.StepDone(0, 2, 0.5f, probs, labels);
  r.MaybeReport(0, 2, 5, false, start + absl::Seconds(2));
  // Steps 1 and 2 within the interval: no line; step 3 the last.
  r.RecordPull(1.0);
  r.RecordPush(3.0);
  r.RecordStep(times);
  r.StepDone(1, 2, 0.25f, probs, labels);
  r.MaybeReport(1, 2, 5, false, start + absl::Seconds(3));
  r.RecordPull(3.0);
  r.RecordPush(1.0);
  r.RecordStep(times);
  r.StepDone(2, 0, 0.0f, {}, {});  // an empty batch: no loss
  r.MaybeReport(2, 0, 5, false, start + absl::Seconds(4));
  r.RecordPull(2.0);
  r.RecordPush(2.0);
  r.RecordStep(times);
  StepTimes tail;  // after the last step: counted in the run's time, not in a step's
  tail[StepPart::kPush] = absl::Milliseconds(3);
  tail.total = absl::Milliseconds(3);
  r.RecordTail(tail);
  r.StepDone(3, 2, 0.75f, probs, labels);
  r.MaybeReport(3, 2, 4, true, start + absl::Seconds(6));
  r.CloseMetrics();
  CHECK(r.metrics_file() == nullptr);
  std::fclose(progress);
  const std::string text(buffer, size);
  std::free(buffer);

  CHECK(text ==
        "worker 3: step 1/5  batch 2  1 samples/s  loss 0.5000  auc 1.0000  pull 4.00 ms  push "
        "2.00 ms  per step: read 1.00 pull 4.00 compute 0.00 push 2.00 allreduce 0.00 wait 0.00 "
        "other 0.50 = 7.50 ms\n"
        "worker 3: step 4/4  batch 2  1 samples/s  loss 0.5000  auc 1.0000  pull 2.00 ms  push "
        "2.00 ms  per step: read 1.00 pull 4.00 compute 0.00 push 2.00 allreduce 0.00 wait 0.00 "
        "other 0.50 = 7.50 ms\n");
  const std::vector<std::string> json = ReadLines(options.metrics_path);
  REQUIRE(json.size() == 2);
  CHECK(json[0] ==
        "{\"rank\":3,\"step\":1,\"batch\":2,\"seconds\":2.000,\"samples_per_s\":1.0,"
        "\"loss\":0.500000,\"auc\":1.000000,\"pull_ms\":4.000,\"push_ms\":2.000,"
        "\"step_ms\":{\"read\":1.000,\"pull\":4.000,\"copy\":null,\"compute\":0.000,"
        "\"push\":2.000,\"allreduce\":0.000,\"wait\":0.000,\"other\":0.500,"
        "\"total\":7.500}}");
  CHECK(absl::StartsWith(json[1], "{\"rank\":3,\"step\":4,\"batch\":2,\"seconds\":6.000,"));
  CHECK(r.steps() == 4);
  CHECK(r.samples() == 6);
  CHECK(r.FinalLoss() == 0.5);
  CHECK(r.mean_pull_ms() == 2.5);
  CHECK(r.mean_push_ms() == 2.0);
  CHECK(r.timed_steps() == 4);
  CHECK(r.run_times()[StepPart::kPush] == absl::Milliseconds(11));
  CHECK(r.run_times().total == absl::Milliseconds(33));
  const std::string series = registry.Render();
  CHECK(absl::StrContains(series, "ps_worker_step{rank=\"3\"} 4"));
  CHECK(absl::StrContains(series, "ps_worker_samples_total{rank=\"3\"} 6"));
  CHECK(
      absl::StrContains(series, "ps_worker_step_seconds_total{rank=\"3\",part=\"push\"} 0.011\n"));
  CHECK(
      absl::StrContains(series, "ps_worker_step_seconds_total{rank=\"3\",part=\"read\"} 0.004\n"));
  CHECK(!absl::StrContains(series, "part=\"copy\""));  // not measured: no series
}

TEST_CASE("ProgressReporter's final loss covers the batches after the last report",
          "[worker][progress_report]") {
  ProgressReporter::Options options;
  options.progress = nullptr;
  const absl::Time start = absl::FromUnixSeconds(0);
  auto reporter = ProgressReporter::Create(options, start);
  REQUIRE(reporter.ok());
  CHECK((*reporter)->metrics_file() == nullptr);
  (*reporter)->StepDone(0, 1, 2.0f, std::vector<float>{0.5f}, std::vector<float>{1.0f});
  (*reporter)->MaybeReport(0, 1, 9, false, start + absl::Seconds(1));
  (*reporter)->StepDone(1, 1, 1.0f, std::vector<float>{0.5f}, std::vector<float>{1.0f});
  (*reporter)->MaybeReport(1, 1, 9, false, start + absl::Seconds(2));
  CHECK((*reporter)->FinalLoss() == 1.0);
}

TEST_CASE("The step breakdown shows copy only where it is measured", "[worker][progress_report]") {
  StepTimes times;
  times[StepPart::kCopy] = absl::Milliseconds(2);
  times[StepPart::kCompute] = absl::Milliseconds(4);
  times.total = absl::Milliseconds(6);
  CHECK(StepBreakdownText(times, 2, true) ==
        "per step: read 0.00 pull 0.00 copy 1.00 compute 2.00 push 0.00 allreduce 0.00 wait 0.00 "
        "other 0.00 = 3.00 ms");
  CHECK(StepBreakdownText(times, 2, false) ==
        "per step: read 0.00 pull 0.00 compute 2.00 push 0.00 allreduce 0.00 wait 0.00 other 0.00 "
        "= 3.00 ms");
  CHECK(StepBreakdownJson(times, 2, true) ==
        "{\"read\":0.000,\"pull\":0.000,\"copy\":1.000,\"compute\":2.000,\"push\":0.000,"
        "\"allreduce\":0.000,\"wait\":0.000,\"other\":0.000,\"total\":3.000}");
  CHECK(StepBreakdownJson(times, 0, false) ==
        "{\"read\":0.000,\"pull\":0.000,\"copy\":null,\"compute\":0.000,\"push\":0.000,"
        "\"allreduce\":0.000,\"wait\":0.000,\"other\":0.000,\"total\":0.000}");
}

TEST_CASE("With a row cache, the lines and the JSON give the interval's hit rate",
          "[worker][progress_report][row_cache]") {
  auto dir = testing::ScopedTempDir::Create("progress_report_cache");
  REQUIRE(dir.ok());
  RowCache::Options cache_options;
  cache_options.max_rows = 10;
  cache_options.dims = {1};
  auto cache = RowCache::Create(cache_options);
  REQUIRE(cache.ok());
  char* buffer = nullptr;
  size_t size = 0;
  FILE* progress = open_memstream(&buffer, &size);
  REQUIRE(progress != nullptr);
  ProgressReporter::Options options;
  options.progress = progress;
  options.metrics_path = absl::StrCat((*dir)->path(), "/metrics.jsonl");
  options.row_cache = cache->get();
  const absl::Time start = absl::FromUnixSeconds(0);
  auto reporter = ProgressReporter::Create(options, start);
  REQUIRE(reporter.ok());
  const std::vector<uint64_t> keys = {1, 2, 3, 4};
  const std::vector<float> rows = {1, 2, 3, 4};
  std::vector<float> out(4);
  std::vector<uint32_t> misses;
  // Step 0: 4 lookups, no hit; step 1: 3 hits of 4.
  (*cache)->Lookup(0, 0, keys, out.data(), &misses);
  (*cache)->Admit(0, 0, keys, rows.data());
  (*reporter)->StepDone(0, 1, 1.0f, std::vector<float>{0.5f}, std::vector<float>{1.0f});
  (*reporter)->MaybeReport(0, 1, 2, false, start + absl::Seconds(1));
  const std::vector<uint64_t> next = {1, 2, 3, 9};
  (*cache)->Lookup(0, 1, next, out.data(), &misses);
  (*reporter)->StepDone(1, 1, 1.0f, std::vector<float>{0.5f}, std::vector<float>{1.0f});
  (*reporter)->MaybeReport(1, 1, 2, true, start + absl::Seconds(2));
  (*reporter)->CloseMetrics();
  std::fclose(progress);
  const std::string text(buffer, size);
  std::free(buffer);
  CHECK(absl::StrContains(text, "cache hits 0.0%"));
  CHECK(absl::StrContains(text, "cache hits 75.0%"));
  const std::vector<std::string> lines = ReadLines(options.metrics_path);
  REQUIRE(lines.size() == 2);
  CHECK(absl::StrContains(lines[0], "\"row_cache_hit_rate\":0.0000"));
  CHECK(absl::StrContains(lines[1], "\"row_cache_hit_rate\":0.7500"));
}

TEST_CASE("ProgressReporter refuses a metrics file it cannot open", "[worker][progress_report]") {
  ProgressReporter::Options options;
  options.metrics_path = "/nonexistent/dir/metrics.jsonl";
  CHECK(ProgressReporter::Create(options, absl::Now()).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace worker
}  // namespace ps

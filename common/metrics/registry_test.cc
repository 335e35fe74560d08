#include "common/metrics/registry.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace ps {
namespace metrics {
namespace {

// Runs Prometheus's own parser over `text` (`promtool check metrics`, from Debian's prometheus
// package): its exit status and what it said.
std::pair<int, std::string> PromtoolCheck(const std::string& text) {
  char path[] = "/tmp/registry_test.XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  const std::string command = std::string("promtool check metrics < ") + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[256];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  unlink(path);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST_CASE("A counter renders the sum of a known sequence of increments", "[registry]") {
  Registry registry;
  Counter* pulls = registry.GetCounter("ps_test_keys_total", "Keys.", {{"table", "user"}});
  Counter* pushes = registry.GetCounter("ps_test_keys_total", "Keys.", {{"table", "item"}});
  CHECK(registry.GetCounter("ps_test_keys_total", "Keys.", {{"table", "user"}}) == pulls);
  for (uint64_t n : {1, 2, 3, 1000}) pulls->Increment(n);
  pushes->Increment();
  CHECK(pulls->Value() == 1006);
  const std::string text = registry.Render();
  CHECK(Contains(text, "# HELP ps_test_keys_total Keys.\n# TYPE ps_test_keys_total counter\n"));
  CHECK(Contains(text, "ps_test_keys_total{table=\"user\"} 1006\n"));
  CHECK(Contains(text, "ps_test_keys_total{table=\"item\"} 1\n"));
}

TEST_CASE("A counter of seconds adds fractional amounts and never goes down", "[registry]") {
  Registry registry;
  Counter* seconds =
      registry.GetCounter("ps_test_seconds_total", "Seconds.", {{"rank", "0"}, {"part", "read"}});
  seconds->Add(0.25);
  seconds->Add(1.5);
  seconds->Add(-1.0);  // ignored
  seconds->Increment();
  CHECK(seconds->Value() == 2.75);
  CHECK(Contains(registry.Render(), "ps_test_seconds_total{rank=\"0\",part=\"read\"} 2.75\n"));
}

TEST_CASE("Counters and gauges updated from many threads lose nothing", "[registry]") {
  Registry registry;
  Counter* counter = registry.GetCounter("ps_test_events_total", "Events.");
  Gauge* gauge = registry.GetGauge("ps_test_level", "Level.");
  Histogram* histogram = registry.GetHistogram("ps_test_seconds", "Time.", {1, 2});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        counter->Increment();
        gauge->Add(0.5);
        histogram->Observe(1.5);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(counter->Value() == 400000);
  CHECK(gauge->Value() == 200000.0);  // exact: every partial sum is a multiple of 0.5 below 2^53
  CHECK(histogram->Count() == 400000);
  CHECK(histogram->Sum() == 600000.0);
}

TEST_CASE("A gauge renders its last value; Add goes both ways", "[registry]") {
  Registry registry;
  Gauge* gauge = registry.GetGauge("ps_test_rows", "Rows.");
  gauge->Set(10);
  gauge->Add(-2.5);
  gauge->Add(0.25);
  CHECK(gauge->Value() == 7.75);
  CHECK(Contains(registry.Render(), "ps_test_rows 7.75\n"));
  gauge->Set(-3);
  CHECK(Contains(registry.Render(), "ps_test_rows -3\n"));
  gauge->Set(NAN);
  CHECK(Contains(registry.Render(), "ps_test_rows NaN\n"));
}

TEST_CASE("A histogram counts a known sequence into cumulative buckets", "[registry]") {
  Registry registry;
  Histogram* h = registry.GetHistogram("ps_test_duration_seconds", "Durations.", {0.1, 1, 10},
                                       {{"method", "Pull"}});
  // Prometheus's buckets are `le`: a value equal to a bound falls in that bound's bucket.
  for (double v : {0.05, 0.1, 0.5, 1.0, 2.0, 9.0, 11.0, 1e9}) h->Observe(v);
  CHECK(h->BucketCounts() == std::vector<uint64_t>{2, 2, 2, 2});
  CHECK(h->Count() == 8);
  CHECK(h->Sum() == Approx(0.05 + 0.1 + 0.5 + 1.0 + 2.0 + 9.0 + 11.0 + 1e9));
  const std::string text = registry.Render();
  CHECK(Contains(text, "# TYPE ps_test_duration_seconds histogram\n"));
  CHECK(Contains(text, "ps_test_duration_seconds_bucket{method=\"Pull\",le=\"0.1\"} 2\n"));
  CHECK(Contains(text, "ps_test_duration_seconds_bucket{method=\"Pull\",le=\"1\"} 4\n"));
  CHECK(Contains(text, "ps_test_duration_seconds_bucket{method=\"Pull\",le=\"10\"} 6\n"));
  CHECK(Contains(text, "ps_test_duration_seconds_bucket{method=\"Pull\",le=\"+Inf\"} 8\n"));
  CHECK(Contains(text, "ps_test_duration_seconds_count{method=\"Pull\"} 8\n"));
  CHECK(Contains(text, "ps_test_duration_seconds_sum{method=\"Pull\"} 1000000023.65"));
}

TEST_CASE("Histogram bounds: exponential, and a NaN observation is counted in +Inf only",
          "[registry]") {
  CHECK(ExponentialBuckets(1, 2, 4) == std::vector<double>{1, 2, 4, 8});
  const std::vector<double> latency = LatencyBuckets();
  CHECK(latency.front() == Approx(50e-6));
  CHECK(latency.back() > 20.0);
  Histogram h({1});
  h.Observe(NAN);
  CHECK(h.BucketCounts() == std::vector<uint64_t>{0, 1});
  CHECK(h.Sum() == 0);
}

TEST_CASE("Collectors' samples are rendered with the made metrics, families sorted",
          "[registry]") {
  Registry registry;
  registry.GetGauge("ps_b_gauge", "B.")->Set(2);
  int rows = 5;
  registry.AddCollector([&rows](Sink& sink) {
    sink.Gauge("ps_a_rows", "Rows by table.", {{"table", "user"}}, rows);
    sink.Gauge("ps_a_rows", "Rows by table.", {{"table", "item"}}, rows * 2);
    sink.Counter("ps_c_total", "C.", {}, 7);
  });
  rows = 6;  // read at scrape time
  const std::string text = registry.Render();
  CHECK(text ==
        "# HELP ps_a_rows Rows by table.\n"
        "# TYPE ps_a_rows gauge\n"
        "ps_a_rows{table=\"user\"} 6\n"
        "ps_a_rows{table=\"item\"} 12\n"
        "# HELP ps_b_gauge B.\n"
        "# TYPE ps_b_gauge gauge\n"
        "ps_b_gauge 2\n"
        "# HELP ps_c_total C.\n"
        "# TYPE ps_c_total counter\n"
        "ps_c_total 7\n");
}

TEST_CASE("Label values and help text are escaped", "[registry]") {
  Registry registry;
  registry.GetCounter("ps_test_total", "Help with \\ and\nnewline.", {{"path", "a\"b\\c\nd"}})
      ->Increment();
  const std::string text = registry.Render();
  CHECK(Contains(text, "# HELP ps_test_total Help with \\\\ and\\nnewline.\n"));
  CHECK(Contains(text, "ps_test_total{path=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST_CASE("Metric and label names are checked", "[registry]") {
  CHECK(IsValidMetricName("ps_server_rows"));
  CHECK(IsValidMetricName("ps:rate5m"));
  CHECK_FALSE(IsValidMetricName("0ps"));
  CHECK_FALSE(IsValidMetricName("ps-rows"));
  CHECK_FALSE(IsValidMetricName(""));
  CHECK(IsValidLabelName("table"));
  CHECK_FALSE(IsValidLabelName("a:b"));
}

TEST_CASE("promtool accepts the text of every metric type, with random updates", "[registry]") {
  std::mt19937_64 rng(15);
  std::uniform_real_distribution<double> seconds(0, 3);
  Registry registry;
  Histogram* h = registry.GetHistogram("ps_test_rpc_duration_seconds", "RPC time.",
                                       LatencyBuckets(), {{"method", "Push"}});
  Counter* c = registry.GetCounter("ps_test_rpcs_total", "RPCs.", {{"code", "OK"}});
  Gauge* g = registry.GetGauge("ps_test_step", "Step.", {{"rank", "0"}});
  registry.GetCounter("ps_test_unused_total", "Never incremented.");
  registry.AddCollector([](Sink& sink) {
    sink.Gauge("ps_test_memory_bytes", "Bytes.", {{"table", "t\"1"}}, 1e12);
    sink.Counter("ps_test_dropped_total", "Dropped.", {}, 3);
  });
  for (int i = 0; i < 1000; ++i) {
    h->Observe(seconds(rng));
    c->Increment(rng() % 5);
    g->Set(i);
  }
  const auto [status, output] = PromtoolCheck(registry.Render());
  INFO(output);
  CHECK(status == 0);
  // promtool fails on malformed text, so the check can fail.
  const auto [bad_status, bad_output] = PromtoolCheck("ps_bad{le=} 1\n");
  CHECK(bad_status != 0);
}

}  // namespace
}  // namespace metrics
}  // namespace ps

// Prometheus metrics: counters, gauges and histograms with fixed buckets, kept in a Registry that
// renders them in Prometheus's text exposition format (version 0.0.4).
//
// Metrics are made once, at start-up or on the first use of a label value, and then updated on
// the data path with relaxed atomic operations: no lock and no allocation per update. Values that
// already exist elsewhere (rows held, a shard map's version) are read at scrape time by a
// collector instead of being copied into a gauge on every change.
//
// Names follow Prometheus's conventions: a `ps_` prefix, base units (seconds, bytes), `_total` on
// counters. The Registry checks names and labels when a metric is made and crashes on a malformed
// one: they come from the program, never from input.
#ifndef PS_COMMON_METRICS_REGISTRY_H_
#define PS_COMMON_METRICS_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {
namespace metrics {

// Label names and values of one series, in the order given.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A Counter only goes up: a count, or an amount such as seconds spent (Prometheus counters are
// floating-point). Thread-safe.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Increment(uint64_t n = 1) { count_.fetch_add(n, std::memory_order_relaxed); }
  // Adds `amount`, which must be >= 0 (a negative one is ignored: a counter never goes down).
  void Add(double amount);
  // What Increment and Add added: exact for counts up to 2^53.
  double Value() const {
    return static_cast<double>(count_.load(std::memory_order_relaxed)) +
           amount_.load(std::memory_order_relaxed);
  }

 private:
  // Counts stay on one fetch_add, as on the servers' request paths; amounts need a CAS loop.
  std::atomic<uint64_t> count_{0};
  std::atomic<double> amount_{0};
};

// A Gauge is a value that goes up and down. Thread-safe.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A Histogram counts observations into buckets with fixed upper bounds, and keeps their sum.
// Thread-safe. A scrape concurrent with observations may see a sum and counts that disagree by
// the observations in flight, as every Prometheus client allows.
class Histogram {
 public:
  // `upper_bounds`: strictly increasing and finite; the +Inf bucket is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` in the first bucket whose bound is >= value (Prometheus's `le`), and adds it to
  // the sum. NaN is counted in +Inf only, and not summed.
  void Observe(double value);

  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Observations per bucket (not cumulative), the last one being +Inf's.
  std::vector<uint64_t> BucketCounts() const;
  uint64_t Count() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  const std::vector<double> upper_bounds_;
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

// `count` bounds from `start`, each `factor` times the last: ExponentialBuckets(1e-4, 2, 18) goes
// from 100 µs to 13 s.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Bounds for request latencies in seconds: 50 µs to about 26 s, doubling.
std::vector<double> LatencyBuckets();

// What a collector emits at scrape time: samples of values owned elsewhere.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void Counter(const std::string& name, const std::string& help, const Labels& labels,
                       double value) = 0;
  virtual void Gauge(const std::string& name, const std::string& help, const Labels& labels,
                     double value) = 0;
};

// A Registry owns a process's metrics and renders them. Thread-safe; the metrics it hands out
// live as long as it does.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The metric of family `name` with `labels`, made on the first call; a later call with the same
  // name and labels returns the same one (its help is that of the first). Takes a lock and may
  // allocate: keep the pointer, do not call it per update. Crashes on a malformed name or label
  // name, or when `name` was made as another type (or, for histograms, other bounds).
  Counter* GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& upper_bounds, const Labels& labels = {});

  // Calls `collect` at every scrape (under the registry's render lock, so one collector never
  // runs twice at once), for values read from their owners. It must not call the Registry.
  void AddCollector(std::function<void(Sink&)> collect);

  // Every metric, as Prometheus's text format: families sorted by name, each with its HELP and
  // TYPE lines once, then its series in the order they were made (a collector's in its order).
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    Labels labels;
    std::unique_ptr<metrics::Counter> counter;
    std::unique_ptr<metrics::Gauge> gauge;
    std::unique_ptr<metrics::Histogram> histogram;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> upper_bounds;  // histograms
    std::vector<std::unique_ptr<Series>> series;
  };

  Series* GetSeries(const std::string& name, const std::string& help, Type type,
                    const Labels& labels, const std::vector<double>* upper_bounds);

  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(Sink&)>> collectors_ ABSL_GUARDED_BY(mu_);
};

// Whether `name` is a valid metric or label name ([a-zA-Z_:][a-zA-Z0-9_:]*; no colon for labels).
bool IsValidMetricName(const std::string& name);
bool IsValidLabelName(const std::string& name);

}  // namespace metrics
}  // namespace ps

#endif  // PS_COMMON_METRICS_REGISTRY_H_

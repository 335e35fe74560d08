#include "common/metrics/registry.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace metrics {
namespace {

void AddTo(std::atomic<double>* target, double delta) {
  double old = target->load(std::memory_order_relaxed);
  while (!target->compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
  }
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "metrics: %s\n", message.c_str());
  std::abort();
}

// A sample value as Prometheus writes it: integers without a fraction, +Inf, -Inf, NaN.
std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrFormat("%.0f", value);
  }
  // The shortest of %.15g and %.17g that reads back as the same double.
  const std::string short_form = absl::StrFormat("%.15g", value);
  if (std::strtod(short_form.c_str(), nullptr) == value) return short_form;
  return absl::StrFormat("%.17g", value);
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (const char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `{a="1",b="2"}`, with `extra` (e.g. le) last; empty for no labels.
std::string FormatLabels(const Labels& labels, const std::pair<std::string, std::string>* extra) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::pair<std::string, std::string>& label) {
    absl::StrAppend(&out, first ? "" : ",", label.first, "=\"", EscapeLabelValue(label.second),
                    "\"");
    first = false;
  };
  for (const auto& label : labels) add(label);
  if (extra != nullptr) add(*extra);
  out += "}";
  return out;
}

void CheckLabels(const std::string& name, const Labels& labels) {
  for (const auto& [label, value] : labels) {
    if (!IsValidLabelName(label) || label.rfind("__", 0) == 0 || label == "le") {
      Die(absl::StrCat("metric ", name, ": invalid label name \"", label, "\""));
    }
  }
}

const char* TypeName(int type) {
  switch (type) {
    case 0:
      return "counter";
    case 1:
      return "gauge";
    default:
      return "histogram";
  }
}

// The samples collectors emitted in one scrape, by family.
class CollectedSink final : public Sink {
 public:
  struct Family {
    bool counter;
    std::string help;
    std::vector<std::pair<Labels, double>> samples;
  };

  void Counter(const std::string& name, const std::string& help, const Labels& labels,
               double value) override {
    Add(name, help, labels, value, /*counter=*/true);
  }
  void Gauge(const std::string& name, const std::string& help, const Labels& labels,
             double value) override {
    Add(name, help, labels, value, /*counter=*/false);
  }

  std::map<std::string, Family> families;

 private:
  void Add(const std::string& name, const std::string& help, const Labels& labels, double value,
           bool counter) {
    if (!IsValidMetricName(name)) Die(absl::StrCat("invalid metric name \"", name, "\""));
    CheckLabels(name, labels);
    auto [it, inserted] = families.try_emplace(name);
    if (inserted) {
      it->second.counter = counter;
      it->second.help = help;
    } else if (it->second.counter != counter) {
      Die(absl::StrCat("metric ", name, " collected both as a counter and as a gauge"));
    }
    it->second.samples.emplace_back(labels, value);
  }
};

}  // namespace

void Counter::Add(double amount) {
  if (amount > 0) AddTo(&amount_, amount);
}

void Gauge::Add(double delta) { AddTo(&value_, delta); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    if (!std::isfinite(upper_bounds_[i]) || (i > 0 && upper_bounds_[i] <= upper_bounds_[i - 1])) {
      Die("histogram bounds must be finite and strictly increasing");
    }
  }
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double value) {
  // Few buckets (about 20): a linear scan beats a binary search's branches.
  size_t bucket = 0;
  if (std::isnan(value)) {
    bucket = upper_bounds_.size();
  } else {
    while (bucket < upper_bounds_.size() && value > upper_bounds_[bucket]) ++bucket;
    AddTo(&sum_, value);
  }
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::BucketCounts() const {
  std::vector<uint64_t> counts(upper_bounds_.size() + 1);
  for (size_t i = 0; i < counts.size(); ++i) {
    counts[i] = counts_[i].load(std::memory_order_relaxed);
  }
  return counts;
}

uint64_t Histogram::Count() const {
  uint64_t count = 0;
  for (const uint64_t c : BucketCounts()) count += c;
  return count;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (start <= 0 || factor <= 1 || count < 1) Die("ExponentialBuckets: bad arguments");
  std::vector<double> bounds;
  bounds.reserve(count);
  double bound = start;
  for (int i = 0; i < count; ++i) {
    bounds.push_back(bound);
    bound *= factor;
  }
  return bounds;
}

std::vector<double> LatencyBuckets() { return ExponentialBuckets(50e-6, 2, 20); }

bool IsValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

bool IsValidLabelName(const std::string& name) {
  return IsValidMetricName(name) && name.find(':') == std::string::npos;
}

Registry::Series* Registry::GetSeries(const std::string& name, const std::string& help, Type type,
                                      const Labels& labels,
                                      const std::vector<double>* upper_bounds) {
  if (!IsValidMetricName(name)) Die(absl::StrCat("invalid metric name \"", name, "\""));
  CheckLabels(name, labels);
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = families_.try_emplace(name);
  Family& family = it->second;
  if (inserted) {
    family.type = type;
    family.help = help;
    if (upper_bounds != nullptr) family.upper_bounds = *upper_bounds;
  } else if (family.type != type) {
    Die(absl::StrCat("metric ", name, " made as a ", TypeName(static_cast<int>(family.type)),
                     " and as a ", TypeName(static_cast<int>(type))));
  } else if (upper_bounds != nullptr && family.upper_bounds != *upper_bounds) {
    Die(absl::StrCat("histogram ", name, " made with two sets of bounds"));
  }
  for (const auto& series : family.series) {
    if (series->labels == labels) return series.get();
  }
  auto series = std::make_unique<Series>();
  series->labels = labels;
  switch (type) {
    case Type::kCounter:
      series->counter = std::make_unique<metrics::Counter>();
      break;
    case Type::kGauge:
      series->gauge = std::make_unique<metrics::Gauge>();
      break;
    case Type::kHistogram:
      series->histogram = std::make_unique<metrics::Histogram>(family.upper_bounds);
      break;
  }
  family.series.push_back(std::move(series));
  return family.series.back().get();
}

Counter* Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  return GetSeries(name, help, Type::kCounter, labels, nullptr)->counter.get();
}

Gauge* Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  return GetSeries(name, help, Type::kGauge, labels, nullptr)->gauge.get();
}

Histogram* Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& upper_bounds, const Labels& labels) {
  return GetSeries(name, help, Type::kHistogram, labels, &upper_bounds)->histogram.get();
}

void Registry::AddCollector(std::function<void(Sink&)> collect) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::Render() const {
  absl::MutexLock lock(&mu_);
  CollectedSink collected;
  for (const auto& collect : collectors_) collect(collected);

  // One pass over the union of both sets of names, in order.
  std::map<std::string, int> names;
  for (const auto& [name, family] : families_) names[name] |= 1;
  for (const auto& [name, family] : collected.families) names[name] |= 2;

  std::string out;
  for (const auto& [name, sources] : names) {
    const auto made = families_.find(name);
    const auto from_collectors = collected.families.find(name);
    std::string type;
    std::string help;
    if (made != families_.end()) {
      type = TypeName(static_cast<int>(made->second.type));
      help = made->second.help;
    } else {
      type = from_collectors->second.counter ? "counter" : "gauge";
      help = from_collectors->second.help;
    }
    if (sources == 3 && (made->second.type == Type::kHistogram ||
                         (made->second.type == Type::kCounter) != from_collectors->second.counter)) {
      Die(absl::StrCat("metric ", name, " is made and collected as different types"));
    }
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ", type,
                    "\n");
    if (made != families_.end()) {
      for (const auto& series : made->second.series) {
        if (series->counter != nullptr) {
          absl::StrAppend(&out, name, FormatLabels(series->labels, nullptr), " ",
                          FormatValue(series->counter->Value()), "\n");
        } else if (series->gauge != nullptr) {
          absl::StrAppend(&out, name, FormatLabels(series->labels, nullptr), " ",
                          FormatValue(series->gauge->Value()), "\n");
        } else {
          const Histogram& h = *series->histogram;
          const std::vector<uint64_t> counts = h.BucketCounts();
          uint64_t cumulative = 0;
          for (size_t i = 0; i < counts.size(); ++i) {
            cumulative += counts[i];
            const std::pair<std::string, std::string> le(
                "le", i < h.upper_bounds().size() ? FormatValue(h.upper_bounds()[i]) : "+Inf");
            absl::StrAppend(&out, name, "_bucket", FormatLabels(series->labels, &le), " ",
                            cumulative, "\n");
          }
          absl::StrAppend(&out, name, "_sum", FormatLabels(series->labels, nullptr), " ",
                          FormatValue(h.Sum()), "\n");
          absl::StrAppend(&out, name, "_count", FormatLabels(series->labels, nullptr), " ",
                          cumulative, "\n");
        }
      }
    }
    if (from_collectors != collected.families.end()) {
      for (const auto& [labels, value] : from_collectors->second.samples) {
        absl::StrAppend(&out, name, FormatLabels(labels, nullptr), " ", FormatValue(value), "\n");
      }
    }
  }
  return out;
}

}  // namespace metrics
}  // namespace ps

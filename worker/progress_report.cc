#include "worker/progress_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace worker {
namespace {

// The mean ms per step of `times` over `steps`.
double MeanMs(absl::Duration time, int64_t steps) {
  return steps > 0 ? absl::ToDoubleMilliseconds(time) / steps : 0;
}

}  // namespace

std::string StepBreakdownText(const StepTimes& times, int64_t steps, bool copy_measured) {
  std::string out = "per step:";
  for (int i = 0; i < kNumStepParts; ++i) {
    const StepPart part = static_cast<StepPart>(i);
    if (part == StepPart::kCopy && !copy_measured) continue;
    absl::StrAppendFormat(&out, " %s %.2f", StepPartName(part), MeanMs(times[part], steps));
  }
  absl::StrAppendFormat(&out, " = %.2f ms", MeanMs(times.total, steps));
  return out;
}

std::string StepBreakdownJson(const StepTimes& times, int64_t steps, bool copy_measured) {
  std::string out = "{";
  for (int i = 0; i < kNumStepParts; ++i) {
    const StepPart part = static_cast<StepPart>(i);
    absl::StrAppend(&out, "\"", StepPartName(part), "\":");
    if (part == StepPart::kCopy && !copy_measured) {
      out += "null,";
    } else {
      absl::StrAppendFormat(&out, "%.3f,", MeanMs(times[part], steps));
    }
  }
  absl::StrAppendFormat(&out, "\"total\":%.3f}", MeanMs(times.total, steps));
  return out;
}

WorkerMetrics::WorkerMetrics(metrics::Registry* registry, int rank, bool copy_measured) {
  const metrics::Labels labels = {{"rank", absl::StrCat(rank)}};
  step = registry->GetGauge("ps_worker_step", "Steps this worker finished.", labels);
  samples = registry->GetCounter("ps_worker_samples_total", "Samples this worker trained.", labels);
  samples_per_second = registry->GetGauge(
      "ps_worker_samples_per_second", "This worker's samples per second over its last progress "
      "interval.", labels);
  loss = registry->GetGauge("ps_worker_loss", "Mean training loss over the last progress interval.",
                            labels);
  auc = registry->GetGauge("ps_worker_auc", "Running AUC over the last progress interval.", labels);
  pull = registry->GetHistogram("ps_worker_pull_duration_seconds",
                                "A step's wait for its embedding rows.", metrics::LatencyBuckets(),
                                labels);
  push = registry->GetHistogram(
      "ps_worker_push_duration_seconds",
      "A step's push of its embedding gradients (pipelined modes: with the wait for the previous "
      "step's).",
      metrics::LatencyBuckets(), labels);
  allreduce = registry->GetHistogram("ps_worker_allreduce_duration_seconds",
                                     "A step's AllReduce of the dense gradients, waits included.",
                                     metrics::LatencyBuckets(), labels);
  for (int i = 0; i < kNumStepParts; ++i) {
    const StepPart part = static_cast<StepPart>(i);
    if (part == StepPart::kCopy && !copy_measured) continue;
    step_seconds[i] = registry->GetCounter(
        "ps_worker_step_seconds_total",
        "Seconds of this worker's steps spent in each part (read, pull, copy, compute, push, "
        "allreduce, wait, other); their sum is the steps' wall time.",
        {{"rank", absl::StrCat(rank)}, {"part", StepPartName(part)}});
  }
}

absl::StatusOr<std::unique_ptr<ProgressReporter>> ProgressReporter::Create(const Options& options,
                                                                           absl::Time start) {
  std::FILE* metrics = nullptr;
  if (!options.metrics_path.empty()) {
    metrics = std::fopen(options.metrics_path.c_str(), "a");
    if (metrics == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot open metrics file %s", options.metrics_path));
    }
  }
  return std::unique_ptr<ProgressReporter>(new ProgressReporter(options, metrics, start));
}

ProgressReporter::ProgressReporter(const Options& options, FILE* metrics, absl::Time start)
    : options_(options), start_(start), metrics_(metrics), last_report_(start) {
  if (options.registry != nullptr) {
    series_.emplace(options.registry, options.rank, options.copy_measured);
  }
}

ProgressReporter::~ProgressReporter() { CloseMetrics(); }

void ProgressReporter::CloseMetrics() {
  if (metrics_ != nullptr) std::fclose(metrics_);
  metrics_ = nullptr;
}

void ProgressReporter::RecordPull(double ms) {
  pull_ms_total_ += ms;
  pull_ms_ += ms;
  if (series_) series_->pull->Observe(ms / 1e3);
}

void ProgressReporter::RecordPush(double ms) {
  push_ms_total_ += ms;
  push_ms_ += ms;
  ++interval_steps_;
  if (series_) series_->push->Observe(ms / 1e3);
}

void ProgressReporter::RecordAllReduce(absl::Duration time) {
  if (series_) series_->allreduce->Observe(absl::ToDoubleSeconds(time));
}

void ProgressReporter::RecordStep(const StepTimes& times) {
  RecordTail(times);
  interval_times_ += times;
  ++timed_steps_;
  ++interval_timed_steps_;
}

void ProgressReporter::RecordTail(const StepTimes& times) {
  run_times_ += times;
  if (!series_) return;
  for (int i = 0; i < kNumStepParts; ++i) {
    if (series_->step_seconds[i] != nullptr) {
      series_->step_seconds[i]->Add(absl::ToDoubleSeconds(times.parts[i]));
    }
  }
}

void ProgressReporter::StepDone(int64_t step, int samples, float loss,
                                absl::Span<const float> probs, absl::Span<const float> labels) {
  ++steps_;
  samples_ += samples;
  interval_samples_ += samples;
  if (series_) {
    series_->step->Set(static_cast<double>(step + 1));
    series_->samples->Increment(samples);
  }
  if (samples > 0) {
    loss_ += loss;
    ++batches_;
    auc_.Add(probs, labels);
  }
}

void ProgressReporter::MaybeReport(int64_t step, int samples, int64_t total_steps, bool last,
                                   absl::Time now) {
  // The first line after the first step, then one per interval; the rest at the end.
  if (!(steps_ == 1 || now - last_report_ >= options_.interval || last)) return;
  const double secs = absl::ToDoubleSeconds(now - last_report_);
  const double rate = interval_samples_ / secs;
  if (batches_ > 0) final_loss_ = loss_ / batches_;
  const double mean_pull_ms = interval_steps_ > 0 ? pull_ms_ / interval_steps_ : 0;
  const double mean_push_ms = interval_steps_ > 0 ? push_ms_ / interval_steps_ : 0;
  // The row cache's hit rate over the interval ("" without a cache).
  std::string cache_text, cache_json;
  if (options_.row_cache != nullptr) {
    const RowCacheStats now_stats = options_.row_cache->stats();
    const int64_t lookups = now_stats.lookups - cache_at_report_.lookups;
    const double hit_rate =
        lookups > 0 ? static_cast<double>(now_stats.hits - cache_at_report_.hits) / lookups : 0;
    cache_text = absl::StrFormat("  cache hits %.1f%%", 100 * hit_rate);
    cache_json = absl::StrFormat(",\"row_cache_hit_rate\":%.4f", hit_rate);
    cache_at_report_ = now_stats;
  }
  if (series_) {
    series_->samples_per_second->Set(rate);
    series_->loss->Set(final_loss_);
    series_->auc->Set(auc_.Auc());
  }
  if (options_.progress != nullptr) {
    const std::string breakdown =
        interval_timed_steps_ > 0
            ? absl::StrCat("  ", StepBreakdownText(interval_times_, interval_timed_steps_,
                                                   options_.copy_measured))
            : "";
    absl::FPrintF(options_.progress,
                  "worker %d: step %d/%d  batch %d  %.0f samples/s  loss %.4f  auc %.4f  "
                  "pull %.2f ms  push %.2f ms%s%s\n",
                  options_.rank, step + 1, total_steps, samples, rate, final_loss_, auc_.Auc(),
                  mean_pull_ms, mean_push_ms, cache_text, breakdown);
    std::fflush(options_.progress);
  }
  if (metrics_ != nullptr) {
    absl::FPrintF(metrics_,
                  "{\"rank\":%d,\"step\":%d,\"batch\":%d,\"seconds\":%.3f,"
                  "\"samples_per_s\":%.1f,\"loss\":%.6f,\"auc\":%.6f,\"pull_ms\":%.3f,"
                  "\"push_ms\":%.3f%s%s}\n",
                  options_.rank, step + 1, samples, absl::ToDoubleSeconds(now - start_), rate,
                  final_loss_, auc_.Auc(), mean_pull_ms, mean_push_ms, cache_json,
                  interval_timed_steps_ > 0
                      ? absl::StrCat(",\"step_ms\":",
                                     StepBreakdownJson(interval_times_, interval_timed_steps_,
                                                       options_.copy_measured))
                      : "");
    std::fflush(metrics_);
  }
  last_report_ = now;
  pull_ms_ = 0;
  push_ms_ = 0;
  interval_steps_ = 0;
  interval_times_ = StepTimes();
  interval_timed_steps_ = 0;
  loss_ = 0;
  batches_ = 0;
  interval_samples_ = 0;
  auc_.Reset();
}

double ProgressReporter::FinalLoss() {
  if (batches_ > 0) final_loss_ = loss_ / batches_;
  return final_loss_;
}

}  // namespace worker
}  // namespace ps

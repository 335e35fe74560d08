#include "worker/progress_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace worker {

WorkerMetrics::WorkerMetrics(metrics::Registry* registry, int rank) {
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
  if (options.registry != nullptr) series_.emplace(options.registry, options.rank);
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
  if (series_) {
    series_->samples_per_second->Set(rate);
    series_->loss->Set(final_loss_);
    series_->auc->Set(auc_.Auc());
  }
  if (options_.progress != nullptr) {
    absl::FPrintF(options_.progress,
                  "worker %d: step %d/%d  batch %d  %.0f samples/s  loss %.4f  auc %.4f  "
                  "pull %.2f ms  push %.2f ms\n",
                  options_.rank, step + 1, total_steps, samples, rate, final_loss_, auc_.Auc(),
                  mean_pull_ms, mean_push_ms);
    std::fflush(options_.progress);
  }
  if (metrics_ != nullptr) {
    absl::FPrintF(metrics_,
                  "{\"rank\":%d,\"step\":%d,\"batch\":%d,\"seconds\":%.3f,"
                  "\"samples_per_s\":%.1f,\"loss\":%.6f,\"auc\":%.6f,\"pull_ms\":%.3f,"
                  "\"push_ms\":%.3f}\n",
                  options_.rank, step + 1, samples, absl::ToDoubleSeconds(now - start_), rate,
                  final_loss_, auc_.Auc(), mean_pull_ms, mean_push_ms);
    std::fflush(metrics_);
  }
  last_report_ = now;
  pull_ms_ = 0;
  push_ms_ = 0;
  interval_steps_ = 0;
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

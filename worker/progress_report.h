// What a worker says about its training as it goes: a progress line after the first step, then
// one per progress interval and one after the last step; the same figures as a JSON line of the
// metrics file; and its Prometheus series (WorkerMetrics). A line's loss and AUC are those of the
// interval's batches (the mean loss, a running AUC), its pull_ms and push_ms the means per step
// over the interval, and so is its step breakdown (StepTimes: where the step's wall time went,
// part by part, worker/step_breakdown.h), and with a row cache the share of the interval's keys
// it served.
#ifndef PS_WORKER_PROGRESS_REPORT_H_
#define PS_WORKER_PROGRESS_REPORT_H_

#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/metrics/registry.h"
#include "worker/data/classifier_metrics.h"
#include "worker/row_cache.h"
#include "worker/step_breakdown.h"

namespace ps {
namespace worker {

// The Prometheus series of one worker, labelled rank="<rank>".
struct WorkerMetrics {
  WorkerMetrics(metrics::Registry* registry, int rank, bool copy_measured);

  metrics::Gauge* step;                // ps_worker_step: steps finished
  metrics::Counter* samples;           // ps_worker_samples_total: samples trained
  metrics::Gauge* samples_per_second;  // ps_worker_samples_per_second: over the last interval
  metrics::Gauge* loss;                // ps_worker_loss: mean over the last interval
  metrics::Gauge* auc;                 // ps_worker_auc: running AUC over the last interval
  // ps_worker_{pull,push,allreduce}_duration_seconds: a step's wait for its rows, its push
  // (with the wait for the previous step's, pipelined), and the dense AllReduce.
  metrics::Histogram* pull;
  metrics::Histogram* push;
  metrics::Histogram* allreduce;
  // ps_worker_step_seconds_total{part}: the seconds of this worker's steps spent in each part
  // (StepPart; their sum is the steps' wall time). Null for copy when the backend does not
  // measure it (no series then).
  std::array<metrics::Counter*, kNumStepParts> step_seconds{};
};

// `times` as the mean ms per step over `steps` steps (0 when steps is 0), as progress lines show
// it: "per step: read 0.21 pull 1.10 compute 3.40 push 0.80 allreduce 0.52 wait 0.10 other 0.05
// = 6.18 ms", copy after pull when `copy_measured`.
std::string StepBreakdownText(const StepTimes& times, int64_t steps, bool copy_measured);
// The same as a JSON object: {"read":0.210,"pull":..,"copy":..,"compute":..,"push":..,
// "allreduce":..,"wait":..,"other":..,"total":..}, copy null unless `copy_measured`.
std::string StepBreakdownJson(const StepTimes& times, int64_t steps, bool copy_measured);

// A ProgressReporter accumulates one worker's steps and reports them. Thread-compatible.
class ProgressReporter {
 public:
  struct Options {
    // Worker `rank`'s lines go to `progress` (not owned; null: nowhere), one per `interval`.
    FILE* progress = stderr;
    absl::Duration interval = absl::Seconds(5);
    int rank = 0;
    // If set, the JSON lines are appended to this file.
    std::string metrics_path;
    // If set (not owned, outliving this), the worker's series are registered here.
    metrics::Registry* registry = nullptr;
    // Whether the step breakdown's copy part is measured (a backend with copies between host and
    // device, which it times: GpuModel). When false (default; the CPU, which has no copies), copy
    // is left out of the lines and the series, and is null in the JSON.
    bool copy_measured = false;
    // If set (not owned, outliving this; training.row_cache), the lines and the JSON give the
    // share of the interval's lookups it served: "cache hits 87.1%", "row_cache_hit_rate":0.871.
    const RowCache* row_cache = nullptr;
  };

  // Opens the metrics file; FAILED_PRECONDITION when it cannot be opened. `start` is when
  // training started (the JSON lines' "seconds", the first interval's start).
  static absl::StatusOr<std::unique_ptr<ProgressReporter>> Create(const Options& options,
                                                                  absl::Time start);
  ~ProgressReporter();

  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // The open metrics file, for other JSON lines (held-out evaluations); null without one or once
  // closed.
  FILE* metrics_file() const { return metrics_; }
  // Closes the metrics file.
  void CloseMetrics();

  // A step's wait for its rows, its push, its dense AllReduce.
  void RecordPull(double ms);
  void RecordPush(double ms);
  void RecordAllReduce(absl::Duration time);
  // A step's breakdown (one per step, before its MaybeReport); RecordTail: time after the last
  // step (the pipeline's and the dense collectives' ends), counted in the run's but no step's.
  void RecordStep(const StepTimes& times);
  void RecordTail(const StepTimes& times);

  // Step `step` (0-based) is done: `samples` samples with mean loss `loss` (not counted for an
  // empty batch), the predictions `probs` of `labels`.
  void StepDone(int64_t step, int samples, float loss, absl::Span<const float> probs,
                absl::Span<const float> labels);

  // After StepDone: reports the interval when it is due at `now` (after the first step, when the
  // interval has passed, or with `last`), as step `step` of `total_steps` with a batch of
  // `samples`, and starts a new interval.
  void MaybeReport(int64_t step, int samples, int64_t total_steps, bool last, absl::Time now);

  int64_t steps() const { return steps_; }
  int64_t samples() const { return samples_; }
  // The mean loss of the last interval reported, or of the batches since if there were any.
  double FinalLoss();
  // Means per step over every step.
  double mean_pull_ms() const { return steps_ > 0 ? pull_ms_total_ / steps_ : 0; }
  double mean_push_ms() const { return steps_ > 0 ? push_ms_total_ / steps_ : 0; }
  // Every RecordStep and RecordTail so far, and the steps recorded.
  const StepTimes& run_times() const { return run_times_; }
  int64_t timed_steps() const { return timed_steps_; }
  bool copy_measured() const { return options_.copy_measured; }

 private:
  ProgressReporter(const Options& options, FILE* metrics, absl::Time start);

  // Constant after construction.
  const Options options_;
  const absl::Time start_;
  std::optional<WorkerMetrics> series_;

  FILE* metrics_;
  int64_t steps_ = 0;
  int64_t samples_ = 0;
  double pull_ms_total_ = 0;
  double push_ms_total_ = 0;
  double final_loss_ = 0;
  // The interval since the last report.
  absl::Time last_report_;
  StreamingAuc auc_;
  double loss_ = 0;
  int64_t batches_ = 0;
  int64_t interval_samples_ = 0;
  int64_t interval_steps_ = 0;
  double pull_ms_ = 0;
  double push_ms_ = 0;
  StepTimes run_times_;
  int64_t timed_steps_ = 0;
  StepTimes interval_times_;
  int64_t interval_timed_steps_ = 0;
  RowCacheStats cache_at_report_;  // options_.row_cache's stats at the last report
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_PROGRESS_REPORT_H_

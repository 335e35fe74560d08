#include "worker/trainer.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "worker/batch_balancer.h"
#include "worker/batch_reader.h"
#include "worker/best_model.h"
#include "worker/checkpoint_policy.h"
#include "worker/data/batch.h"
#include "worker/data/schema.h"
#include "worker/dense_sync.h"
#include "worker/embedding_io.h"
#include "worker/evaluation_policy.h"
#include "worker/heldout_eval.h"
#include "worker/model/model_spec.h"
#include "worker/progress_report.h"
#include "worker/step_breakdown.h"
#include "worker/step_compute.h"
#include "worker/step_pipeline.h"
#include "worker/step_sync.h"
#include "worker/wait_time.h"

namespace ps {
namespace worker {
namespace {

// One worker's training: the stages of its steps (StepPipeline reads, pulls and pushes,
// StepCompute computes, DenseSync keeps the dense part in step) and its policies (evaluations and
// early stopping, checkpoints, progress reports). The components are created in the order their
// errors are reported; they refer to each other, so they stay in place (held by pointer).
class TrainingRun {
 public:
  static absl::StatusOr<std::unique_ptr<TrainingRun>> Create(const config::Job& job,
                                                             Client* client,
                                                             CoordinatorClient* coordinator,
                                                             uint32_t member_id,
                                                             AllReduce* allreduce,
                                                             const TrainerOptions& options);

  // The next step, and the steps training runs (fewer once early stopping ended it).
  int64_t step() const { return step_; }
  int64_t end() const { return dense_->end(); }

  // Trains one step. Returns false when there was none left to train after all (a straggler
  // that caught up with the cluster at the end).
  absl::StatusOr<bool> Step();

  // After the last step: ends the pipeline and the dense collectives, answers a checkpoint that
  // may still ask, and gathers the result, with the final evaluation and checkpoint.
  absl::StatusOr<TrainResult> Finish();

 private:
  TrainingRun(const config::Job& job, Client* client, AllReduce* allreduce,
              const TrainerOptions& options, StepSync sync)
      : job_(job),
        client_(client),
        allreduce_(allreduce),
        options_(options),
        sync_(std::move(sync)),
        balancer_(allreduce->size(), static_cast<int>(job.training().batch_size())) {}

  // Steps in the job (total, and in an epoch when counted: 0 otherwise).
  absl::Status CountSteps();
  // The policies and the dense side, once the data and the model are there.
  absl::Status CreatePolicies(CoordinatorClient* coordinator);
  // Ends the step breakdown's current lap as `part`, the waits for the other workers measured
  // during it (WaitTime), less `not_waits` (already in them, but `part`'s), given to `waits`.
  void EndLap(StepPart part, StepPart waits = StepPart::kWait,
              absl::Duration not_waits = absl::ZeroDuration());

  // Constant after construction.
  const config::Job& job_;
  Client* const client_;
  AllReduce* const allreduce_;
  const TrainerOptions& options_;
  StepSync sync_;
  absl::Time start_;  // when training started: just before the first pull

  BatchBalancer balancer_;
  bool balanced_ = false;
  int64_t total_steps_ = 0;
  int64_t epoch_steps_ = 0;
  WaitTime waited_;
  // Where the steps' wall time goes: laps from start_ on, one after the other (EndLap).
  StepBreakdown breakdown_;
  absl::Duration lap_waited_;  // waited_.waited() when the current lap started
  std::unique_ptr<StepCompute> compute_;
  std::unique_ptr<BatchReader> reader_;
  std::unique_ptr<RowCache> row_cache_;  // training.row_cache, else null
  std::unique_ptr<StepPipeline> pipeline_;
  std::unique_ptr<ProgressReporter> reporter_;
  std::unique_ptr<EvaluationPolicy> evaluation_;
  std::unique_ptr<DenseSync> dense_;
  std::unique_ptr<CheckpointPolicy> checkpoints_;
  std::unique_ptr<BestModel> best_;
  int64_t step_ = 0;  // the clock: a straggler in sync mode can skip steps
};

absl::StatusOr<std::unique_ptr<TrainingRun>> TrainingRun::Create(
    const config::Job& job, Client* client, CoordinatorClient* coordinator, uint32_t member_id,
    AllReduce* allreduce, const TrainerOptions& options) {
  std::unique_ptr<TrainingRun> run(new TrainingRun(
      job, client, allreduce, options, StepSync(job, client, coordinator, member_id)));
  const int world = allreduce->size();
  // Sync's steps must not depend on timing; the other modes split each step's samples by speed.
  run->balanced_ = job.training().balance_batches() &&
                   run->sync_.mode() != config::Training::SYNC && world > 1;
  PS_ASSIGN_OR_RETURN(run->compute_,
                      StepCompute::Create(job, options.backend, world, run->balanced_));
  PS_ASSIGN_OR_RETURN(EmbeddingLayout layout, EmbeddingLayout::FromJob(job, run->compute_->spec()));
  PS_ASSIGN_OR_RETURN(run->row_cache_, MakeRowCache(job, layout, options.metrics, allreduce->rank(),
                                                    run->compute_->model()->pools_rows()));
  PS_ASSIGN_OR_RETURN(const SchemaOptions schema, SchemaOf(job));
  PS_ASSIGN_OR_RETURN(run->reader_,
                      BatchReader::Open(job, schema, allreduce->rank(), world,
                                        static_cast<int>(job.training().batch_size()),
                                        run->balanced_ ? &run->balancer_ : nullptr));
  PS_RETURN_IF_ERROR(run->CountSteps());
  if (options.start_step > 0) {
    PS_RETURN_IF_ERROR(CheckpointPolicy::Restore(job, options.resume_from, allreduce->rank(),
                                                 run->compute_->params(),
                                                 run->compute_->optimizer_state()));
  }
  PS_RETURN_IF_ERROR(run->CreatePolicies(coordinator));
  run->pipeline_ = std::make_unique<StepPipeline>(
      client, &run->sync_, run->reader_.get(), std::move(layout), &run->waited_, &run->breakdown_,
      options.pipeline, run->row_cache_.get());
  run->pipeline_->set_pool_on_device(run->compute_->model()->pools_rows());
  // A resumed job reads on from the block of its first step.
  run->step_ = options.start_step;
  PS_RETURN_IF_ERROR(run->reader_->Skip(options.start_step));
  // Parsing on its own thread, a batch ahead (not with balanced shares, decided step by step).
  if (options.pipeline && !run->balanced_) {
    PS_RETURN_IF_ERROR(run->reader_->ReadAhead(run->total_steps_ - options.start_step));
  }
  run->EndLap(StepPart::kRead);
  // The first batch's read and pull: in the first step's time.
  PS_RETURN_IF_ERROR(run->pipeline_->Start(run->step_));
  run->EndLap(StepPart::kPull);
  return run;
}

absl::Status TrainingRun::CountSteps() {
  const config::Training& tr = job_.training();
  total_steps_ = static_cast<int64_t>(tr.steps());
  if (total_steps_ == 0 || tr.eval_every_epochs() > 0) {
    PS_ASSIGN_OR_RETURN(epoch_steps_, reader_->CountBlocks());
  }
  if (total_steps_ == 0) total_steps_ = epoch_steps_ * std::max<uint32_t>(1, tr.epochs());
  if (options_.max_steps > 0) total_steps_ = std::min(total_steps_, options_.max_steps);
  if (total_steps_ == 0) return absl::FailedPreconditionError("no training data");
  return absl::OkStatus();
}

absl::Status TrainingRun::CreatePolicies(CoordinatorClient* coordinator) {
  const config::Training& tr = job_.training();
  const int rank = allreduce_->rank();
  checkpoints_ = std::make_unique<CheckpointPolicy>(job_, coordinator, &sync_, rank);
  ProgressReporter::Options report;
  report.progress = options_.progress;
  report.interval = options_.progress_interval;
  report.rank = rank;
  report.metrics_path = options_.metrics_path;
  report.registry = options_.metrics;
  // Only a backend with copies between host and device measures them (GpuModel); on the CPU copy
  // stays out of the reports rather than show as a measured 0.
  report.copy_measured = compute_->model()->last_copy_time().has_value();
  report.row_cache = row_cache_.get();
  start_ = absl::Now();
  breakdown_.Start();
  PS_ASSIGN_OR_RETURN(reporter_, ProgressReporter::Create(report, start_));

  EvaluationPolicy::Options eval;
  eval.epoch_steps = epoch_steps_;
  eval.start_step = options_.start_step;
  eval.sync_clock = sync_.mode() == config::Training::SYNC;
  eval.progress = options_.progress;
  eval.metrics = reporter_->metrics_file();
  eval.start = start_;
  best_ = std::make_unique<BestModel>(job_, coordinator, allreduce_, options_.progress);
  if (best_->enabled()) {
    eval.on_best = [this](int64_t steps_done) {
      return best_->Keep(steps_done, compute_->params(), compute_->optimizer_state());
    };
  }
  evaluation_ = std::make_unique<EvaluationPolicy>(
      tr, allreduce_,
      [this](int64_t clock) { return EvaluateHeldout(job_, client_, compute_->model(), clock); },
      eval);

  DenseSync::Options dense;
  dense.sync_every = static_cast<int>(std::max<uint32_t>(1, tr.dense_sync_every()));
  dense.start_step = options_.start_step;
  dense.end_step = total_steps_;
  dense.push_every = tr.dense_push_every();
  dense.balancer = balanced_ ? &balancer_ : nullptr;
  dense.after_collective = [this](int64_t steps_done) {
    return evaluation_->AfterSteps(steps_done);
  };
  dense_ = std::make_unique<DenseSync>(allreduce_, client_, compute_->params(), std::move(dense),
                                       &waited_);
  return absl::OkStatus();
}

void TrainingRun::EndLap(StepPart part, StepPart waits, absl::Duration not_waits) {
  breakdown_.Attribute(waits, waited_.waited() - lap_waited_ - not_waits);
  breakdown_.Lap(part);
  lap_waited_ = waited_.waited();
}

absl::StatusOr<bool> TrainingRun::Step() {
  const absl::Time step_start = absl::Now();
  waited_.Take();  // from here, this step's waits for the other workers
  lap_waited_ = absl::ZeroDuration();
  // The step's laps, in order: each ends where the next begins (StepBreakdown).
  PS_RETURN_IF_ERROR(
      checkpoints_->AtBoundary(step_, compute_->params(), compute_->optimizer_state()));
  EndLap(StepPart::kOther);
  PS_ASSIGN_OR_RETURN(const bool pulled, pipeline_->AwaitRows(&step_, [this](int64_t next) {
    return dense_->CatchUp(next);
  }));
  EndLap(StepPart::kPull);
  if (!pulled) return false;  // nothing trained: the time goes to the run's tail (Finish)
  reporter_->RecordPull(absl::ToDoubleMilliseconds(absl::Now() - step_start));
  PS_RETURN_IF_ERROR(pipeline_->Prefetch(step_ + 1, dense_->end()));
  EndLap(StepPart::kPull);  // issuing the next batch's pull; its read is measured inside

  const Batch& batch = pipeline_->batch();
  const int n = batch.size;
  PS_ASSIGN_OR_RETURN(const float loss,
                      compute_->ForwardBackward(pipeline_->layout(), pipeline_->current()));
  const std::optional<absl::Duration> copy_time = compute_->model()->last_copy_time();
  if (copy_time.has_value() && n > 0) breakdown_.Attribute(StepPart::kCopy, *copy_time);
  EndLap(StepPart::kCompute);
  // The embedding push is under way while the dense gradients are summed (and, in SYNC, the next
  // batch is read and its pull waits on the servers for this step).
  const absl::Time push_start = absl::Now();
  const int64_t this_step = step_;
  PS_RETURN_IF_ERROR(compute_->rows_on_device()
                         ? pipeline_->BeginPushRows(step_, compute_->row_grads())
                         : pipeline_->BeginPush(step_, compute_->emb_grad()));
  absl::Duration push_time = absl::Now() - push_start;
  EndLap(StepPart::kPush);
  PS_RETURN_IF_ERROR(pipeline_->PullAhead(step_ + 1, dense_->end()));
  EndLap(StepPart::kPull);  // issuing the next batch's pull; its read is measured inside
  if (job_.training().dense_sync_every() <= 1) {
    absl::Duration allreduce_time;
    PS_RETURN_IF_ERROR(dense_->SumGradients(step_, compute_->dense_grad(), &allreduce_time));
    reporter_->RecordAllReduce(allreduce_time);
    // The AllReduce is among the waits DenseSync measures; the rest of them (catching up, the
    // exchange of speeds) are waits.
    EndLap(StepPart::kAllReduce, StepPart::kWait, allreduce_time);
  }
  const absl::Time end_push_start = absl::Now();
  PS_ASSIGN_OR_RETURN(step_, pipeline_->EndPush(dense_->end()));
  push_time += absl::Now() - end_push_start;
  reporter_->RecordPush(absl::ToDoubleMilliseconds(push_time));
  EndLap(StepPart::kPush);
  compute_->ApplyDense(n);
  EndLap(StepPart::kCompute);
  PS_RETURN_IF_ERROR(dense_->StepDone(this_step, step_));
  reporter_->StepDone(this_step, n, loss, compute_->probs(),
                      absl::MakeConstSpan(batch.labels.data(), n));
  // Local SGD's averaging is the dense collective; the rest (evaluations, the master copy's
  // push) is other.
  EndLap(StepPart::kOther, StepPart::kAllReduce);
  PS_RETURN_IF_ERROR(pipeline_->Advance(step_, dense_->end()));
  EndLap(StepPart::kPull);  // not pipelined: the next batch's pull; its read measured inside

  if (options_.slowdown > 1.0) {  // this worker's own work, not its waits, takes longer
    absl::SleepFor((absl::Now() - step_start - waited_.waited()) * (options_.slowdown - 1.0));
  }
  const absl::Time now = absl::Now();
  balancer_.Record(n, now - step_start - waited_.waited());
  EndLap(StepPart::kOther);
  reporter_->RecordStep(breakdown_.Take());
  reporter_->MaybeReport(this_step, n, dense_->end(), step_ >= dense_->end(), now);
  return true;
}

absl::StatusOr<TrainResult> TrainingRun::Finish() {
  PS_RETURN_IF_ERROR(pipeline_->Finish());
  EndLap(StepPart::kPush);  // the last step's push, pipelined
  TrainResult result;
  result.backend = compute_->model()->backend();
  result.final_loss = reporter_->FinalLoss();
  PS_RETURN_IF_ERROR(dense_->Finish());
  EndLap(StepPart::kAllReduce, StepPart::kAllReduce);  // the collectives left, local SGD's last
  const int64_t end = dense_->end();
  const int64_t boundary = std::max(step_, end);  // after the last step
  PS_RETURN_IF_ERROR(
      checkpoints_->AtEnd(boundary, end - 1, compute_->params(), compute_->optimizer_state()));
  // Early stopping's best model replaces the last one, on the servers and every worker, before
  // the dense master copy, the final evaluation and the end-of-training checkpoint.
  PS_ASSIGN_OR_RETURN(result.kept_step,
                      best_->Restore(evaluation_->stopped_at() >= 0, compute_->params(),
                                     compute_->optimizer_state()));
  if (result.kept_step >= 0) {
    result.kept_checkpoint = best_->checkpoint();
    PS_RETURN_IF_ERROR(
        checkpoints_->AtEnd(boundary, end - 1, compute_->params(), compute_->optimizer_state()));
  }
  EndLap(StepPart::kOther);  // the end-of-training checkpoint's state, the best model's restore
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  // The time after the last step counts in the run's breakdown, whose total is then `seconds`.
  reporter_->RecordTail(breakdown_.Take());
  // Everyone is done pushing; the total of samples trained.
  float total = static_cast<float>(reporter_->samples());
  PS_RETURN_IF_ERROR(allreduce_->SumInPlace(absl::MakeSpan(&total, 1)));
  result.steps = reporter_->steps();
  result.samples = static_cast<int64_t>(total);
  result.samples_per_s = result.seconds > 0 ? result.samples / result.seconds : 0;
  result.skipped_lines = reader_->skipped_lines();
  result.read_bytes = reader_->read_bytes();
  result.mean_pull_ms = reporter_->mean_pull_ms();
  result.mean_push_ms = reporter_->mean_push_ms();
  result.step_times = reporter_->run_times();
  result.copy_measured = reporter_->copy_measured();
  if (row_cache_ != nullptr) result.row_cache = row_cache_->stats();
  result.mean_batch =
      result.steps > 0 ? static_cast<double>(reporter_->samples()) / result.steps : 0;
  PS_RETURN_IF_ERROR(dense_->PushModel());
  reporter_->CloseMetrics();

  // Worker 0 evaluates; one collective gives its figures to every worker's result.
  PS_ASSIGN_OR_RETURN(const HeldoutMetrics heldout, evaluation_->Final(options_.evaluate));
  result.heldout_auc = heldout.auc;
  result.heldout_logloss = heldout.logloss;
  result.heldout_samples = heldout.samples;
  result.evaluations = evaluation_->evaluations();
  result.stopped_early_at = evaluation_->stopped_at();
  // Every worker's pushes are acknowledged (the sum of samples waited for all): the
  // end-of-training checkpoint, in sync mode at the boundary after the last step. Last of all,
  // after the final collective, so that the other workers do not wait in a collective (with its
  // timeout) for a checkpoint of any size, or for a periodic one under way before it.
  PS_ASSIGN_OR_RETURN(result.checkpoint, checkpoints_->TakeFinal(boundary));
  return result;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const config::Job& job, Client* client,
                                  CoordinatorClient* coordinator, uint32_t member_id,
                                  AllReduce* allreduce, const TrainerOptions& options) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<TrainingRun> run,
                      TrainingRun::Create(job, client, coordinator, member_id, allreduce, options));
  while (run->step() < run->end()) {
    PS_ASSIGN_OR_RETURN(const bool stepped, run->Step());
    if (!stepped) break;
  }
  return run->Finish();
}

}  // namespace worker
}  // namespace ps

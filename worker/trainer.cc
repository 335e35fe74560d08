#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "worker/batch_balancer.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/classifier_metrics.h"
#include "worker/early_stopping.h"
#include "worker/embedding_io.h"
#include "worker/heldout_eval.h"
#include "worker/model/dlrm.h"
#include "worker/model/model.h"
#include "worker/step_sync.h"
#include "worker/worker_checkpoint.h"

namespace ps {
namespace worker {
namespace {

// The dense parameters' name on the servers (the master copy).
constexpr char kDenseName[] = "dense/model";

// With balanced batches, the workers exchange their speeds first after kFirstBalanceSteps steps
// (so that a straggler is found early), then about every kBalanceEverySteps: right after the
// dense collective that ends them (every step's AllReduce, or the averaging of local SGD, at the
// first one at or past the mark), since the workers are in step there anyway. Shorter intervals
// measure the scheduler's noise more than the workers' speeds.
constexpr int64_t kFirstBalanceSteps = 8;
constexpr int64_t kBalanceEverySteps = 32;

// Reads this worker's lines [begin, begin + count) of the next block of the data (a step's
// lines: workers x batch_size), starting the data over at its end (the step count bounds the
// epochs). The batch may be empty: a range past the end of a short last block.
absl::Status ReadBatch(CriteoReader* reader, int64_t block_lines, int64_t begin, int64_t count,
                       Batch* batch) {
  PS_ASSIGN_OR_RETURN(int64_t lines, reader->NextBlock(block_lines, begin, count, batch));
  if (lines == 0) {
    PS_RETURN_IF_ERROR(reader->Rewind());
    PS_ASSIGN_OR_RETURN(lines, reader->NextBlock(block_lines, begin, count, batch));
  }
  if (lines == 0) return absl::FailedPreconditionError("the training data is empty");
  return absl::OkStatus();
}

// The blocks of `block_lines` lines in one pass over the data (the last one may be short): the
// steps of an epoch. Every worker reads the same files, so every worker counts the same.
absl::StatusOr<int64_t> CountBlocks(CriteoReader* reader, int64_t block_lines) {
  Batch batch;
  int64_t blocks = 0;
  while (true) {
    PS_ASSIGN_OR_RETURN(const int64_t lines, reader->NextBlock(block_lines, 0, 0, &batch));
    if (lines == 0) break;
    ++blocks;
  }
  PS_RETURN_IF_ERROR(reader->Rewind());
  return blocks;
}

// Hands worker 0's held-out figures and its `stop` decision to every worker through one
// collective, in which the others' inputs count for nothing; a group of one has nothing to do.
absl::Status ShareFromWorkerZero(AllReduce* allreduce, HeldoutMetrics* metrics, bool* stop) {
  const bool zero = allreduce->rank() == 0;
  std::vector<float> figures(4, 0.0f);
  if (zero) {
    figures = {static_cast<float>(metrics->auc), static_cast<float>(metrics->logloss),
               static_cast<float>(metrics->samples), *stop ? 1.0f : 0.0f};
  }
  PS_RETURN_IF_ERROR(allreduce->SumInPlace(absl::MakeSpan(figures)));
  if (!zero) {
    *metrics = HeldoutMetrics{figures[0], figures[1], static_cast<int64_t>(figures[2])};
    *stop = figures[3] > 0.5f;
  }
  return absl::OkStatus();
}

}  // namespace

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

absl::StatusOr<TrainResult> Train(const config::Job& job, Client* client,
                                  CoordinatorClient* coordinator, uint32_t member_id,
                                  AllReduce* allreduce, const TrainerOptions& options) {
  PS_ASSIGN_OR_RETURN(const DlrmShape shape, DlrmShape::FromJob(job));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      CreateModel(shape, job.training().seed(), options.backend));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> dense_optimizer,
                      Optimizer::Create(job.training().dense_optimizer()));
  const int rank = allreduce->rank();
  const int world = allreduce->size();
  const SchemaOptions schema{shape.num_dense, shape.num_sparse};
  std::vector<std::string> train_paths(job.data().train_paths().begin(),
                                       job.data().train_paths().end());
  // Every worker reads every line and parses its part of each step's block of lines (its range,
  // from its batch share), so that an epoch covers the data once however the shares change.
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                      CriteoReader::Open(train_paths, 0, 1, schema));

  const config::Training& tr = job.training();
  const int batch_size = static_cast<int>(tr.batch_size());
  const int64_t block_lines = int64_t{world} * batch_size;
  int64_t total_steps = static_cast<int64_t>(tr.steps());
  int64_t epoch_steps = 0;  // blocks in the data, when counted
  if (total_steps == 0 || tr.eval_every_epochs() > 0) {
    PS_ASSIGN_OR_RETURN(epoch_steps, CountBlocks(reader.get(), block_lines));
  }
  if (total_steps == 0) total_steps = epoch_steps * std::max<uint32_t>(1, tr.epochs());
  if (options.max_steps > 0) total_steps = std::min(total_steps, options.max_steps);
  if (total_steps == 0) return absl::FailedPreconditionError("no training data");
  // Held-out evaluations during training: every eval_interval steps (0: none).
  const int64_t eval_interval = tr.eval_every_steps() > 0
                                    ? static_cast<int64_t>(tr.eval_every_steps())
                                    : int64_t{tr.eval_every_epochs()} * epoch_steps;

  const int dim = shape.emb_dim;
  const int num_sparse = shape.num_sparse;
  const std::vector<FieldGroup> groups = GroupFields(job, num_sparse);
  const int sync_every = static_cast<int>(std::max<uint32_t>(1, tr.dense_sync_every()));
  StepSync sync(job, client, coordinator, member_id);
  const bool prefetch = sync.can_prefetch();
  // Sync's steps must not depend on timing; the other modes split each step's samples by speed.
  const bool balance = tr.balance_batches() && sync.mode() != config::Training::SYNC && world > 1;
  BatchBalancer balancer(world, batch_size);
  // Reads this worker's part of the next block: its share, after the lower ranks' shares.
  auto read_batch = [&](Batch* batch) -> absl::Status {
    int64_t begin = int64_t{rank} * batch_size;
    int64_t count = batch_size;
    if (balance) {
      begin = 0;
      for (int r = 0; r < rank; ++r) begin += balancer.batch(r);
      count = balancer.batch(rank);
    }
    return ReadBatch(reader.get(), block_lines, begin, count, batch);
  };

  std::vector<float> state(dense_optimizer->StateFloats(model->num_params()));
  dense_optimizer->InitState(model->num_params(), state.data());
  const std::string optimizer_type = job.training().dense_optimizer().type();
  if (options.start_step > 0) {
    PS_ASSIGN_OR_RETURN(const rpc::CheckpointWorkerState resumed,
                        WorkerCheckpointer::Load(options.resume_from, rank, model->num_params(),
                                                 state.size(), optimizer_type));
    WorkerCheckpointer::Unpack(resumed, model->params(), absl::MakeSpan(state));
  }
  // Sync jobs with a checkpoint_dir give their state to the checkpoints.
  std::optional<WorkerCheckpointer> checkpointer;
  if (job.training().mode() == config::Training::SYNC && !job.cluster().checkpoint_dir().empty()) {
    checkpointer.emplace(coordinator, rank, optimizer_type);
  }
  std::vector<float> dense_grad(model->num_params());
  std::vector<float> emb_grad, probs;

  std::FILE* metrics = nullptr;
  if (!options.metrics_path.empty()) {
    metrics = std::fopen(options.metrics_path.c_str(), "a");
    if (metrics == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot open metrics file %s", options.metrics_path));
    }
  }

  TrainResult result;
  result.backend = model->backend();
  std::optional<EarlyStopping> early_stopping;
  if (tr.has_early_stopping()) early_stopping.emplace(tr.early_stopping());
  int64_t next_eval = eval_interval > 0 ? (options.start_step / eval_interval + 1) * eval_interval
                                        : std::numeric_limits<int64_t>::max();
  StreamingAuc running_auc;
  double interval_loss = 0;
  int64_t interval_batches = 0, interval_samples = 0, my_samples = 0;
  double pull_ms_total = 0, push_ms_total = 0;
  // The means of the progress interval (lines and the metrics file), over interval_steps.
  double interval_pull_ms = 0, interval_push_ms = 0;
  int64_t interval_steps = 0;
  std::optional<WorkerMetrics> metrics_out;
  if (options.metrics != nullptr) metrics_out.emplace(options.metrics, rank);
  const absl::Time start = absl::Now();
  absl::Time last_report = start;

  StepData slots[2];
  int cur = 0;
  PushData push;
  int64_t step = options.start_step;  // the clock: a straggler in sync mode can skip steps
  // Time this step spent waiting for the other workers (the staleness bound, collectives): not
  // this worker's own work, for the batch balancer and the induced slowdown.
  absl::Duration waited;
  auto wait_for_others = [&](auto&& fn) -> absl::Status {
    const absl::Time t0 = absl::Now();
    absl::Status status = fn();
    waited += absl::Now() - t0;
    return status;
  };
  auto begin_pull = [&](StepData* d, int64_t for_step) -> absl::Status {
    PS_RETURN_IF_ERROR(wait_for_others([&] { return sync.BeforePull(for_step); }));
    client->SetClock(for_step);
    StartPull(client, groups, num_sparse, dim, d);
    return absl::OkStatus();
  };
  // A resumed job reads on from the block of its first step.
  for (int64_t block = 0; block < options.start_step; ++block) {
    PS_RETURN_IF_ERROR(ReadBatch(reader.get(), block_lines, 0, 0, &slots[cur].batch));
  }
  PS_RETURN_IF_ERROR(read_batch(&slots[cur].batch));
  PS_RETURN_IF_ERROR(begin_pull(&slots[cur], step));

  // The dense collectives are counted by the clock, so that a straggler who skips steps (sync
  // quorum) still joins every one of them: with dense_sync_every = 1 one AllReduce of gradients
  // per step (zeros for a skipped step), with k > 1 one averaging per multiple of k crossed.
  int64_t gradient_rounds = options.start_step;
  int64_t averaging_rounds = options.start_step / sync_every;
  std::vector<float> zeros;
  std::vector<float> figures;
  int64_t next_balance = kFirstBalanceSteps;
  // After the collective that ends `steps_done` steps: once the next mark is reached, the
  // workers' speeds since the last exchange, summed over the group, give new batch shares.
  auto exchange_speeds = [&](int64_t steps_done) -> absl::Status {
    if (!balance || steps_done < next_balance) return absl::OkStatus();
    next_balance = steps_done + kBalanceEverySteps;
    figures.assign(balancer.ExchangeFloats(), 0.0f);
    balancer.Report(rank, absl::MakeSpan(figures));
    PS_RETURN_IF_ERROR(allreduce->SumInPlace(absl::MakeSpan(figures)));
    return balancer.Update(figures);
  };
  // The held-out evaluation once `steps_done` steps are done, when an evaluation is due: worker 0
  // evaluates, and one collective hands its figures and its early-stopping decision to every
  // worker, which then ends training after `steps_done` steps. Called after each dense collective
  // (every step's gradients, or each averaging of local SGD) in the same order on every worker,
  // so that the collectives of all workers pair up.
  auto maybe_evaluate = [&](int64_t steps_done) -> absl::Status {
    if (steps_done < next_eval || steps_done >= total_steps) return absl::OkStatus();
    while (next_eval <= steps_done) next_eval += eval_interval;
    HeldoutMetrics m;
    bool stop = false;
    if (rank == 0) {
      const int64_t clock = sync.mode() == config::Training::SYNC ? steps_done : -1;
      PS_ASSIGN_OR_RETURN(m, EvaluateHeldout(job, client, model.get(), clock));
      if (early_stopping.has_value()) stop = early_stopping->Update(steps_done, m.auc, m.logloss);
    }
    PS_RETURN_IF_ERROR(ShareFromWorkerZero(allreduce, &m, &stop));
    result.evaluations.push_back(Evaluation{steps_done, m});
    if (rank == 0 && options.progress != nullptr) {
      absl::FPrintF(options.progress,
                    "worker 0: held-out after step %d%s: auc %.4f  logloss %.4f  (%d samples)\n",
                    steps_done,
                    epoch_steps > 0 && steps_done % epoch_steps == 0
                        ? absl::StrFormat(" (epoch %d)", steps_done / epoch_steps)
                        : std::string(),
                    m.auc, m.logloss, m.samples);
    }
    if (rank == 0 && metrics != nullptr) {
      absl::FPrintF(metrics,
                    "{\"rank\":0,\"step\":%d,\"seconds\":%.3f,\"heldout_auc\":%.6f,"
                    "\"heldout_logloss\":%.6f,\"heldout_samples\":%d}\n",
                    steps_done, absl::ToDoubleSeconds(absl::Now() - start), m.auc, m.logloss,
                    m.samples);
      std::fflush(metrics);
    }
    if (stop) {
      total_steps = steps_done;
      result.stopped_early_at = steps_done;
      if (rank == 0 && options.progress != nullptr) {
        absl::FPrintF(options.progress,
                      "worker 0: early stopping after step %d: no better held-out %s for %d "
                      "evaluations (best %.4f after step %d)\n",
                      steps_done,
                      tr.early_stopping().metric() == config::EarlyStopping::AUC ? "auc"
                                                                                 : "logloss",
                      tr.early_stopping().patience(), early_stopping->best(),
                      early_stopping->best_step());
      }
    }
    return absl::OkStatus();
  };
  auto collectives_until = [&](int64_t next_step) -> absl::Status {
    return wait_for_others([&]() -> absl::Status {
      // total_steps shrinks when an evaluation on the way stops training early.
      if (sync_every == 1) {
        zeros.assign(dense_grad.size(), 0.0f);
        for (; gradient_rounds < std::min(next_step, total_steps); ++gradient_rounds) {
          PS_RETURN_IF_ERROR(allreduce->SumInPlace(absl::MakeSpan(zeros)));
          PS_RETURN_IF_ERROR(maybe_evaluate(gradient_rounds + 1));
        }
      } else {
        for (; averaging_rounds < std::min(next_step, total_steps) / sync_every;
             ++averaging_rounds) {
          PS_RETURN_IF_ERROR(allreduce->SumInPlace(model->params()));
          for (float& w : model->params()) w /= world;
          PS_RETURN_IF_ERROR(exchange_speeds((averaging_rounds + 1) * sync_every));
          PS_RETURN_IF_ERROR(maybe_evaluate((averaging_rounds + 1) * sync_every));
        }
      }
      return absl::OkStatus();
    });
  };

  while (step < total_steps) {
    const absl::Time step_start = absl::Now();
    waited = absl::ZeroDuration();
    if (checkpointer.has_value()) {  // the state at boundary `step`, and a checkpoint asking
      checkpointer->AtBoundary(step, model->params(), state);
      PS_RETURN_IF_ERROR(checkpointer->Answer(sync.checkpoint_notice()));
    }
    StepData& d = slots[cur];
    absl::Status pulled = FinishPull(groups, num_sparse, dim, &d);
    while (pulled.code() == absl::StatusCode::kAborted && sync.mode() == config::Training::SYNC) {
      // A straggler outside the quorum: the cluster applied this step without us. Catch up
      // (joining the collectives of the steps skipped) and pull the same batch again for the
      // step the cluster is at (again if the quorum applied that one too in the meantime).
      PS_ASSIGN_OR_RETURN(step, sync.AfterPush(step));
      PS_RETURN_IF_ERROR(collectives_until(step));
      if (step >= total_steps) break;
      PS_RETURN_IF_ERROR(begin_pull(&d, step));
      pulled = FinishPull(groups, num_sparse, dim, &d);
    }
    if (step >= total_steps) break;
    PS_RETURN_IF_ERROR(pulled);
    const double pull_ms = absl::ToDoubleMilliseconds(absl::Now() - step_start);
    pull_ms_total += pull_ms;
    interval_pull_ms += pull_ms;
    if (metrics_out) metrics_out->pull->Observe(pull_ms / 1e3);
    StepData& next = slots[1 - cur];
    if (prefetch && step + 1 < total_steps) {
      PS_RETURN_IF_ERROR(read_batch(&next.batch));
      PS_RETURN_IF_ERROR(begin_pull(&next, step + 1));
    }

    const int n = d.batch.size;
    emb_grad.resize(d.emb.size());
    probs.resize(n);
    // Every sample weighs the same: 1 / (world * batch_size) of a step's gradient with a dense
    // AllReduce every step, 1 / batch_size of a worker's own with local SGD. A balanced batch
    // bigger or smaller than batch_size scales its mean's gradient accordingly.
    float loss_scale = sync_every == 1 ? 1.0f / world : 1.0f;
    if (balance) loss_scale *= static_cast<float>(n) / batch_size;
    float loss = 0;
    if (n > 0) {
      loss = model->ForwardBackward(n, d.batch.dense.data(), d.emb.data(), d.batch.labels.data(),
                                    loss_scale, dense_grad.data(), emb_grad.data(), probs.data());
    } else {  // an empty part of a short last block: the step goes on with nothing to add
      std::fill(dense_grad.begin(), dense_grad.end(), 0.0f);
    }
    if (sync_every == 1) {
      PS_RETURN_IF_ERROR(collectives_until(step));
      const absl::Time allreduce_start = absl::Now();
      PS_RETURN_IF_ERROR(
          wait_for_others([&] { return allreduce->SumInPlace(absl::MakeSpan(dense_grad)); }));
      if (metrics_out) {
        metrics_out->allreduce->Observe(absl::ToDoubleSeconds(absl::Now() - allreduce_start));
      }
      gradient_rounds = step + 1;
      PS_RETURN_IF_ERROR(wait_for_others([&] { return exchange_speeds(step + 1); }));
    }

    const absl::Time t_push = absl::Now();
    if (push.step >= 0) {  // the previous step's push (pipelined modes)
      PS_RETURN_IF_ERROR(FinishPush(&push));
      PS_RETURN_IF_ERROR(sync.AfterPush(push.step).status());
      push.step = -1;
    }
    client->SetClock(step);
    StartPush(client, groups, num_sparse, dim, d.batch, emb_grad, step, &push);
    const int64_t this_step = step;
    if (!prefetch) {
      PS_RETURN_IF_ERROR(FinishPush(&push));
      PS_ASSIGN_OR_RETURN(step, sync.AfterPush(step));
      push.step = -1;
    } else {
      ++step;
    }
    const double push_ms = absl::ToDoubleMilliseconds(absl::Now() - t_push);
    push_ms_total += push_ms;
    interval_push_ms += push_ms;
    ++interval_steps;
    if (metrics_out) metrics_out->push->Observe(push_ms / 1e3);

    if (n > 0 || sync_every == 1) {  // with local SGD an empty batch has nothing to apply
      dense_optimizer->Apply(model->num_params(), dense_grad.data(), model->params().data(),
                             state.data());
    }
    if (sync_every > 1) PS_RETURN_IF_ERROR(collectives_until(step));
    if (rank == 0 && tr.dense_push_every() > 0 && (this_step + 1) % tr.dense_push_every() == 0) {
      PS_RETURN_IF_ERROR(client->PushDense(kDenseName, model->params(), DenseUpdate::kAssign));
    }
    // With every step's AllReduce, the evaluation due after this step (its pushes are done:
    // a sync evaluation sees the step applied).
    if (sync_every == 1) PS_RETURN_IF_ERROR(maybe_evaluate(this_step + 1));

    ++result.steps;
    my_samples += n;
    interval_samples += n;
    if (metrics_out) {
      metrics_out->step->Set(static_cast<double>(this_step + 1));
      metrics_out->samples->Increment(n);
    }
    if (n > 0) {
      interval_loss += loss;
      ++interval_batches;
      running_auc.Add(probs, absl::MakeConstSpan(d.batch.labels.data(), n));
    }

    if (!prefetch && step < total_steps) {
      PS_RETURN_IF_ERROR(read_batch(&next.batch));
      PS_RETURN_IF_ERROR(begin_pull(&next, step));
    }
    cur = 1 - cur;

    if (options.slowdown > 1.0) {  // this worker's own work, not its waits, takes longer
      absl::SleepFor((absl::Now() - step_start - waited) * (options.slowdown - 1.0));
    }
    const absl::Time now = absl::Now();
    balancer.Record(n, now - step_start - waited);
    // The first line after the first step, then one per interval; the rest at the end.
    if (result.steps == 1 || now - last_report >= options.progress_interval || step >= total_steps) {
      const double secs = absl::ToDoubleSeconds(now - last_report);
      const double rate = interval_samples / secs;
      if (interval_batches > 0) result.final_loss = interval_loss / interval_batches;
      const double mean_pull_ms = interval_steps > 0 ? interval_pull_ms / interval_steps : 0;
      const double mean_push_ms = interval_steps > 0 ? interval_push_ms / interval_steps : 0;
      if (metrics_out) {
        metrics_out->samples_per_second->Set(rate);
        metrics_out->loss->Set(result.final_loss);
        metrics_out->auc->Set(running_auc.Auc());
      }
      if (options.progress != nullptr) {
        absl::FPrintF(options.progress,
                      "worker %d: step %d/%d  batch %d  %.0f samples/s  loss %.4f  auc %.4f  "
                      "pull %.2f ms  push %.2f ms\n",
                      rank, this_step + 1, total_steps, n, rate, result.final_loss,
                      running_auc.Auc(), mean_pull_ms, mean_push_ms);
        std::fflush(options.progress);
      }
      if (metrics != nullptr) {
        absl::FPrintF(metrics,
                      "{\"rank\":%d,\"step\":%d,\"batch\":%d,\"seconds\":%.3f,"
                      "\"samples_per_s\":%.1f,\"loss\":%.6f,\"auc\":%.6f,\"pull_ms\":%.3f,"
                      "\"push_ms\":%.3f}\n",
                      rank, this_step + 1, n, absl::ToDoubleSeconds(now - start), rate,
                      result.final_loss, running_auc.Auc(), mean_pull_ms, mean_push_ms);
        std::fflush(metrics);
      }
      last_report = now;
      interval_pull_ms = 0;
      interval_push_ms = 0;
      interval_steps = 0;
      interval_loss = 0;
      interval_batches = 0;
      interval_samples = 0;
      running_auc.Reset();
    }
  }
  if (push.step >= 0) {
    PS_RETURN_IF_ERROR(FinishPush(&push));
    PS_RETURN_IF_ERROR(sync.AfterPush(push.step).status());
  }
  for (StepData& slot : slots) DrainPull(&slot);  // a prefetch past an early stop
  if (interval_batches > 0) result.final_loss = interval_loss / interval_batches;
  PS_RETURN_IF_ERROR(collectives_until(total_steps));
  if (sync_every > 1) {  // one model for everyone: the average
    PS_RETURN_IF_ERROR(allreduce->SumInPlace(model->params()));
    for (float& w : model->params()) w /= world;
  }
  if (checkpointer.has_value()) {  // a checkpoint at the last boundary may still ask
    checkpointer->AtBoundary(std::max(step, total_steps), model->params(), state);
    PS_RETURN_IF_ERROR(sync.Refresh(total_steps - 1));
    PS_RETURN_IF_ERROR(checkpointer->Answer(sync.checkpoint_notice()));
  }
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // Everyone is done pushing; the total of samples trained.
  float total = static_cast<float>(my_samples);
  PS_RETURN_IF_ERROR(allreduce->SumInPlace(absl::MakeSpan(&total, 1)));
  result.samples = static_cast<int64_t>(total);
  result.samples_per_s = result.seconds > 0 ? result.samples / result.seconds : 0;
  result.skipped_lines = reader->skipped_lines();
  result.mean_pull_ms = result.steps > 0 ? pull_ms_total / result.steps : 0;
  result.mean_push_ms = result.steps > 0 ? push_ms_total / result.steps : 0;
  result.mean_batch = result.steps > 0 ? static_cast<double>(my_samples) / result.steps : 0;
  if (rank == 0) {
    PS_RETURN_IF_ERROR(client->PushDense(kDenseName, model->params(), DenseUpdate::kAssign));
  }
  if (metrics != nullptr) std::fclose(metrics);

  // Worker 0 evaluates; one collective gives its figures to every worker's result.
  HeldoutMetrics heldout;
  if (rank == 0 && options.evaluate) {
    PS_ASSIGN_OR_RETURN(heldout, EvaluateHeldout(job, client, model.get(), -1));
  }
  bool no_stop = false;
  PS_RETURN_IF_ERROR(ShareFromWorkerZero(allreduce, &heldout, &no_stop));
  result.heldout_auc = heldout.auc;
  result.heldout_logloss = heldout.logloss;
  result.heldout_samples = heldout.samples;
  // Every worker's pushes are acknowledged (the sum of samples waited for all): the
  // end-of-training checkpoint, in sync mode at the boundary after the last step. Last of all,
  // after the final collective, so that the other workers do not wait in a collective (with its
  // timeout) for a checkpoint of any size, or for a periodic one under way before it.
  if (rank == 0 && !job.cluster().checkpoint_dir().empty() && job.cluster().checkpoint_at_end()) {
    const bool sync_mode = job.training().mode() == config::Training::SYNC;
    std::vector<rpc::CheckpointWorkerState> states;
    if (checkpointer.has_value()) states.push_back(checkpointer->Latest());
    absl::StatusOr<rpc::CheckpointResponse> taken = coordinator->Checkpoint(
        sync_mode ? std::max(step, total_steps) : -1, std::move(states), absl::Minutes(30));
    if (!taken.ok()) {
      return absl::Status(
          taken.status().code(),
          absl::StrCat("the end-of-training checkpoint failed: ", taken.status().message()));
    }
    std::fprintf(stderr,
                 "worker 0: checkpoint %llu at the end of training: %.1f MB in %.2f s, %s\n",
                 static_cast<unsigned long long>(taken->id()), taken->bytes() / 1e6,
                 taken->seconds(), taken->path().c_str());
    result.checkpoint = taken->path();
  }
  return result;
}

}  // namespace worker
}  // namespace ps

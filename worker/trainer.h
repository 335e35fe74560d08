// The training loop of one worker: read a batch, pull its embedding rows, forward and backward,
// push the embedding gradients, AllReduce the dense gradients among the workers and apply the
// dense optimizer; progress lines, a JSON-lines metrics file, and a held-out evaluation.
//
// Train is a loop over the stages of a step and the policies around it, each a component of its
// own: BatchReader (reading), StepPipeline (pulling and pushing under the mode's protocol,
// overlapping steps where the mode allows), StepCompute (the model and the dense optimizer),
// DenseSync (the dense collectives and the steps training runs), EvaluationPolicy (held-out
// evaluations and early stopping), CheckpointPolicy (the worker's part of checkpoints) and
// ProgressReporter (progress lines, metrics file, Prometheus series).
#ifndef PS_WORKER_TRAINER_H_
#define PS_WORKER_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/coordinator_client.h"
#include "common/metrics/registry.h"
#include "proto/job.pb.h"
#include "worker/collective/allreduce.h"
#include "worker/evaluation_policy.h"
#include "worker/model/model.h"
#include "worker/progress_report.h"
#include "worker/row_cache.h"
#include "worker/step_breakdown.h"

namespace ps {
namespace worker {

struct TrainerOptions {
  // Where progress lines go (after the first step, every progress_interval, and at the end);
  // null: nowhere. The metrics file gets a line at the same times.
  FILE* progress = stderr;
  absl::Duration progress_interval = absl::Seconds(5);
  // If set, one JSON object per progress report is appended to this file. Its pull_ms and
  // push_ms (as the progress lines') are the means per step over the report's interval.
  std::string metrics_path;
  // If set (not owned; outlives Train), the worker's Prometheus metrics go here, labelled with
  // its rank (WorkerMetrics).
  metrics::Registry* metrics = nullptr;
  // Evaluate on the job's eval_paths at the end (rank 0, for every worker's result). Evaluations
  // during training (training.eval_every_*) happen either way.
  bool evaluate = true;
  // Stop after this many steps even if the job asks for more (0: as the job says).
  int64_t max_steps = 0;
  // An induced straggler for experiments: after each step, sleep (slowdown - 1) times as long as
  // the step's own work took (its time less its waits on the other workers), so the worker runs
  // at 1 / slowdown of its speed. >= 1; 1: no slowdown.
  double slowdown = 1.0;
  // Overlap each step's read and pull with the step before, as far as the mode allows
  // (worker/step_pipeline.h); false: one after the other, for comparison (a SYNC run trains
  // exactly the same model either way).
  bool pipeline = true;
  // Where the model runs: CUDA when a device is present (kAuto), or as forced.
  Backend backend = Backend::kAuto;
  // A sync job restored from a checkpoint: its folder (ShardMap.restore_from) and its step t
  // (RegisterResponse.start_step, > 0). The worker starts at step t with the dense model and
  // dense optimizer state the checkpoint holds (WorkerCheckpointer::Load), reading the data from
  // block t on. Empty / 0: a fresh start.
  std::string resume_from;
  int64_t start_step = 0;
};

struct TrainResult {
  // "cpu" or "gpu".
  std::string backend;
  int64_t steps = 0;
  // Samples trained by all workers together, and their rate over this worker's training time.
  int64_t samples = 0;
  double samples_per_s = 0;
  double seconds = 0;
  double final_loss = 0;  // mean loss of the last progress interval
  // Held-out metrics at the end, evaluated by rank 0 (with evaluate and eval_paths; else NaN)
  // and handed to every worker.
  double heldout_auc = 0;
  double heldout_logloss = 0;
  int64_t heldout_samples = 0;
  int64_t skipped_lines = 0;
  // Bytes of training data this worker read (worker/batch_reader.h: binary files, only its
  // share; text, every file, as stored).
  int64_t read_bytes = 0;
  double mean_pull_ms = 0;
  double mean_push_ms = 0;
  // The breakdown of this worker's training time by part (StepBreakdown), from the start of
  // training to `seconds`: every step's, the first batch's read and pull before the first step,
  // and the time after the last step (the last push, the collectives left). Its total over
  // `steps` is the mean step time, about seconds / steps. copy_measured: whether its copy part
  // was measured (a backend with copies, the GPU; else it is zero, and reported as absent).
  StepTimes step_times;
  bool copy_measured = false;
  // This worker's samples per step: the job's batch_size, unless balance_batches gave it more
  // (a fast worker) or fewer (a slow one).
  double mean_batch = 0;
  // Worker 0 of a job with a checkpoint_dir and checkpoint_at_end: the folder of the checkpoint
  // taken once every worker finished. Empty otherwise.
  std::string checkpoint;
  // The evaluations during training (training.eval_every_*), in order; the same on every worker.
  std::vector<Evaluation> evaluations;
  // The step after which early stopping ended training (every worker the same), or -1.
  int64_t stopped_early_at = -1;
  // Early stopping's best model (training.early_stopping.restore_best): the step after which the
  // model kept was evaluated, when training stopped early and it was restored (every worker the
  // same), else -1; and, on worker 0, the folder of its checkpoint (else empty).
  int64_t kept_step = -1;
  std::string kept_checkpoint;
  // training.row_cache: what this worker's cache did over the run; nullopt without one.
  std::optional<RowCacheStats> row_cache;
};

// Trains the job's model on this worker's share of the data. `client` (registered as this
// worker), `coordinator` and `allreduce` (a group of every worker) are not owned.
//
// Modes (see StepSync): SYNC makes a pull at step t see exactly the pushes of steps < t of every
// worker (the servers sum the workers' gradients of a step and apply them once, when all have
// ended it); BOUNDED_STALENESS waits before a pull at step t until every worker has finished step
// t - staleness - 1; ASYNC never waits for pushes. In ASYNC and BOUNDED_STALENESS (staleness >= 2)
// the worker pipelines: it pulls the next batch's rows while it computes, and does not wait for
// its push before computing on; in SYNC it reads the next batch and starts its pull once a step's
// push is sent (the servers answer it when the step is applied: the same rows). In every mode the
// embedding push is in flight while the dense gradients are summed (TrainerOptions::pipeline).
//
// Dense part: with training.dense_sync_every = 1 the dense gradients are summed by AllReduce
// every step (all workers keep identical parameters); with k > 1 every worker applies its own
// gradients and the parameters are averaged every k steps and at the end (local SGD).
//
// Data: step t reads the next block of workers x batch_size lines of the training files (starting
// over at their end), and each worker trains on its part of the block: batch_size lines at
// rank x batch_size, or with training.balance_batches (BOUNDED_STALENESS and ASYNC) a share by
// speed (BatchBalancer). Every worker runs the same number of steps: job.training.steps, or
// epochs times the blocks in the data.
//
// Evaluation: with training.eval_every_epochs or eval_every_steps worker 0 evaluates the held-out
// data at those steps (a SYNC evaluation sees exactly the steps before it) and hands the figures,
// and with training.early_stopping its decision to stop, to every worker through the dense
// collective group; all workers then stop after the same step. With early_stopping.restore_best
// (and a checkpoint_dir) the best model is kept: worker 0 checkpoints the cluster after each
// evaluation that improved the metric, and when early stopping ended training that checkpoint is
// restored into the servers and every worker takes worker 0's dense state from then (BestModel),
// before the dense master copy, the final evaluation and the end-of-training checkpoint. At the
// end worker 0 evaluates once more and every worker's result carries the figures.
//
// Checkpoints (SYNC with a checkpoint_dir): the worker keeps its state at its latest step
// boundaries and gives the coordinator the one a checkpoint asks for (WorkerCheckpointer); worker
// 0 has the coordinator take one at the end, with its final state, when checkpoint_at_end.
//
// Errors: the client's, the collective's or the data's (NOT_FOUND for a missing file); those of
// WorkerCheckpointer::Load when resuming; the best model's checkpoints and restore; the
// end-of-training checkpoint's.
absl::StatusOr<TrainResult> Train(const config::Job& job, Client* client,
                                  CoordinatorClient* coordinator, uint32_t member_id,
                                  AllReduce* allreduce, const TrainerOptions& options);

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_TRAINER_H_

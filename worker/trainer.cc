#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/metrics.h"
#include "worker/model/dlrm.h"

namespace ps {
namespace worker {
namespace {

// The table of sparse field f.
std::string TableOfField(const config::Job& job, int f) {
  if (job.model().has_shared_table()) return job.model().shared_table();
  return job.tables(f).name();
}

// Gathers the keys of one table's fields into one call's keys.
struct FieldGroup {
  std::string table;
  std::vector<int> fields;
};

std::vector<FieldGroup> GroupFields(const config::Job& job, int num_sparse) {
  std::vector<FieldGroup> groups;
  for (int f = 0; f < num_sparse; ++f) {
    const std::string table = TableOfField(job, f);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const FieldGroup& g) { return g.table == table; });
    if (it == groups.end()) {
      groups.push_back(FieldGroup{table, {}});
      it = groups.end() - 1;
    }
    it->fields.push_back(f);
  }
  return groups;
}

// Pulls the embeddings of a batch: emb is size x num_sparse x dim.
absl::Status PullEmbeddings(Client* client, const std::vector<FieldGroup>& groups,
                            const Batch& batch, int num_sparse, int dim,
                            std::vector<uint64_t>* keys, std::vector<float>* rows,
                            std::vector<float>* emb) {
  emb->resize(size_t(batch.size) * num_sparse * dim);
  for (const FieldGroup& g : groups) {
    const size_t nf = g.fields.size();
    keys->resize(size_t(batch.size) * nf);
    for (int r = 0; r < batch.size; ++r) {
      for (size_t j = 0; j < nf; ++j) keys->at(r * nf + j) = batch.keys[size_t(r) * num_sparse + g.fields[j]];
    }
    rows->resize(keys->size() * dim);
    PS_RETURN_IF_ERROR(client->Pull(g.table, *keys, absl::MakeSpan(*rows)));
    for (int r = 0; r < batch.size; ++r) {
      for (size_t j = 0; j < nf; ++j) {
        std::memcpy(emb->data() + (size_t(r) * num_sparse + g.fields[j]) * dim,
                    rows->data() + (r * nf + j) * dim, dim * sizeof(float));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PushGradients(Client* client, const std::vector<FieldGroup>& groups,
                           const Batch& batch, int num_sparse, int dim, const float* emb_grad,
                           std::vector<uint64_t>* keys, std::vector<float>* grads) {
  for (const FieldGroup& g : groups) {
    const size_t nf = g.fields.size();
    keys->resize(size_t(batch.size) * nf);
    grads->resize(keys->size() * dim);
    for (int r = 0; r < batch.size; ++r) {
      for (size_t j = 0; j < nf; ++j) {
        const size_t src = size_t(r) * num_sparse + g.fields[j];
        keys->at(r * nf + j) = batch.keys[src];
        std::memcpy(grads->data() + (r * nf + j) * dim, emb_grad + src * dim, dim * sizeof(float));
      }
    }
    PS_RETURN_IF_ERROR(client->Push(g.table, *keys, *grads));
  }
  return absl::OkStatus();
}

// The dense parameters' name on the servers (the master copy).
constexpr char kDenseName[] = "dense/model";

}  // namespace

absl::StatusOr<TrainResult> Train(const config::Job& job, Client* client,
                                  CoordinatorClient* coordinator, uint32_t member_id,
                                  AllReduce* allreduce, const TrainerOptions& options) {
  PS_ASSIGN_OR_RETURN(const DlrmShape shape, DlrmShape::FromJob(job));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Dlrm> model, Dlrm::Create(shape, job.training().seed()));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> dense_optimizer,
                      Optimizer::Create(job.training().dense_optimizer()));
  const int rank = allreduce->rank();
  const int world = allreduce->size();
  const SchemaOptions schema{shape.num_dense, shape.num_sparse};
  std::vector<std::string> train_paths(job.data().train_paths().begin(),
                                       job.data().train_paths().end());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                      CriteoReader::Open(train_paths, rank, world, schema));

  const config::Training& tr = job.training();
  const int batch_size = static_cast<int>(tr.batch_size());
  const int64_t max_steps =
      options.max_steps > 0 ? options.max_steps
                            : (tr.steps() > 0 ? static_cast<int64_t>(tr.steps())
                                              : std::numeric_limits<int64_t>::max());
  const int epochs = tr.steps() > 0 ? std::numeric_limits<int>::max()
                                    : static_cast<int>(std::max<uint32_t>(1, tr.epochs()));
  const int dim = shape.emb_dim;
  const std::vector<FieldGroup> groups = GroupFields(job, shape.num_sparse);

  std::vector<float> state(dense_optimizer->StateFloats(model->num_params()));
  dense_optimizer->InitState(model->num_params(), state.data());
  std::vector<float> dense_grad(model->num_params());
  std::vector<float> emb, emb_grad, probs, rows, grads;
  std::vector<uint64_t> keys;
  Batch batch;

  std::FILE* metrics = nullptr;
  if (!options.metrics_path.empty()) {
    metrics = std::fopen(options.metrics_path.c_str(), "a");
    if (metrics == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot open metrics file %s", options.metrics_path));
    }
  }

  TrainResult result;
  StreamingAuc running_auc;
  double interval_loss = 0;
  int64_t interval_batches = 0, interval_samples = 0, my_samples = 0;
  double pull_ms_total = 0, push_ms_total = 0;
  const absl::Time start = absl::Now();
  absl::Time last_report = start;
  int epoch = 0;
  const config::Training::Mode mode = tr.mode();

  for (int64_t step = 0; step < max_steps; ++step) {
    absl::StatusOr<int> got = reader->Next(batch_size, &batch);
    if (!got.ok()) return got.status();
    if (*got == 0 && epoch + 1 < epochs) {
      ++epoch;
      PS_RETURN_IF_ERROR(reader->Rewind());
      got = reader->Next(batch_size, &batch);
      if (!got.ok()) return got.status();
    }
    // Every worker runs the same steps: stop as soon as one has no batch.
    float have = *got > 0 ? 1.0f : 0.0f;
    PS_RETURN_IF_ERROR(allreduce->SumInPlace(absl::MakeSpan(&have, 1)));
    if (have < world) break;

    client->SetClock(step);
    if (mode == config::Training::BOUNDED_STALENESS && step - tr.staleness() - 1 >= 0) {
      PS_RETURN_IF_ERROR(
          coordinator->WaitClock(step - tr.staleness() - 1, absl::Minutes(10)).status());
    }
    const absl::Time t_pull = absl::Now();
    PS_RETURN_IF_ERROR(
        PullEmbeddings(client, groups, batch, shape.num_sparse, dim, &keys, &rows, &emb));
    pull_ms_total += absl::ToDoubleMilliseconds(absl::Now() - t_pull);

    emb_grad.resize(emb.size());
    probs.resize(batch.size);
    const float loss = model->ForwardBackward(batch.size, batch.dense.data(), emb.data(),
                                              batch.labels.data(), 1.0f / world,
                                              dense_grad.data(), emb_grad.data(), probs.data());
    PS_RETURN_IF_ERROR(allreduce->SumInPlace(absl::MakeSpan(dense_grad)));

    const absl::Time t_push = absl::Now();
    PS_RETURN_IF_ERROR(PushGradients(client, groups, batch, shape.num_sparse, dim,
                                     emb_grad.data(), &keys, &grads));
    push_ms_total += absl::ToDoubleMilliseconds(absl::Now() - t_push);
    if (mode == config::Training::SYNC) {
      // The servers apply the step's summed gradients once every worker has ended it, and hold
      // pulls of step t + 1 until then.
      PS_RETURN_IF_ERROR(client->EndStep(step));
    } else if (mode == config::Training::BOUNDED_STALENESS) {
      PS_RETURN_IF_ERROR(coordinator->ReportClock(member_id, step).status());
    }
    dense_optimizer->Apply(model->num_params(), dense_grad.data(), model->params().data(),
                           state.data());
    if (rank == 0 && tr.dense_push_every() > 0 && (step + 1) % tr.dense_push_every() == 0) {
      PS_RETURN_IF_ERROR(client->PushDense(kDenseName, model->params(), DenseUpdate::kAssign));
    }

    result.steps = step + 1;
    my_samples += batch.size;
    interval_samples += batch.size;
    interval_loss += loss;
    ++interval_batches;
    running_auc.Add(probs, batch.labels);
    const absl::Time now = absl::Now();
    if (now - last_report >= options.progress_interval) {
      const double secs = absl::ToDoubleSeconds(now - last_report);
      const double rate = interval_samples / secs;
      result.final_loss = interval_loss / interval_batches;
      const double pull_ms = pull_ms_total / result.steps;
      const double push_ms = push_ms_total / result.steps;
      if (options.progress != nullptr) {
        absl::FPrintF(options.progress,
                      "worker %d: step %d  %.0f samples/s  loss %.4f  auc %.4f  pull %.2f ms  "
                      "push %.2f ms\n",
                      rank, step + 1, rate, result.final_loss, running_auc.Auc(), pull_ms,
                      push_ms);
        std::fflush(options.progress);
      }
      if (metrics != nullptr) {
        absl::FPrintF(metrics,
                      "{\"rank\":%d,\"step\":%d,\"seconds\":%.3f,\"samples_per_s\":%.1f,"
                      "\"loss\":%.6f,\"auc\":%.6f,\"pull_ms\":%.3f,\"push_ms\":%.3f}\n",
                      rank, step + 1, absl::ToDoubleSeconds(now - start), rate, result.final_loss,
                      running_auc.Auc(), pull_ms, push_ms);
        std::fflush(metrics);
      }
      last_report = now;
      interval_loss = 0;
      interval_batches = 0;
      interval_samples = 0;
      running_auc.Reset();
    }
  }
  if (interval_batches > 0) result.final_loss = interval_loss / interval_batches;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // Everyone is done pushing; the total of samples trained.
  float total = static_cast<float>(my_samples);
  PS_RETURN_IF_ERROR(allreduce->SumInPlace(absl::MakeSpan(&total, 1)));
  result.samples = static_cast<int64_t>(total);
  result.samples_per_s = result.seconds > 0 ? result.samples / result.seconds : 0;
  result.skipped_lines = reader->skipped_lines();
  result.mean_pull_ms = result.steps > 0 ? pull_ms_total / result.steps : 0;
  result.mean_push_ms = result.steps > 0 ? push_ms_total / result.steps : 0;
  if (rank == 0) {
    PS_RETURN_IF_ERROR(client->PushDense(kDenseName, model->params(), DenseUpdate::kAssign));
  }
  if (metrics != nullptr) std::fclose(metrics);

  result.heldout_auc = std::numeric_limits<double>::quiet_NaN();
  result.heldout_logloss = std::numeric_limits<double>::quiet_NaN();
  if (rank == 0 && options.evaluate && job.data().eval_paths_size() > 0) {
    std::vector<std::string> eval_paths(job.data().eval_paths().begin(),
                                        job.data().eval_paths().end());
    PS_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> eval,
                        CriteoReader::Open(eval_paths, 0, 1, schema));
    std::vector<float> all_probs, all_labels;
    while (true) {
      PS_ASSIGN_OR_RETURN(const int n, eval->Next(4096, &batch));
      if (n == 0) break;
      PS_RETURN_IF_ERROR(
          PullEmbeddings(client, groups, batch, shape.num_sparse, dim, &keys, &rows, &emb));
      probs.resize(n);
      model->Predict(n, batch.dense.data(), emb.data(), probs.data());
      all_probs.insert(all_probs.end(), probs.begin(), probs.end());
      all_labels.insert(all_labels.end(), batch.labels.begin(), batch.labels.begin() + n);
    }
    result.heldout_samples = static_cast<int64_t>(all_probs.size());
    result.heldout_auc = Auc(all_probs, all_labels);
    result.heldout_logloss = LogLoss(all_probs, all_labels);
  }
  return result;
}

}  // namespace worker
}  // namespace ps

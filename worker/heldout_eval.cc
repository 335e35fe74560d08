#include "worker/heldout_eval.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "worker/data/classifier_metrics.h"
#include "worker/data/criteo_reader.h"
#include "worker/embedding_io.h"
#include "worker/model/model_spec.h"

namespace ps {
namespace worker {

absl::StatusOr<HeldoutMetrics> EvaluateHeldout(const config::Job& job, Client* client,
                                               Model* model, int64_t clock) {
  HeldoutMetrics metrics;
  if (job.data().eval_paths_size() == 0) return metrics;
  PS_ASSIGN_OR_RETURN(const ModelSpec spec, ModelSpec::FromJob(job));
  // The embedding IO still reads one dim for every field and no linear inputs (its rewrite for
  // ModelSpec's layout is under way): the first field's dim stands for all.
  if (spec.num_linear > 0 || spec.field_dims.empty() ||
      std::count(spec.field_dims.begin(), spec.field_dims.end(), spec.field_dims[0]) !=
          spec.num_fields()) {
    return absl::UnimplementedError(
        "held-out evaluation of fields of different dims or linear inputs is not implemented yet");
  }
  const int num_sparse = spec.num_fields();
  const int dim = spec.field_dims[0];
  const std::vector<FieldGroup> groups = GroupFields(job, num_sparse);
  std::vector<std::string> paths(job.data().eval_paths().begin(), job.data().eval_paths().end());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                      CriteoReader::Open(paths, 0, 1, {spec.num_dense, num_sparse}));
  std::vector<float> all_probs, all_labels, probs;
  StepData d;
  client->SetClock(clock);
  while (true) {
    PS_ASSIGN_OR_RETURN(const int n, reader->Next(4096, &d.batch));
    if (n == 0) break;
    StartPull(client, groups, num_sparse, dim, &d);
    PS_RETURN_IF_ERROR(FinishPull(groups, num_sparse, dim, &d));
    probs.resize(n);
    model->Predict(n, d.batch.dense.data(), d.emb.data(), probs.data());
    all_probs.insert(all_probs.end(), probs.begin(), probs.end());
    all_labels.insert(all_labels.end(), d.batch.labels.begin(), d.batch.labels.begin() + n);
  }
  metrics.samples = static_cast<int64_t>(all_probs.size());
  if (metrics.samples > 0) {
    metrics.auc = Auc(all_probs, all_labels);
    metrics.logloss = LogLoss(all_probs, all_labels);
  }
  return metrics;
}

}  // namespace worker
}  // namespace ps

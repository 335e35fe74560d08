#include "worker/heldout_eval.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "worker/data/binary_format.h"
#include "worker/data/classifier_metrics.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/schema.h"
#include "worker/embedding_io.h"
#include "worker/model/model_spec.h"

namespace ps {
namespace worker {
namespace {

// Held-out samples evaluated at once.
constexpr int kEvalBatch = 4096;

}  // namespace

absl::StatusOr<HeldoutMetrics> EvaluateHeldout(const config::Job& job, Client* client,
                                               Model* model, int64_t clock) {
  HeldoutMetrics metrics;
  if (job.data().eval_paths_size() == 0) return metrics;
  PS_ASSIGN_OR_RETURN(const ModelSpec spec, ModelSpec::FromJob(job));
  PS_ASSIGN_OR_RETURN(const EmbeddingLayout layout, EmbeddingLayout::FromJob(job, spec));
  PS_ASSIGN_OR_RETURN(SchemaOptions schema, SchemaOf(job));
  std::vector<std::string> paths(job.data().eval_paths().begin(), job.data().eval_paths().end());
  // The held-out samples in batches: text through the text reader, binary files by range.
  std::function<absl::StatusOr<int>(Batch*)> next;
  std::unique_ptr<CriteoReader> text;
  std::unique_ptr<BinaryReader> binary;
  int64_t position = 0;
  if (job.data().format() == config::Data::BINARY) {
    PS_ASSIGN_OR_RETURN(binary, BinaryReader::Open(paths, BinarySchema::Of(schema)));
    next = [&](Batch* batch) -> absl::StatusOr<int> {
      const int64_t n = std::min<int64_t>(kEvalBatch, binary->samples() - position);
      if (n <= 0) {
        batch->size = 0;
        return 0;
      }
      PS_RETURN_IF_ERROR(binary->Read(position, n, batch));
      position += n;
      return static_cast<int>(n);
    };
  } else {
    PS_ASSIGN_OR_RETURN(text, CriteoReader::Open(paths, 0, 1, std::move(schema)));
    next = [&](Batch* batch) { return text->Next(kEvalBatch, batch); };
  }
  std::vector<float> all_probs, all_labels, probs;
  StepData d;
  client->SetClock(clock);
  while (true) {
    PS_ASSIGN_OR_RETURN(const int n, next(&d.batch));
    if (n == 0) break;
    StartPull(client, layout, &d);
    PS_RETURN_IF_ERROR(FinishPull(layout, &d));
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

// The computing stage of a training step: the model's forward and backward pass over a batch and
// its pulled rows, and the dense optimizer's update of the model's own parameters.
//
// Every sample weighs the same in the gradients: 1 / (workers x batch_size) of a step's gradient
// when the dense gradients are summed by AllReduce every step (dense_sync_every 1), 1 /
// batch_size of a worker's own with local SGD (dense_sync_every > 1). A balanced batch bigger or
// smaller than batch_size scales its mean's gradient accordingly.
#ifndef PS_WORKER_STEP_COMPUTE_H_
#define PS_WORKER_STEP_COMPUTE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/optimizer.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/embedding_io.h"
#include "worker/model/model.h"
#include "worker/model/model_spec.h"

namespace ps {
namespace worker {

// A StepCompute holds the model, the dense optimizer and its state, and the buffers of one step's
// gradients and predictions. Thread-compatible.
class StepCompute {
 public:
  // The job's model on `backend` (initialised from training.seed) and its dense optimizer, for
  // one of `world` workers; `balanced`: batches are shared by speed (BatchBalancer). Errors:
  // ModelSpec::FromJob's, CreateModel's and Optimizer::Create's.
  static absl::StatusOr<std::unique_ptr<StepCompute>> Create(const config::Job& job,
                                                             Backend backend, int world,
                                                             bool balanced);

  StepCompute(const StepCompute&) = delete;
  StepCompute& operator=(const StepCompute&) = delete;

  const ModelSpec& spec() const { return spec_; }
  Model* model() { return model_.get(); }
  absl::Span<float> params() { return model_->params(); }
  // The dense optimizer's state (Optimizer::StateFloats of the parameters), initialised.
  absl::Span<float> optimizer_state() { return absl::MakeSpan(state_); }

  // Forward and backward over `batch` with its pooled rows (`rows`, laid out as StepData::emb),
  // on the host's pooling whatever the backend. Fills
  // dense_grad(), emb_grad() (laid out as rows) and probs() (one per sample), and returns the
  // batch's mean loss; an empty batch (the part of a short last block) gives zero dense
  // gradients and a loss of 0.
  float ForwardBackward(const Batch& batch, const std::vector<float>& rows);

  // The step over `d`'s batch, pulled (StartPull) and waited for (FinishPull or AwaitPull), with
  // `layout` the pull's. Routed by the model's backend: when the rows are not pooled yet
  // (AwaitPull, !d->pooled) and the model pools_rows() (the GPU), the model pools them on its
  // device and gives back the gradient of every distinct key's row in row_grads()
  // (rows_on_device() true: push them with StartPushRows); otherwise the rows are pooled on the
  // host when they are not yet (PoolRows into d->emb, exactly as FinishPull does) and the step is
  // ForwardBackward(d->batch, d->emb) (rows_on_device() false: push emb_grad() with StartPush).
  // Fills dense_grad() and probs() either way and returns the batch's mean loss (0 and zero
  // gradients for an empty batch). Errors: the model's ForwardBackwardRows' (INVALID_ARGUMENT,
  // RESOURCE_EXHAUSTED, INTERNAL; the outputs are then unspecified).
  absl::StatusOr<float> ForwardBackward(const EmbeddingLayout& layout, StepData* d);

  // Whether the last ForwardBackward(layout, d) left the rows' gradients in row_grads() (else
  // the gradient of the pooled inputs in emb_grad()).
  bool rows_on_device() const { return rows_on_device_; }
  // Per table of the layout, each distinct key's row gradient (StartPushRows takes them).
  std::vector<std::vector<float>>* row_grads() { return &row_grads_; }

  absl::Span<float> dense_grad() { return absl::MakeSpan(dense_grad_); }
  const std::vector<float>& emb_grad() const { return emb_grad_; }
  const std::vector<float>& probs() const { return probs_; }

  // Applies dense_grad() to the parameters with the dense optimizer, after a step of `samples`
  // samples: always with dense_sync_every 1 (the gradients are everyone's), and with local SGD
  // only when the batch was not empty.
  void ApplyDense(int samples);

 private:
  StepCompute(const ModelSpec& spec, std::unique_ptr<Model> model,
              std::unique_ptr<Optimizer> optimizer, int world, int batch_size, int sync_every,
              bool balanced);

  // The factor of a batch of n samples' mean loss (the header's comment).
  float LossScale(int n) const;

  // Constant after construction.
  const ModelSpec spec_;
  const std::unique_ptr<Model> model_;
  const std::unique_ptr<Optimizer> optimizer_;
  const int world_;
  const int batch_size_;
  const int sync_every_;
  const bool balanced_;

  std::vector<float> state_;
  std::vector<float> dense_grad_;
  std::vector<float> emb_grad_;
  std::vector<std::vector<float>> row_grads_;
  bool rows_on_device_ = false;
  std::vector<float> probs_;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_STEP_COMPUTE_H_

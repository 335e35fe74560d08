#include "worker/step_compute.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"

namespace ps {
namespace worker {

absl::StatusOr<std::unique_ptr<StepCompute>> StepCompute::Create(const config::Job& job,
                                                                 Backend backend, int world,
                                                                 bool balanced) {
  PS_ASSIGN_OR_RETURN(const ModelSpec spec, ModelSpec::FromJob(job));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      CreateModel(spec, job.training().seed(), backend));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                      Optimizer::Create(job.training().dense_optimizer()));
  const config::Training& tr = job.training();
  return std::unique_ptr<StepCompute>(new StepCompute(
      spec, std::move(model), std::move(optimizer), world, static_cast<int>(tr.batch_size()),
      static_cast<int>(std::max<uint32_t>(1, tr.dense_sync_every())), balanced));
}

StepCompute::StepCompute(const ModelSpec& spec, std::unique_ptr<Model> model,
                         std::unique_ptr<Optimizer> optimizer, int world, int batch_size,
                         int sync_every, bool balanced)
    : spec_(spec),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      world_(world),
      batch_size_(batch_size),
      sync_every_(sync_every),
      balanced_(balanced),
      state_(optimizer_->StateFloats(model_->num_params())),
      dense_grad_(model_->num_params()) {
  optimizer_->InitState(model_->num_params(), state_.data());
}

float StepCompute::LossScale(int n) const {
  float loss_scale = sync_every_ == 1 ? 1.0f / world_ : 1.0f;
  if (balanced_) loss_scale *= static_cast<float>(n) / batch_size_;
  return loss_scale;
}

float StepCompute::ForwardBackward(const Batch& batch, const std::vector<float>& rows) {
  rows_on_device_ = false;
  const int n = batch.size;
  emb_grad_.resize(rows.size());
  probs_.resize(n);
  const float loss_scale = LossScale(n);
  if (n == 0) {  // the step goes on with nothing to add
    std::fill(dense_grad_.begin(), dense_grad_.end(), 0.0f);
    return 0.0f;
  }
  return model_->ForwardBackward(n, batch.dense.data(), rows.data(), batch.labels.data(),
                                 loss_scale, dense_grad_.data(), emb_grad_.data(), probs_.data());
}

absl::StatusOr<float> StepCompute::ForwardBackward(const EmbeddingLayout& layout, StepData* d) {
  if (d->pooled || d->direct || !model_->pools_rows()) {
    if (!d->pooled && !d->direct) {
      PoolRows(layout, d->batch.size, d->tables, d->rows, d->emb.data());
      d->pooled = true;
    }
    return ForwardBackward(d->batch, d->emb);
  }
  rows_on_device_ = true;
  const int n = d->batch.size;
  probs_.resize(n);
  if (n == 0) {  // no keys: nothing to push but empty tables
    row_grads_.resize(layout.tables().size());
    for (std::vector<float>& g : row_grads_) g.clear();
    std::fill(dense_grad_.begin(), dense_grad_.end(), 0.0f);
    return 0.0f;
  }
  const float loss_scale = LossScale(n);
  return model_->ForwardBackwardRows(PooledInputOf(layout, *d), loss_scale, dense_grad_.data(),
                                     &row_grads_, probs_.data());
}

void StepCompute::ApplyDense(int samples) {
  if (samples == 0 && sync_every_ > 1) return;  // local SGD: an empty batch has nothing to apply
  optimizer_->Apply(model_->num_params(), dense_grad_.data(), model_->params().data(),
                    state_.data());
}

}  // namespace worker
}  // namespace ps

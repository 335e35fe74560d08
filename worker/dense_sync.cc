#include "worker/dense_sync.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"

namespace ps {
namespace worker {

DenseSync::DenseSync(AllReduce* allreduce, Client* client, absl::Span<float> params,
                     Options options, WaitTime* waited)
    : allreduce_(allreduce),
      client_(client),
      params_(params),
      options_(std::move(options)),
      waited_(waited),
      end_(options_.end_step),
      gradient_rounds_(options_.start_step),
      averaging_rounds_(options_.start_step / options_.sync_every) {}

absl::StatusOr<int64_t> DenseSync::CatchUp(int64_t next_step) {
  PS_RETURN_IF_ERROR(waited_->Measure([&] { return JoinUntil(next_step); }));
  return end_;
}

absl::Status DenseSync::JoinUntil(int64_t next_step) {
  // end_ shrinks when an evaluation on the way ends training early.
  if (options_.sync_every == 1) {
    zeros_.assign(params_.size(), 0.0f);
    for (; gradient_rounds_ < std::min(next_step, end_); ++gradient_rounds_) {
      PS_RETURN_IF_ERROR(allreduce_->SumInPlace(absl::MakeSpan(zeros_)));
      PS_RETURN_IF_ERROR(AfterCollectiveAt(gradient_rounds_ + 1));
    }
    return absl::OkStatus();
  }
  const int64_t k = options_.sync_every;
  for (; averaging_rounds_ < std::min(next_step, end_) / k; ++averaging_rounds_) {
    PS_RETURN_IF_ERROR(Average());
    PS_RETURN_IF_ERROR(ExchangeSpeeds((averaging_rounds_ + 1) * k));
    PS_RETURN_IF_ERROR(AfterCollectiveAt((averaging_rounds_ + 1) * k));
  }
  return absl::OkStatus();
}

absl::Status DenseSync::SumGradients(int64_t step, absl::Span<float> grad,
                                     absl::Duration* allreduce_time) {
  PS_RETURN_IF_ERROR(CatchUp(step).status());
  const absl::Time start = absl::Now();
  PS_RETURN_IF_ERROR(waited_->Measure([&] { return allreduce_->SumInPlace(grad); }));
  *allreduce_time = absl::Now() - start;
  gradient_rounds_ = step + 1;
  return waited_->Measure([&] { return ExchangeSpeeds(step + 1); });
}

absl::Status DenseSync::StepDone(int64_t step, int64_t next_step) {
  if (options_.sync_every > 1) PS_RETURN_IF_ERROR(CatchUp(next_step).status());
  if (options_.push_every > 0 && (step + 1) % options_.push_every == 0) {
    PS_RETURN_IF_ERROR(PushModel());
  }
  // With every step's AllReduce, what follows the step's collective (its pushes are done: a sync
  // evaluation sees the step applied).
  if (options_.sync_every == 1) PS_RETURN_IF_ERROR(AfterCollectiveAt(step + 1));
  return absl::OkStatus();
}

absl::Status DenseSync::Finish() {
  PS_RETURN_IF_ERROR(CatchUp(end_).status());
  if (options_.sync_every > 1) PS_RETURN_IF_ERROR(Average());  // one model for everyone
  return absl::OkStatus();
}

absl::Status DenseSync::PushModel() {
  if (allreduce_->rank() != 0) return absl::OkStatus();
  return client_->PushDense(kDenseModelName, params_, DenseUpdate::kAssign);
}

absl::Status DenseSync::ExchangeSpeeds(int64_t steps_done) {
  BatchBalancer* const balancer = options_.balancer;
  if (balancer == nullptr || steps_done < next_balance_) return absl::OkStatus();
  next_balance_ = steps_done + kBalanceEverySteps;
  // The workers' speeds since the last exchange, summed over the group, give new batch shares.
  figures_.assign(balancer->ExchangeFloats(), 0.0f);
  balancer->Report(allreduce_->rank(), absl::MakeSpan(figures_));
  PS_RETURN_IF_ERROR(allreduce_->SumInPlace(absl::MakeSpan(figures_)));
  return balancer->Update(figures_);
}

absl::Status DenseSync::AfterCollectiveAt(int64_t steps_done) {
  if (steps_done >= end_ || !options_.after_collective) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(const bool stop, options_.after_collective(steps_done));
  if (stop) end_ = steps_done;
  return absl::OkStatus();
}

absl::Status DenseSync::Average() {
  PS_RETURN_IF_ERROR(allreduce_->SumInPlace(params_));
  for (float& w : params_) w /= allreduce_->size();
  return absl::OkStatus();
}

}  // namespace worker
}  // namespace ps

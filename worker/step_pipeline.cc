#include "worker/step_pipeline.h"

#include <utility>

#include "common/status_macros.h"

namespace ps {
namespace worker {

StepPipeline::Overlap StepPipeline::OverlapOf(const StepSync& sync, bool pipeline) {
  if (!pipeline) return Overlap::kNone;
  if (sync.can_prefetch()) return Overlap::kPrefetch;
  return sync.mode() == config::Training::SYNC ? Overlap::kPullAhead : Overlap::kNone;
}

StepPipeline::StepPipeline(Client* client, StepSync* sync, BatchReader* reader,
                           EmbeddingLayout layout, WaitTime* waited, StepBreakdown* breakdown,
                           bool pipeline, RowCache* cache)
    : client_(client),
      sync_(sync),
      reader_(reader),
      waited_(waited),
      breakdown_(breakdown),
      cache_(cache),
      layout_(std::move(layout)),
      overlap_(OverlapOf(*sync, pipeline)) {}

absl::Status StepPipeline::BeginPull(StepData* d, int64_t step) {
  PS_RETURN_IF_ERROR(waited_->Measure([&] { return sync_->BeforePull(step); }));
  client_->SetClock(step);
  StartPull(client_, layout_, d, cache_, step);
  return absl::OkStatus();
}

absl::Status StepPipeline::ReadAndPull(StepData* d, int64_t step) {
  auto read = [&] { return reader_->Next(&d->batch); };
  PS_RETURN_IF_ERROR(breakdown_ != nullptr ? breakdown_->Measure(StepPart::kRead, read) : read());
  return BeginPull(d, step);
}

absl::Status StepPipeline::Start(int64_t step) { return ReadAndPull(&slots_[cur_], step); }

absl::StatusOr<bool> StepPipeline::AwaitRows(
    int64_t* step, absl::FunctionRef<absl::StatusOr<int64_t>(int64_t)> catch_up) {
  StepData& d = slots_[cur_];
  absl::Status pulled = WaitPull(&d);
  while (pulled.code() == absl::StatusCode::kAborted && sync_->mode() == config::Training::SYNC) {
    // A straggler outside the quorum: the cluster applied this step without us. Catch up
    // (joining the collectives of the steps skipped) and pull the same batch again for the
    // step the cluster is at (again if the quorum applied that one too in the meantime).
    PS_ASSIGN_OR_RETURN(*step, sync_->AfterPush(*step));
    PS_ASSIGN_OR_RETURN(const int64_t end, catch_up(*step));
    if (*step >= end) return false;
    PS_RETURN_IF_ERROR(BeginPull(&d, *step));
    pulled = WaitPull(&d);
  }
  PS_RETURN_IF_ERROR(pulled);
  return true;
}

absl::Status StepPipeline::Prefetch(int64_t next_step, int64_t end) {
  if (overlap_ != Overlap::kPrefetch || next_step >= end) return absl::OkStatus();
  return ReadAndPull(&slots_[1 - cur_], next_step);
}

absl::Status StepPipeline::FinishPendingPush() {
  if (push_.step < 0) return absl::OkStatus();
  PS_RETURN_IF_ERROR(FinishPush(&push_));
  PS_RETURN_IF_ERROR(sync_->AfterPush(push_.step).status());
  push_.step = -1;
  return absl::OkStatus();
}

absl::Status StepPipeline::WaitPull(StepData* d) {
  return pool_on_device_ ? AwaitPull(layout_, d) : FinishPull(layout_, d);
}

absl::Status StepPipeline::BeginPush(int64_t step, const std::vector<float>& emb_grad) {
  return BeginPushWith(step,
                       [&] { StartPush(client_, layout_, slots_[cur_], emb_grad, step, &push_); });
}

absl::Status StepPipeline::BeginPushRows(int64_t step, std::vector<std::vector<float>>* row_grads) {
  return BeginPushWith(
      step, [&] { StartPushRows(client_, layout_, slots_[cur_], row_grads, step, &push_); });
}

absl::Status StepPipeline::BeginPushWith(int64_t step, absl::FunctionRef<void()> start) {
  PS_RETURN_IF_ERROR(FinishPendingPush());  // the previous step's (kPrefetch)
  client_->SetClock(step);
  start();
  return absl::OkStatus();
}

absl::Status StepPipeline::PullAhead(int64_t next_step, int64_t end) {
  if (overlap_ != Overlap::kPullAhead || next_step >= end) return absl::OkStatus();
  PS_RETURN_IF_ERROR(ReadAndPull(&slots_[1 - cur_], next_step));
  ahead_step_ = next_step;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> StepPipeline::EndPush(int64_t end) {
  const int64_t step = push_.step;
  if (overlap_ == Overlap::kPrefetch) return step + 1;
  PS_RETURN_IF_ERROR(FinishPush(&push_));
  PS_ASSIGN_OR_RETURN(const int64_t next, sync_->AfterPush(step));
  push_.step = -1;
  if (ahead_step_ >= 0 && ahead_step_ != next) {
    // The cluster went on without this worker: the batch read ahead is pulled again for the step
    // it goes on with (as Advance would read it then).
    StepData* d = &slots_[1 - cur_];
    DrainPull(d);
    ahead_step_ = -1;
    if (next < end) {
      PS_RETURN_IF_ERROR(BeginPull(d, next));
      ahead_step_ = next;
    }
  }
  return next;
}

absl::Status StepPipeline::Advance(int64_t next_step, int64_t end) {
  if (overlap_ == Overlap::kNone && next_step < end) {
    PS_RETURN_IF_ERROR(ReadAndPull(&slots_[1 - cur_], next_step));
  }
  ahead_step_ = -1;
  cur_ = 1 - cur_;
  return absl::OkStatus();
}

absl::Status StepPipeline::Finish() {
  PS_RETURN_IF_ERROR(FinishPendingPush());
  for (StepData& slot : slots_) DrainPull(&slot);
  return absl::OkStatus();
}

}  // namespace worker
}  // namespace ps

#include "worker/step_pipeline.h"

#include <utility>

#include "common/status_macros.h"

namespace ps {
namespace worker {

StepPipeline::StepPipeline(Client* client, StepSync* sync, BatchReader* reader,
                           EmbeddingLayout layout, WaitTime* waited, StepBreakdown* breakdown,
                           RowCache* cache)
    : client_(client),
      sync_(sync),
      reader_(reader),
      waited_(waited),
      breakdown_(breakdown),
      cache_(cache),
      layout_(std::move(layout)),
      pipelined_(sync->can_prefetch()) {}

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
  absl::Status pulled = FinishPull(layout_, &d);
  while (pulled.code() == absl::StatusCode::kAborted && sync_->mode() == config::Training::SYNC) {
    // A straggler outside the quorum: the cluster applied this step without us. Catch up
    // (joining the collectives of the steps skipped) and pull the same batch again for the
    // step the cluster is at (again if the quorum applied that one too in the meantime).
    PS_ASSIGN_OR_RETURN(*step, sync_->AfterPush(*step));
    PS_ASSIGN_OR_RETURN(const int64_t end, catch_up(*step));
    if (*step >= end) return false;
    PS_RETURN_IF_ERROR(BeginPull(&d, *step));
    pulled = FinishPull(layout_, &d);
  }
  PS_RETURN_IF_ERROR(pulled);
  return true;
}

absl::Status StepPipeline::Prefetch(int64_t next_step, int64_t end) {
  if (!pipelined_ || next_step >= end) return absl::OkStatus();
  return ReadAndPull(&slots_[1 - cur_], next_step);
}

absl::Status StepPipeline::FinishPendingPush() {
  if (push_.step < 0) return absl::OkStatus();
  PS_RETURN_IF_ERROR(FinishPush(&push_));
  PS_RETURN_IF_ERROR(sync_->AfterPush(push_.step).status());
  push_.step = -1;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> StepPipeline::Push(int64_t step, const std::vector<float>& emb_grad) {
  PS_RETURN_IF_ERROR(FinishPendingPush());  // the previous step's (pipelined)
  client_->SetClock(step);
  StartPush(client_, layout_, slots_[cur_], emb_grad, step, &push_);
  if (pipelined_) return step + 1;
  PS_RETURN_IF_ERROR(FinishPush(&push_));
  PS_ASSIGN_OR_RETURN(const int64_t next, sync_->AfterPush(step));
  push_.step = -1;
  return next;
}

absl::Status StepPipeline::Advance(int64_t next_step, int64_t end) {
  if (!pipelined_ && next_step < end) PS_RETURN_IF_ERROR(ReadAndPull(&slots_[1 - cur_], next_step));
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

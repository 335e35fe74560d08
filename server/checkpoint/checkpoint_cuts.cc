#include "server/checkpoint/checkpoint_cuts.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace ps {
namespace server {

CheckpointCuts::CheckpointCuts(bool sync, WithShards with_shards)
    : sync_(sync), with_shards_(std::move(with_shards)) {}

absl::Status CheckpointCuts::Begin(int64_t step, int64_t applied_step,
                                   const std::vector<uint32_t>& shards, uint64_t map_version,
                                   const CutRequest& request) {
  if (sync_ ? step < 0 : step != -1) {
    return absl::InvalidArgumentError(
        sync_ ? absl::StrFormat("a sync checkpoint needs a step boundary >= 0, not %d", step)
              : absl::StrFormat("checkpoints outside sync mode are not cut at a step (got %d)",
                                step));
  }
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("the server is shutting down");
  if (checkpointing_) return absl::FailedPreconditionError("a checkpoint is under way");
  absl::Status status;
  with_shards_([&](uint64_t installed, ShardLookup lookup) {
    if (map_version != installed) {
      status = absl::FailedPreconditionError(absl::StrFormat(
          "checkpoint for map version %d; this server has version %d", map_version, installed));
      return;
    }
    for (uint32_t s : shards) {
      if (!lookup(s).primary) {
        status = absl::FailedPreconditionError(absl::StrFormat(
            "shard %d is not a primary of this server in map version %d", s, map_version));
        return;
      }
    }
    if (sync_ && applied_step >= step) {
      status = absl::FailedPreconditionError(absl::StrFormat(
          "step boundary %d has passed: step %d is applied here", step, applied_step));
      return;
    }
    if (sync_ && applied_step + 1 == step) {
      for (uint32_t s : shards) {
        if (lookup(s).shard->has_pending()) {
          status = absl::FailedPreconditionError(absl::StrFormat(
              "step boundary %d has passed: pushes of step %d have arrived here", step, step));
          return;
        }
      }
    }
  });
  if (!status.ok()) return status;
  checkpointing_ = true;
  step_ = step;
  request_ = request;
  boundary_reached_ = false;
  cuts_.clear();
  for (uint32_t s : shards) cuts_[s];
  shards_ = shards;
  if (sync_ && applied_step + 1 == step) CutStateLocked();
  return absl::OkStatus();
}

void CheckpointCuts::BeforeStep(int64_t step) {
  absl::MutexLock lock(&mu_);
  // The step after a checkpoint's boundary changes the rows: cut those not cut yet first.
  if (checkpointing_ && boundary_reached_ && step == step_) CutRowsLocked();
}

void CheckpointCuts::AfterStep(int64_t step) {
  absl::MutexLock lock(&mu_);
  if (checkpointing_ && !boundary_reached_ && step + 1 == step_) CutStateLocked();
}

void CheckpointCuts::CutStateLocked() {
  with_shards_([this](uint64_t, ShardLookup lookup) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& [s, c] : cuts_) {
      const HeldShard held = lookup(s);
      if (held.shard == nullptr || !held.primary) continue;  // Take says so
      const absl::Time start = absl::Now();
      held.shard->CutState(&c.cut);
      c.stall += absl::Now() - start;
      c.state_cut = true;
    }
  });
  boundary_reached_ = true;
}

void CheckpointCuts::CutRowsLocked() {
  with_shards_([this](uint64_t, ShardLookup lookup) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& [s, c] : cuts_) {
      Shard* shard = lookup(s).shard;
      if (c.rows_cut || !c.state_cut || shard == nullptr) continue;
      const absl::Time start = absl::Now();
      shard->CutRows(kRecordBytes, request_, &c.cut);
      c.stall += absl::Now() - start;
      c.rows_cut = true;
    }
  });
}

absl::StatusOr<ShardCut> CheckpointCuts::Take(uint32_t shard, absl::Time deadline,
                                              absl::Duration* stall) {
  absl::MutexLock lock(&mu_);
  if (!checkpointing_ || cuts_.find(shard) == cuts_.end()) {
    return absl::NotFoundError(absl::StrFormat("shard %d is not in the checkpoint", shard));
  }
  if (sync_) {
    auto reached = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return boundary_reached_ || closed_ || !checkpointing_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&reached), deadline)) {
      return absl::DeadlineExceededError(
          absl::StrFormat("step boundary %d was not reached in time", step_));
    }
    if (closed_) return absl::UnavailableError("the server is shutting down");
    if (!checkpointing_) return absl::AbortedError("the checkpoint was ended");
  }
  auto it = cuts_.find(shard);
  if (it == cuts_.end()) {
    return absl::NotFoundError(absl::StrFormat("shard %d's cut was taken", shard));
  }
  PendingCut c = std::move(it->second);
  cuts_.erase(it);
  absl::Status status;
  with_shards_([&](uint64_t, ShardLookup lookup) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const HeldShard held = lookup(shard);
    if (held.shard == nullptr || !held.primary || (sync_ && !c.state_cut)) {
      status = absl::FailedPreconditionError(
          absl::StrFormat("shard %d moved to another server during the checkpoint", shard));
      return;
    }
    const absl::Time start = absl::Now();
    if (!sync_) {
      c.cut = held.shard->StartCut(kRecordBytes, request_);
    } else if (!c.rows_cut) {
      // Between the boundary and the next step: the rows are still those of the boundary.
      held.shard->CutRows(kRecordBytes, request_, &c.cut);
    }
    c.stall += absl::Now() - start;
  });
  if (!status.ok()) return status;
  *stall = c.stall;
  return std::move(c.cut);
}

absl::Status CheckpointCuts::ReadRows(ShardCut* cut, absl::Duration* max_hold) {
  *max_hold = absl::ZeroDuration();
  // A record at a time, each under the map's lock (the shard cannot be dropped meanwhile).
  while (true) {
    absl::StatusOr<bool> more;
    with_shards_([&](uint64_t, ShardLookup lookup) {
      const HeldShard held = lookup(cut->shard);
      if (held.shard == nullptr || !held.primary) {
        more = absl::FailedPreconditionError(
            absl::StrFormat("shard %d moved to another server during the checkpoint", cut->shard));
        return;
      }
      const absl::Time start = absl::Now();
      more = held.shard->ReadCutRows(kRecordBytes, cut);
      *max_hold = std::max(*max_hold, absl::Now() - start);
    });
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
  }
}

void CheckpointCuts::End() {
  absl::MutexLock lock(&mu_);
  checkpointing_ = false;
  cuts_.clear();
  with_shards_([this](uint64_t, ShardLookup lookup) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (uint32_t s : shards_) {
      if (Shard* shard = lookup(s).shard) shard->AbandonCutRows();
    }
  });
  shards_.clear();
}

void CheckpointCuts::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace server
}  // namespace ps

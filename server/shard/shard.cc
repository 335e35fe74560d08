#include "server/shard/shard.h"

#include <utility>

namespace ps {
namespace server {

Shard::Shard(uint32_t id, const ShardConfig& config, absl::Span<const size_t> expected_rows)
    : id_(id), config_(config), dense_(config.dense_chunk_floats) {
  absl::MutexLock lock(&mu_);
  const size_t num_tables = config_.tables->size();
  tables_.reserve(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    const size_t expected = t < expected_rows.size() ? expected_rows[t] : 0;
    tables_.push_back(std::make_unique<TableShard>((*config_.tables)[t].get(), expected));
  }
  if (config_.sync) pending_.resize(num_tables);
}

void Shard::Pull(size_t table, absl::Span<const uint64_t> keys, float* out) {
  absl::MutexLock lock(&mu_);
  tables_[table]->Pull(keys, out);
}

ApplyWindow::Verdict Shard::Push(size_t table, uint32_t worker, uint64_t sequence,
                                 absl::Span<const uint64_t> keys, const float* grads) {
  absl::MutexLock lock(&mu_);
  const ApplyWindow::Verdict verdict = window_.Admit(worker, sequence);
  if (verdict != ApplyWindow::Verdict::kApply) return verdict;
  if (config_.sync) {
    StepSums& sums = pending_[table];
    const uint32_t dim = tables_[table]->spec().dim;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [it, inserted] = sums.index.try_emplace(keys[i], static_cast<uint32_t>(sums.ids.size()));
      if (inserted) {
        sums.ids.push_back(keys[i]);
        sums.sums.resize(sums.sums.size() + dim, 0.0f);
      }
      float* dst = sums.sums.data() + size_t{it->second} * dim;
      const float* src = grads + i * dim;
      for (uint32_t j = 0; j < dim; ++j) dst[j] += src[j];
    }
  } else {
    tables_[table]->Push(keys, grads);
  }
  ++applied_sequence_;
  return verdict;
}

void Shard::ApplyStep(int64_t step) {
  absl::MutexLock lock(&mu_);
  for (size_t t = 0; t < pending_.size(); ++t) {
    StepSums& sums = pending_[t];
    if (sums.ids.empty()) continue;
    tables_[t]->Push(sums.ids, sums.sums.data());
    sums = StepSums();
  }
  applied_step_ = step;
  ++applied_sequence_;
}

int64_t Shard::applied_step() const {
  absl::MutexLock lock(&mu_);
  return applied_step_;
}

absl::Status Shard::ReadDense(absl::string_view name, uint32_t chunk, std::vector<float>* values,
                              uint64_t* total_floats) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<uint64_t> total = dense_.TotalFloats(name);
  if (!total.ok()) return total.status();
  absl::Status read = dense_.Read(name, chunk, values);
  if (!read.ok()) return read;
  *total_floats = *total;
  return absl::OkStatus();
}

absl::Status Shard::AssignDense(absl::string_view name, uint32_t chunk,
                                absl::Span<const float> values, uint64_t total_floats) {
  absl::MutexLock lock(&mu_);
  absl::Status status = dense_.Assign(name, chunk, values, total_floats);
  if (status.ok()) ++applied_sequence_;
  return status;
}

absl::StatusOr<ApplyWindow::Verdict> Shard::ApplyDenseGradient(absl::string_view name,
                                                               uint32_t chunk,
                                                               absl::Span<const float> grads,
                                                               uint64_t total_floats,
                                                               uint32_t worker,
                                                               uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (sequence != 0) {
    // Admit records the sequence: a write that would be refused must not be.
    absl::Status check = dense_.CheckWrite(name, chunk, grads.size(), total_floats);
    if (!check.ok()) return check;
    const ApplyWindow::Verdict verdict = window_.Admit(worker, sequence);
    if (verdict != ApplyWindow::Verdict::kApply) return verdict;
  }
  absl::Status status =
      dense_.ApplyGradient(name, chunk, grads, total_floats, *config_.dense_optimizer);
  if (!status.ok()) return status;
  ++applied_sequence_;
  return ApplyWindow::Verdict::kApply;
}

uint64_t Shard::applied_sequence() const {
  absl::MutexLock lock(&mu_);
  return applied_sequence_;
}

void Shard::AddSizes(std::vector<uint64_t>* rows, std::vector<uint64_t>* bytes) const {
  absl::MutexLock lock(&mu_);
  for (size_t t = 0; t < tables_.size(); ++t) {
    (*rows)[t] += tables_[t]->size();
    (*bytes)[t] += tables_[t]->MemoryBytes();
  }
}

}  // namespace server
}  // namespace ps

#include "server/shard/shard.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace server {
namespace {

template <typename T>
void AppendPacked(const T* data, size_t n, std::string* out) {
  out->append(reinterpret_cast<const char*>(data), n * sizeof(T));
}

template <typename T>
std::vector<T> Unpack(const std::string& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  // Not for empty bytes: an empty vector's data() may be null, which memcpy must not see.
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// A tier that fails to read or write rows it holds cannot serve them: the copy stops, loudly, and
// its replicas take over (the tier's rows are theirs too).
[[noreturn]] void TierFailed(uint32_t shard, const absl::Status& status) {
  std::fprintf(stderr, "shard %u: the disk tier failed: %s\n", shard, status.ToString().c_str());
  std::abort();
}

}  // namespace

Shard::~Shard() {
  absl::MutexLock lock(&mu_);
  if (config_.tier != nullptr && incarnation_ != 0) config_.tier->Drop(incarnation_);
}

void Shard::ResetTierLocked() {
  bool any = false;
  for (const bool tiered : tiered_) any = any || tiered;
  tiered_.assign(config_.tables->size(), false);
  ++tier_epoch_;
  if (config_.tier == nullptr) return;
  if (any) config_.tier->Drop(incarnation_);
  if (any || incarnation_ == 0) incarnation_ = config_.tier->NewIncarnation();
}

void Shard::PromoteLocked(size_t table, absl::Span<const uint64_t> keys, bool may_unlock) {
  std::vector<uint64_t> missing;
  std::vector<std::unique_ptr<RowTier::Found>> found;
  for (int attempt = 0;; ++attempt) {
    if (!TieredLocked(table)) return;
    missing.clear();
    tables_[table]->FindMissing(keys, &missing);
    if (missing.empty()) return;
    const uint32_t incarnation = incarnation_;
    absl::Status read;
    // A few reads without the lock; if rows keep moving meanwhile, one with it.
    if (may_unlock && attempt < 4) {
      const uint64_t epoch = tier_epoch_;
      mu_.Unlock();
      read = config_.tier->Get(incarnation, static_cast<uint32_t>(table), missing, &found);
      mu_.Lock();
      // A row demoted, evicted or written since may have a newer value than the one read.
      if (tier_epoch_ != epoch) continue;
    } else {
      read = config_.tier->Get(incarnation, static_cast<uint32_t>(table), missing, &found);
    }
    if (!read.ok()) TierFailed(id_, read);
    SetTickLocked(table);
    TableShard& rows = *tables_[table];
    std::vector<uint64_t> back;
    for (size_t i = 0; i < missing.size(); ++i) {
      // A row promoted meanwhile by another call is in memory already: its tier copy is gone.
      if (found[i] != nullptr &&
          rows.InsertStored(missing[i], found[i]->stored.data(), found[i]->last_use,
                            found[i]->generation, /*promotion=*/true, found[i]->use_count)) {
        back.push_back(missing[i]);
      }
    }
    if (!back.empty()) {
      const absl::Status deleted =
          config_.tier->Delete(incarnation_, static_cast<uint32_t>(table), back);
      if (!deleted.ok()) TierFailed(id_, deleted);
    }
    return;
  }
}

size_t Shard::DemoteOrDropLocked(size_t table, const std::vector<uint64_t>& ids,
                                 const TableShard::Departed& departed) {
  if (ids.empty()) return 0;
  // To the tier; if it is full, the rows are dropped as without one (still counted as evicted by
  // the budget).
  const bool demoted = DemoteLocked(table, departed).ok();
  if (demoted) tables_[table]->NoteDemoted(ids.size());
  evicted_since_cut_ = true;
  ++applied_sequence_;
  if (sink_) {
    RecordOut out;
    rpc::RowsChange* change = demoted ? out.record.mutable_demote() : out.record.mutable_evict();
    change->set_table(static_cast<uint32_t>(table));
    AppendPacked(ids.data(), ids.size(), change->mutable_keys());
    Emit(std::move(out));
  }
  return ids.size();
}

void Shard::MakeRoomLocked(size_t table, absl::Span<const uint64_t> keys) {
  if (config_.tier == nullptr || table >= max_rows_.size() || max_rows_[table] == 0) return;
  TableShard& rows = *tables_[table];
  const size_t cap = max_rows_[table];
  std::vector<uint64_t> missing;
  rows.FindMissing(keys, &missing);
  if (rows.size() + missing.size() <= cap) return;
  // Down to 90% of the cap (the sweeper's low watermark) less the rows to create, so that the
  // next requests find room too and demotions come in batches.
  const size_t low = cap - cap / 10;
  const size_t target = low - std::min(low, missing.size());
  SetTickLocked(table);
  std::vector<uint64_t> demoting;
  TableShard::Departed departed;
  // EvictToRows takes a share of each slice as large as the excess is of the rows: passes until
  // the target (the whole index examined at most).
  for (size_t examined = 0; rows.size() > target && examined < rows.bucket_count();
       examined += 4096) {
    rows.EvictToRows(target, 4096, &demoting, &departed);
  }
  if (DemoteOrDropLocked(table, demoting, departed) == 0) return;
  // Rows of this request may have been among them (rarely: its rows in memory were used
  // recently): those come back.
  const absl::flat_hash_set<uint64_t> demoted(demoting.begin(), demoting.end());
  std::vector<uint64_t> back;
  for (const uint64_t key : keys) {
    if (demoted.contains(key)) back.push_back(key);
  }
  if (!back.empty()) PromoteLocked(table, back, /*may_unlock=*/false);
}

absl::Status Shard::DemoteLocked(size_t table, const TableShard::Departed& rows) {
  const size_t row_bytes = tables_[table]->stored_row_bytes();
  std::vector<RowTier::Row> put(rows.ids.size());
  for (size_t i = 0; i < put.size(); ++i) {
    put[i] = {rows.ids[i], rows.last_use[i], rows.generations[i], rows.use_counts[i],
              rows.stored.data() + i * row_bytes};
  }
  ++tier_epoch_;
  absl::Status status = config_.tier->Put(incarnation_, static_cast<uint32_t>(table), put);
  if (status.ok()) {
    tiered_[table] = true;
  } else if (!absl::IsResourceExhausted(status)) {
    TierFailed(id_, status);
  }
  return status;
}

void Shard::AssignRowsLocked(size_t table, absl::Span<const uint64_t> keys, const void* rows,
                             bool to_tier, absl::Span<const uint32_t> ages) {
  TableShard& memory = *tables_[table];
  if (config_.tier == nullptr || (!to_tier && !TieredLocked(table))) {
    memory.AssignRows(keys, rows);
    return;
  }
  std::vector<uint64_t> missing;
  memory.FindMissing(keys, &missing);
  if (missing.empty()) {
    memory.AssignRows(keys, rows);
    return;
  }
  const uint32_t t32 = static_cast<uint32_t>(table);
  ++tier_epoch_;
  if (TieredLocked(table)) {
    // The rows not in memory may have an older copy in the tier: it goes.
    std::vector<std::unique_ptr<RowTier::Found>> found;
    absl::Status read = config_.tier->Get(incarnation_, t32, missing, &found);
    if (!read.ok()) TierFailed(id_, read);
    std::vector<uint64_t> stale;
    for (size_t i = 0; i < missing.size(); ++i) {
      if (found[i] != nullptr) stale.push_back(missing[i]);
    }
    if (!stale.empty()) {
      absl::Status deleted = config_.tier->Delete(incarnation_, t32, stale);
      if (!deleted.ok()) TierFailed(id_, deleted);
    }
  }
  if (!to_tier) {
    memory.AssignRows(keys, rows);
    return;
  }
  // The rows in memory stay there; the others go to the tier (the last row of an id repeated).
  const size_t row_bytes = memory.spec().row_floats() * sizeof(float);
  const size_t stored_bytes = memory.stored_row_bytes();
  const char* in = static_cast<const char*>(rows);
  absl::flat_hash_map<uint64_t, size_t> last;  // missing id -> index of its last row in keys
  for (const uint64_t id : missing) last[id] = 0;
  std::vector<uint64_t> memory_keys;
  std::string memory_rows;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = last.find(keys[i]);
    if (it != last.end()) {
      it->second = i;
    } else {
      memory_keys.push_back(keys[i]);
      memory_rows.append(in + i * row_bytes, row_bytes);
    }
  }
  if (!memory_keys.empty()) memory.AssignRows(memory_keys, memory_rows.data());
  SetTickLocked(table);
  std::vector<float> row(memory.spec().row_floats());
  std::string stored(missing.size() * stored_bytes, '\0');
  std::vector<RowTier::Row> put(missing.size());
  for (size_t j = 0; j < missing.size(); ++j) {
    const size_t i = last[missing[j]];
    std::memcpy(row.data(), in + i * row_bytes, row_bytes);
    memory.EncodeStored(row.data(), &stored[j * stored_bytes]);
    const uint32_t age = i < ages.size() ? ages[i] : 0;
    put[j] = {missing[j], memory.tick() - age, static_cast<uint16_t>(generation_), 0,
              stored.data() + j * stored_bytes};
  }
  absl::Status status = config_.tier->Put(incarnation_, t32, put);
  if (status.ok()) {
    tiered_[table] = true;
    return;
  }
  if (!absl::IsResourceExhausted(status)) TierFailed(id_, status);
  // The tier is full: the rows stay in memory, past the cap if need be (nothing is dropped).
  for (size_t j = 0; j < missing.size(); ++j) {
    memory.InsertStored(missing[j], put[j].stored, put[j].last_use, put[j].generation,
                        /*promotion=*/false);
  }
}

void Shard::EmitTieredLocked(size_t max_record_bytes, bool with_ages,
                             absl::FunctionRef<void(rpc::ShardRecord&&)> emit) const {
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (!TieredLocked(t)) continue;
    const TableShard& table = *tables_[t];
    const uint32_t row_floats = table.spec().row_floats();
    const size_t max_rows =
        std::max<size_t>(1, max_record_bytes / (sizeof(uint64_t) + row_floats * sizeof(float)));
    std::unique_ptr<RowTier::Scanner> scanner =
        config_.tier->Scan(incarnation_, static_cast<uint32_t>(t));
    std::vector<uint64_t> ids;
    std::vector<RowTier::Found> found;
    while (true) {
      absl::StatusOr<size_t> n = scanner->Next(max_rows, &ids, &found);
      if (!n.ok()) TierFailed(id_, n.status());
      if (*n == 0) break;
      rpc::ShardRecord record;
      record.set_shard(id_);
      record.set_sequence(applied_sequence_);
      rpc::RowsChange* change = with_ages ? record.mutable_tiered_rows() : record.mutable_rows();
      change->set_table(static_cast<uint32_t>(t));
      AppendPacked(ids.data(), *n, change->mutable_keys());
      std::string* values = change->mutable_values();
      values->resize(*n * row_floats * sizeof(float));
      float* out = reinterpret_cast<float*>(&(*values)[0]);
      std::vector<uint32_t> ages(*n);
      for (size_t i = 0; i < *n; ++i) {
        table.DecodeStored(found[i].stored.data(), out + i * row_floats);
        ages[i] = table.tick() - found[i].last_use;
      }
      if (with_ages) AppendPacked(ages.data(), ages.size(), change->mutable_ages());
      emit(std::move(record));
    }
  }
}

Shard::Shard(uint32_t id, const ShardConfig& config, absl::Span<const size_t> expected_rows,
             bool complete)
    : id_(id),
      config_(config),
      expected_rows_(expected_rows.begin(), expected_rows.end()),
      dense_(config.dense_chunk_floats) {
  absl::MutexLock lock(&mu_);
  ResetLocked();
  complete_ = complete;
}

void Shard::ResetLocked() {
  const size_t num_tables = config_.tables->size();
  cut_read_ = 0;  // its tables go
  tables_.clear();
  tables_.reserve(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    const size_t expected = t < expected_rows_.size() ? expected_rows_[t] : 0;
    const size_t width = t < config_.sketch_width.size() ? config_.sketch_width[t] : 1 << 16;
    tables_.push_back(
        std::make_unique<TableShard>((*config_.tables)[t].get(), expected, width));
    tables_.back()->set_generation(generation_);
    if (t < max_rows_.size()) tables_.back()->SetMaxRows(max_rows_[t]);
    tables_.back()->SetSoftCap(config_.tier != nullptr);
  }
  evicted_since_cut_ = false;
  ResetTierLocked();
  // The rows were replaced: no checkpoint's file holds what an increment would build on.
  base_checkpoint_ = 0;
  base_generation_ = 0;
  window_.Clear();
  dense_.Clear();
  pending_.clear();
  if (config_.sync) pending_.resize(num_tables);
}

void Shard::Pull(size_t table, absl::Span<const uint64_t> keys, float* out) {
  absl::MutexLock lock(&mu_);
  // Room first, for the rows the tier gives back as for the new ones: a copy's rows stay near
  // its cap (slabs keep the largest size they reach).
  MakeRoomLocked(table, keys);
  if (TieredLocked(table)) PromoteLocked(table, keys, /*may_unlock=*/true);
  SetTickLocked(table);
  tables_[table]->Pull(keys, out);
}

void Shard::Read(size_t table, absl::Span<const uint64_t> keys, float* out) const {
  std::vector<uint64_t> missing;
  uint32_t incarnation;
  {
    absl::MutexLock lock(&mu_);
    tables_[table]->Peek(keys, out);
    if (!TieredLocked(table)) return;
    tables_[table]->FindMissing(keys, &missing);
    incarnation = incarnation_;
  }
  if (missing.empty()) return;
  // The tier is read without the lock; a row that moves meanwhile is answered as it was when the
  // read began (a replica's answers may lag its primary's anyway).
  std::vector<std::unique_ptr<RowTier::Found>> found;
  const absl::Status read =
      config_.tier->Get(incarnation, static_cast<uint32_t>(table), missing, &found);
  if (!read.ok()) TierFailed(id_, read);
  absl::flat_hash_map<uint64_t, const RowTier::Found*> tiered;
  for (size_t i = 0; i < missing.size(); ++i) {
    if (found[i] != nullptr) tiered[missing[i]] = found[i].get();
  }
  if (tiered.empty()) return;
  absl::MutexLock lock(&mu_);
  if (incarnation_ != incarnation) return;  // the rows were replaced: the memory's answer stands
  const TableShard& rows = *tables_[table];
  const uint32_t dim = rows.spec().dim;
  std::vector<float> row(rows.spec().row_floats());
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto it = tiered.find(keys[i]);
    if (it == tiered.end()) continue;
    rows.DecodeStored(it->second->stored.data(), row.data());
    std::memcpy(out + i * dim, row.data(), dim * sizeof(float));
  }
}

void Shard::DescribeRows(size_t table, absl::Span<const uint64_t> keys,
                         rpc::RowsChange* change) const {
  const TableShard& rows = *tables_[table];
  const uint32_t row_floats = rows.spec().row_floats();
  change->set_table(static_cast<uint32_t>(table));
  AppendPacked(keys.data(), keys.size(), change->mutable_keys());
  std::string* values = change->mutable_values();
  values->resize(keys.size() * row_floats * sizeof(float));
  // values->data() has std::string's alignment (at least 8): whole floats can be written there.
  float* out = reinterpret_cast<float*>(values->data());
  for (const uint64_t key : keys) {
    if (!rows.Read(key, out)) {
      std::fprintf(stderr, "Shard::DescribeRows: a key without a row\n");
      std::abort();
    }
    out += row_floats;
  }
}

void Shard::DescribeDense(absl::string_view name, uint32_t chunk, uint64_t total_floats,
                          rpc::DenseChange* change) const {
  std::vector<float> values, state;
  (void)dense_.ReadWithState(name, chunk, &values, &state);
  change->set_name(std::string(name));
  change->set_chunk(chunk);
  change->set_total_floats(total_floats);
  AppendPacked(values.data(), values.size(), change->mutable_values());
  AppendPacked(state.data(), state.size(), change->mutable_state());
}

void Shard::AddToPending(size_t table, absl::Span<const uint64_t> keys, const float* grads) {
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
}

rpc::ShardRecord RecordOut::Whole() const {
  rpc::ShardRecord whole = record;
  if (values != nullptr) whole.mutable_rows()->set_values(std::string(rows_values()));
  return whole;
}

void Shard::Emit(RecordOut&& out) {
  out.record.set_shard(id_);
  out.record.set_sequence(applied_sequence_);
  sink_(std::move(out));
}

ApplyWindow::Verdict Shard::Push(size_t table, uint32_t worker, uint64_t sequence,
                                 absl::Span<const uint64_t> keys, const float* grads) {
  absl::MutexLock lock(&mu_);
  if (!config_.sync) {
    // The rows a push changes come back from the tier first (a sync push changes none yet),
    // after room was made for them (a demotion is a change of its own, recorded before the
    // push's).
    MakeRoomLocked(table, keys);
    if (TieredLocked(table)) PromoteLocked(table, keys, /*may_unlock=*/true);
  }
  const ApplyWindow::Verdict verdict = window_.Admit(worker, sequence);
  if (verdict != ApplyWindow::Verdict::kApply) return verdict;
  RecordOut out;
  rpc::ShardRecord& record = out.record;
  if (config_.sync) {
    AddToPending(table, keys, grads);
    if (sink_) {
      rpc::RowsChange* pending = record.mutable_pending();
      pending->set_table(static_cast<uint32_t>(table));
      AppendPacked(keys.data(), keys.size(), pending->mutable_keys());
      AppendPacked(grads, keys.size() * tables_[table]->spec().dim, pending->mutable_values());
    }
  } else if (sink_) {
    SetTickLocked(table);
    // The rows after the update go straight into the record's values, uninitialised before.
    rpc::RowsChange* rows = record.mutable_rows();
    rows->set_table(static_cast<uint32_t>(table));
    const size_t row_floats = tables_[table]->spec().row_floats();
    out.values.reset(new float[keys.size() * row_floats]);
    std::vector<uint64_t> kept;
    const size_t dropped = tables_[table]->Push(keys, grads, out.values.get(), &kept);
    // Ids refused a row (admission, the row cap) are not in the record: copies create nothing.
    const absl::Span<const uint64_t> applied = dropped == 0 ? keys : absl::MakeConstSpan(kept);
    AppendPacked(applied.data(), applied.size(), rows->mutable_keys());
    out.value_bytes = applied.size() * row_floats * sizeof(float);
  } else {
    SetTickLocked(table);
    tables_[table]->Push(keys, grads);
  }
  ++applied_sequence_;
  if (sink_) {
    record.set_worker_id(worker);
    record.set_push_sequence(sequence);
    Emit(std::move(out));
  }
  return verdict;
}

void Shard::ApplyStep(int64_t step) {
  absl::MutexLock lock(&mu_);
  rpc::ShardRecord record;
  for (size_t t = 0; t < pending_.size(); ++t) {
    StepSums& sums = pending_[t];
    if (sums.ids.empty()) continue;
    std::vector<uint64_t> kept;
    // Under the lock: the step is applied at once (its rows were promoted by the step's pulls,
    // unless demoted since).
    MakeRoomLocked(t, sums.ids);
    if (TieredLocked(t)) PromoteLocked(t, sums.ids, /*may_unlock=*/false);
    SetTickLocked(t);
    const size_t dropped = tables_[t]->Push(sums.ids, sums.sums.data(), nullptr, &kept);
    if (sink_) {
      DescribeRows(t, dropped == 0 ? absl::MakeConstSpan(sums.ids) : absl::MakeConstSpan(kept),
                   record.mutable_step()->add_rows());
    }
    sums = StepSums();
  }
  applied_step_ = step;
  ++applied_sequence_;
  if (sink_) {
    record.mutable_step()->set_step(step);
    Emit(RecordOut{std::move(record), nullptr, 0});
  }
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

absl::Status Shard::CheckDenseWrite(absl::string_view name, uint32_t chunk, size_t length,
                                    uint64_t total_floats) const {
  absl::MutexLock lock(&mu_);
  return dense_.CheckWrite(name, chunk, length, total_floats);
}

absl::Status Shard::AssignDense(absl::string_view name, uint32_t chunk,
                                absl::Span<const float> values, uint64_t total_floats) {
  absl::MutexLock lock(&mu_);
  absl::Status status = dense_.Assign(name, chunk, values, total_floats);
  if (!status.ok()) return status;
  ++applied_sequence_;
  if (sink_) {
    rpc::ShardRecord record;
    DescribeDense(name, chunk, total_floats, record.mutable_dense());
    Emit(RecordOut{std::move(record), nullptr, 0});
  }
  return absl::OkStatus();
}

absl::StatusOr<ApplyWindow::Verdict> Shard::ApplyDenseGradient(absl::string_view name,
                                                               uint32_t chunk,
                                                               absl::Span<const float> grads,
                                                               uint64_t total_floats,
                                                               uint32_t worker, uint64_t sequence) {
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
  if (sink_) {
    rpc::ShardRecord record;
    if (sequence != 0) {
      record.set_worker_id(worker);
      record.set_push_sequence(sequence);
    }
    DescribeDense(name, chunk, total_floats, record.mutable_dense());
    Emit(RecordOut{std::move(record), nullptr, 0});
  }
  return ApplyWindow::Verdict::kApply;
}

uint64_t Shard::applied_sequence() const {
  absl::MutexLock lock(&mu_);
  return applied_sequence_;
}

bool Shard::has_pending() const {
  absl::MutexLock lock(&mu_);
  for (const StepSums& sums : pending_) {
    if (!sums.ids.empty()) return true;
  }
  return false;
}

bool Shard::complete() const {
  absl::MutexLock lock(&mu_);
  return complete_;
}

void Shard::AddSizes(std::vector<uint64_t>* rows, std::vector<uint64_t>* bytes) const {
  absl::MutexLock lock(&mu_);
  for (size_t t = 0; t < tables_.size(); ++t) {
    (*rows)[t] += tables_[t]->size();
    (*bytes)[t] += tables_[t]->MemoryBytes();
  }
}

void Shard::AddCounters(std::vector<TableShard::Counters>* counters) const {
  absl::MutexLock lock(&mu_);
  for (size_t t = 0; t < tables_.size(); ++t) (*counters)[t] += tables_[t]->counters();
}

void Shard::SetMaxRows(absl::Span<const size_t> max_rows) {
  absl::MutexLock lock(&mu_);
  max_rows_.assign(max_rows.begin(), max_rows.end());
  for (size_t t = 0; t < tables_.size(); ++t) {
    tables_[t]->SetMaxRows(t < max_rows_.size() ? max_rows_[t] : 0);
  }
}

SweepResult Shard::Sweep(absl::Span<const TableSweep> sweeps, size_t max_buckets) {
  // The lock is held for one piece at a time, so that a pull or push of this shard waits at most
  // for one piece: kSweepPiece buckets of the TTL sweep, or kEvictPiece rows examined for eviction
  // (a row examined and evicted costs about as much as a small pull's lookup).
  constexpr size_t kSweepPiece = 2048;
  constexpr size_t kEvictPiece = 256;
  SweepResult result;
  std::vector<uint64_t> evicted;
  std::vector<uint64_t> demoting;  // with a tier: the rows evicted by the budget
  TableShard::Departed departed;
  for (size_t t = 0; t < sweeps.size(); ++t) {
    const TableSweep& sweep = sweeps[t];
    // A table with neither a TTL nor a cap has nothing to evict, and its rows' stamps are not
    // kept (TableShard's track_use_): nothing to visit.
    if (sweep.ttl_ticks == 0 && sweep.high_rows == 0) continue;
    size_t buckets = 0;      // to visit: at least max_buckets, and all of them in 200 passes
    size_t swept = 0;        // visited so far
    size_t examined = 0;     // rows examined for eviction so far
    bool evicting = false;   // above high_rows at the first piece: down to low_rows
    bool first = true;
    while (true) {
      absl::MutexLock lock(&mu_);
      if (!complete_ || restoring_ || t >= tables_.size()) return result;
      TableShard& table = *tables_[t];
      if (first) {
        buckets = sweep.evict_only ? 0 : std::max(max_buckets, table.bucket_count() / 200);
        evicting = sweep.high_rows != 0 && table.size() > sweep.high_rows;
        first = false;
      }
      SetTickLocked(t);
      evicted.clear();
      demoting.clear();
      departed.clear();
      if (swept < buckets) {
        const size_t piece = std::min(kSweepPiece, buckets - swept);
        table.Sweep(piece, sweep.ttl_ticks, &evicted);
        swept += piece;
      }
      if (evicting && examined < max_buckets && table.size() > sweep.low_rows) {
        if (config_.tier != nullptr) {
          table.EvictToRows(sweep.low_rows, kEvictPiece, &demoting, &departed);
        } else {
          table.EvictToRows(sweep.low_rows, kEvictPiece, &evicted);
        }
        examined += kEvictPiece;
      }
      result.evicted += DemoteOrDropLocked(t, demoting, departed);
      const bool more_eviction =
          evicting && examined < max_buckets && table.size() > sweep.low_rows;
      if (!evicted.empty()) {
        result.evicted += evicted.size();
        evicted_since_cut_ = true;
        ++tier_epoch_;
        // A sync step's sums of an evicted row stay: the step re-creates the row (if admitted)
        // and applies them, as for a row the step creates.
        ++applied_sequence_;
        if (sink_) {
          RecordOut out;
          rpc::RowsChange* change = out.record.mutable_evict();
          change->set_table(static_cast<uint32_t>(t));
          AppendPacked(evicted.data(), evicted.size(), change->mutable_keys());
          Emit(std::move(out));
        }
      }
      if (swept >= buckets && !more_eviction) {
        if (sweep.high_rows != 0 && table.size() > sweep.high_rows) result.within = false;
        break;
      }
    }
  }
  return result;
}

absl::Status Shard::ApplyEvictLocked(const rpc::RowsChange& change, bool demote) {
  if (change.table() >= tables_.size() || change.keys().size() % sizeof(uint64_t) != 0 ||
      !change.values().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard %d: malformed evict record (table %d of %d, %d key bytes, %d value bytes)", id_,
        change.table(), tables_.size(), change.keys().size(), change.values().size()));
  }
  const std::vector<uint64_t> keys = Unpack<uint64_t>(change.keys());
  TableShard& table = *tables_[change.table()];
  evicted_since_cut_ = true;
  ++tier_epoch_;
  if (demote && config_.tier != nullptr) {
    // Rows not in memory here are in the tier already (the primary promoted them for a pull,
    // which copies do not see, and demoted them unchanged).
    TableShard::Departed departed;
    const size_t taken = table.TakeRows(keys, &departed);
    if (taken == 0) return absl::OkStatus();
    if (DemoteLocked(change.table(), departed).ok()) {
      table.NoteTaken(taken);
    } else {
      // This copy's tier is full: the rows stay in memory rather than be lost.
      const size_t row_bytes = table.stored_row_bytes();
      for (size_t i = 0; i < departed.ids.size(); ++i) {
        table.InsertStored(departed.ids[i], departed.stored.data() + i * row_bytes,
                           departed.last_use[i], departed.generations[i], /*promotion=*/false,
                           departed.use_counts[i]);
      }
    }
    return absl::OkStatus();
  }
  for (const uint64_t key : keys) table.Erase(key);
  return absl::OkStatus();
}

void Shard::SetRecordSink(RecordSink sink) {
  absl::MutexLock lock(&mu_);
  sink_ = std::move(sink);
}

uint64_t Shard::snapshot_id() const {
  absl::MutexLock lock(&mu_);
  return snapshot_id_;
}

void Shard::EmitRowsLocked(size_t max_record_bytes,
                           absl::FunctionRef<void(rpc::ShardRecord&&)> emit,
                           const uint32_t* since) const {
  // Read here, under mu_, for the lambdas below (which run within this call, mu_ still held, but
  // which the thread-safety analysis cannot see into).
  const uint64_t sequence = applied_sequence_;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const TableShard& table = *tables_[t];
    const uint32_t row_floats = table.spec().row_floats();
    const size_t keys_per_record =
        std::max<size_t>(1, max_record_bytes / (sizeof(uint64_t) + row_floats * sizeof(float)));
    rpc::ShardRecord record;
    size_t in_record = 0;
    auto flush = [&] {
      if (in_record == 0) return;
      record.set_shard(id_);
      record.set_sequence(sequence);
      emit(std::move(record));
      record = rpc::ShardRecord();
      in_record = 0;
    };
    auto add = [&](uint64_t id, const float* row) {
      rpc::RowsChange* rows = record.mutable_rows();
      if (in_record == 0) {
        rows->set_table(static_cast<uint32_t>(t));
        if (since == nullptr) {
          const size_t n = std::min(keys_per_record, table.size());
          rows->mutable_keys()->reserve(n * sizeof(uint64_t));
          rows->mutable_values()->reserve(n * row_floats * sizeof(float));
        }
      }
      AppendPacked(&id, 1, rows->mutable_keys());
      AppendPacked(row, row_floats, rows->mutable_values());
      if (++in_record == keys_per_record) flush();
    };
    if (since == nullptr) {
      table.ForEach(add);
    } else {
      table.ForEachChangedSince(*since, add);
    }
    flush();
  }
}

void Shard::EmitDenseLocked(absl::FunctionRef<void(rpc::ShardRecord&&)> emit) const {
  const uint64_t sequence = applied_sequence_;  // under mu_, for the lambda (see EmitRowsLocked)
  dense_.ForEach([&](absl::string_view name, uint32_t chunk, uint64_t total,
                     absl::Span<const float>, absl::Span<const float>) {
    // ForEach calls this within EmitDenseLocked, which holds mu_: the assertion tells the
    // thread-safety analysis so (and checks it).
    mu_.AssertReaderHeld();
    rpc::ShardRecord record;
    record.set_shard(id_);
    record.set_sequence(sequence);
    DescribeDense(name, chunk, total, record.mutable_dense());
    emit(std::move(record));
  });
}

void Shard::EmitWindowLocked(absl::FunctionRef<void(rpc::ShardRecord&&)> emit) const {
  const uint64_t sequence = applied_sequence_;  // under mu_, for the lambda (see EmitRowsLocked)
  window_.ForEach([&](uint32_t worker, uint64_t highest, const ApplyWindow::Bitmap& seen) {
    rpc::ShardRecord record;
    record.set_shard(id_);
    record.set_sequence(sequence);
    rpc::WindowEntry* entry = record.mutable_window();
    entry->set_worker_id(worker);
    entry->set_highest(highest);
    AppendPacked(seen.data(), seen.size(), entry->mutable_seen());
    emit(std::move(record));
  });
}

void Shard::Snapshot(uint64_t snapshot_id, size_t max_record_bytes,
                     absl::FunctionRef<void(rpc::ShardRecord&&)> emit,
                     absl::FunctionRef<void()> then) {
  absl::MutexLock lock(&mu_);
  auto numbered = [this](rpc::ShardRecord* record) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    record->set_shard(id_);
    record->set_sequence(applied_sequence_);
  };
  {
    rpc::ShardRecord begin;
    numbered(&begin);
    begin.mutable_snapshot_begin()->set_applied_step(applied_step_);
    begin.mutable_snapshot_begin()->set_snapshot_id(snapshot_id);
    emit(std::move(begin));
  }
  EmitRowsLocked(max_record_bytes, emit);
  EmitTieredLocked(max_record_bytes, /*with_ages=*/true, emit);
  EmitDenseLocked(emit);
  EmitWindowLocked(emit);
  for (size_t t = 0; t < pending_.size(); ++t) {
    const StepSums& sums = pending_[t];
    if (sums.ids.empty()) continue;
    rpc::ShardRecord record;
    numbered(&record);
    rpc::RowsChange* change = record.mutable_pending();
    change->set_table(static_cast<uint32_t>(t));
    AppendPacked(sums.ids.data(), sums.ids.size(), change->mutable_keys());
    AppendPacked(sums.sums.data(), sums.sums.size(), change->mutable_values());
    emit(std::move(record));
  }
  {
    rpc::ShardRecord end;
    numbered(&end);
    end.set_snapshot_end(true);
    emit(std::move(end));
  }
  then();
}

absl::Status Shard::CheckChange(const rpc::RowsChange& change, bool gradients,
                                size_t values_bytes) const {
  if (change.table() >= config_.tables->size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d: record of table %d, the job has %d tables", id_, change.table(),
                        config_.tables->size()));
  }
  const TableSpec& spec = *(*config_.tables)[change.table()];
  const size_t floats = gradients ? spec.dim : spec.row_floats();
  if (change.keys().size() % sizeof(uint64_t) != 0 ||
      values_bytes != change.keys().size() / sizeof(uint64_t) * floats * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard %d: record of table \"%s\" has %d bytes of keys and %d bytes of values, not %d "
        "floats a key",
        id_, spec.name, change.keys().size(), values_bytes, floats));
  }
  return absl::OkStatus();
}

absl::Status Shard::ReadChange(const rpc::RowsChange& change, bool gradients,
                               std::vector<uint64_t>* aligned_keys,
                               std::vector<float>* aligned_values, const uint64_t** keys,
                               const float** values, size_t* n) const {
  const absl::Status checked = CheckChange(change, gradients, change.values().size());
  if (!checked.ok()) return checked;
  *n = change.keys().size() / sizeof(uint64_t);
  // Parsed strings are malloc'ed, so aligned: read them in place, else from a copy.
  *keys = reinterpret_cast<const uint64_t*>(change.keys().data());
  if (reinterpret_cast<uintptr_t>(*keys) % alignof(uint64_t) != 0) {
    *aligned_keys = Unpack<uint64_t>(change.keys());
    *keys = aligned_keys->data();
  }
  *values = reinterpret_cast<const float*>(change.values().data());
  if (reinterpret_cast<uintptr_t>(*values) % alignof(float) != 0) {
    *aligned_values = Unpack<float>(change.values());
    *values = aligned_values->data();
  }
  return absl::OkStatus();
}

absl::Status Shard::ApplyRecord(const rpc::ShardRecord& record) {
  absl::MutexLock lock(&mu_);
  return ApplyRecordLocked(record);
}

absl::Status Shard::ApplyRowsRecord(const rpc::ShardRecord& record,
                                    absl::Span<const absl::string_view> values) {
  if (!record.has_rows()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard %d: record %d has its values apart but is not a rows record", id_,
        record.sequence()));
  }
  absl::MutexLock lock(&mu_);
  return ApplyRecordLocked(record, &values);
}

absl::Status Shard::AssignRowsApart(const rpc::RowsChange& change,
                                    absl::Span<const absl::string_view> values) {
  size_t values_bytes = 0;
  for (const absl::string_view run : values) values_bytes += run.size();
  const absl::Status checked = CheckChange(change, /*gradients=*/false, values_bytes);
  if (!checked.ok()) return checked;
  const size_t row_bytes = tables_[change.table()]->spec().row_floats() * sizeof(float);
  std::vector<uint64_t> aligned_keys;
  const uint64_t* keys = reinterpret_cast<const uint64_t*>(change.keys().data());
  if (reinterpret_cast<uintptr_t>(keys) % alignof(uint64_t) != 0) {
    aligned_keys = Unpack<uint64_t>(change.keys());
    keys = aligned_keys.data();
  }
  // Whole rows straight from their run; a row split between runs through `split`.
  std::vector<char> split(row_bytes);
  size_t split_bytes = 0;
  size_t next = 0;  // index of the next key to write
  for (absl::string_view run : values) {
    if (run.empty()) continue;
    if (split_bytes > 0) {
      const size_t n = std::min(row_bytes - split_bytes, run.size());
      std::memcpy(split.data() + split_bytes, run.data(), n);
      split_bytes += n;
      run.remove_prefix(n);
      if (split_bytes < row_bytes) continue;
      AssignRowsLocked(change.table(), absl::MakeConstSpan(keys + next, 1), split.data(),
                       /*to_tier=*/false);
      ++next;
      split_bytes = 0;
    }
    const size_t whole = run.size() / row_bytes;
    if (whole > 0) {
      AssignRowsLocked(change.table(), absl::MakeConstSpan(keys + next, whole), run.data(),
                       /*to_tier=*/false);
      next += whole;
      run.remove_prefix(whole * row_bytes);
    }
    if (!run.empty()) std::memcpy(split.data(), run.data(), run.size());
    split_bytes = run.size();  // a row's start, finished by the next runs
  }
  return absl::OkStatus();
}

void Shard::CutStateLocked(ShardCut* cut) const {
  cut->shard = id_;
  cut->sequence = applied_sequence_;
  cut->applied_step = applied_step_;
  auto add = [cut](rpc::ShardRecord&& r) { cut->records.push_back(std::move(r)); };
  EmitDenseLocked(add);
  EmitWindowLocked(add);
}

void Shard::CutState(ShardCut* cut) const {
  absl::MutexLock lock(&mu_);
  CutStateLocked(cut);
}

void Shard::CutRowsLocked(size_t max_record_bytes, const CutRequest& request, ShardCut* cut) {
  const bool incremental =
      request.base_id != 0 && request.base_id == base_checkpoint_ && !evicted_since_cut_;
  evicted_since_cut_ = false;
  cut->incremental = incremental;
  cut->base_id = incremental ? request.base_id : 0;
  EndCutReadLocked();
  if (incremental) {
    // Few rows, found by a pass over the index: copied now.
    EmitRowsLocked(
        max_record_bytes, [cut](rpc::ShardRecord&& r) { cut->records.push_back(std::move(r)); },
        &base_generation_);
  } else {
    for (const std::unique_ptr<TableShard>& table : tables_) table->StartCut();
    // The tier's rows as of now, read after memory's, table by table.
    cut_scanners_.assign(tables_.size(), nullptr);
    for (size_t t = 0; t < tables_.size(); ++t) {
      if (TieredLocked(t))
        cut_scanners_[t] = config_.tier->Scan(incarnation_, static_cast<uint32_t>(t));
    }
    cut_read_ = ++cut_reads_;
    cut->rows_to_read = cut_read_;
    cut->rows_table = 0;
  }

  // Close the generation: what changes from now on is newer than this cut.
  uint32_t closed = generation_;
  if (generation_ == TableShard::kMaxGeneration) {
    // Out of generations (after 2^16 - 1 cuts): every row is as of this cut, generation 0, and
    // changes start again at 1. A base before this cut can no longer be told from it.
    for (const std::unique_ptr<TableShard>& table : tables_) table->ResetGenerations();
    closed = 0;
    base_checkpoint_ = 0;
    SetGenerationLocked(1);
  } else {
    SetGenerationLocked(generation_ + 1);
  }
  if (request.checkpoint_id != 0) {
    base_checkpoint_ = request.checkpoint_id;
    base_generation_ = closed;
  }
}

void Shard::SetGenerationLocked(uint32_t generation) {
  generation_ = generation;
  for (const std::unique_ptr<TableShard>& table : tables_) table->set_generation(generation);
}

void Shard::CutRows(size_t max_record_bytes, const CutRequest& request, ShardCut* cut) {
  absl::MutexLock lock(&mu_);
  CutRowsLocked(max_record_bytes, request, cut);
}

void Shard::EndCutReadLocked() {
  if (cut_read_ == 0) return;
  for (const std::unique_ptr<TableShard>& table : tables_) table->EndCut();
  cut_scanners_.clear();
  cut_read_ = 0;
}

absl::StatusOr<bool> Shard::ReadCutRows(size_t max_record_bytes, ShardCut* cut) {
  while (cut->rows_to_read != 0) {
    const size_t t = cut->rows_table;
    if (t == config_.tables->size()) {
      absl::MutexLock lock(&mu_);
      if (cut_read_ == cut->rows_to_read) EndCutReadLocked();
      cut->rows_to_read = 0;
      break;
    }
    // The record's buffers are allocated, and their pages touched, before the lock is taken.
    const uint32_t row_floats = (*config_.tables)[t]->row_floats();
    const size_t row_bytes = row_floats * sizeof(float);
    const size_t max_rows = std::max<size_t>(1, max_record_bytes / (sizeof(uint64_t) + row_bytes));
    rpc::ShardRecord record;
    rpc::RowsChange* rows = record.mutable_rows();
    rows->mutable_keys()->resize(max_rows * sizeof(uint64_t));
    rows->mutable_values()->resize(max_rows * row_bytes);
    size_t n;
    std::shared_ptr<RowTier::Scanner> scanner;
    {
      absl::MutexLock lock(&mu_);
      if (cut_read_ != cut->rows_to_read) {
        return absl::AbortedError(absl::StrFormat(
            "shard %d: the cut's rows were replaced or its read abandoned before it ended", id_));
      }
      if (!cut->reading_tier) {
        n = tables_[t]->ReadCut(max_rows, reinterpret_cast<uint64_t*>(&(*rows->mutable_keys())[0]),
                                reinterpret_cast<float*>(&(*rows->mutable_values())[0]));
      } else if (t < cut_scanners_.size()) {
        scanner = cut_scanners_[t];
      }
    }
    if (cut->reading_tier) {
      // The tiered rows, read without the lock (from the tier's snapshot of the cut), decoded
      // under it.
      n = 0;
      if (scanner != nullptr) {
        std::vector<uint64_t> ids;
        std::vector<RowTier::Found> found;
        absl::StatusOr<size_t> read = scanner->Next(max_rows, &ids, &found);
        if (!read.ok()) return read.status();
        n = *read;
        if (n > 0) {
          absl::MutexLock lock(&mu_);
          if (cut_read_ != cut->rows_to_read) {
            return absl::AbortedError(absl::StrFormat(
                "shard %d: the cut's rows were replaced or its read abandoned before it ended",
                id_));
          }
          std::memcpy(&(*rows->mutable_keys())[0], ids.data(), n * sizeof(uint64_t));
          float* out = reinterpret_cast<float*>(&(*rows->mutable_values())[0]);
          for (size_t i = 0; i < n; ++i) {
            tables_[t]->DecodeStored(found[i].stored.data(), out + i * row_floats);
          }
        }
      }
    }
    if (n == 0) {
      if (cut->reading_tier) {
        cut->reading_tier = false;
        ++cut->rows_table;
      } else {
        cut->reading_tier = true;
      }
      continue;
    }
    rows->mutable_keys()->resize(n * sizeof(uint64_t));
    rows->mutable_values()->resize(n * row_bytes);
    rows->set_table(static_cast<uint32_t>(t));
    record.set_shard(id_);
    record.set_sequence(cut->sequence);
    cut->records.push_back(std::move(record));
    return true;
  }
  return false;
}

void Shard::AbandonCutRows() {
  absl::MutexLock lock(&mu_);
  EndCutReadLocked();
}

ShardCut Shard::StartCut(size_t max_record_bytes, const CutRequest& request) {
  ShardCut cut;
  absl::MutexLock lock(&mu_);
  CutStateLocked(&cut);
  CutRowsLocked(max_record_bytes, request, &cut);
  return cut;
}

ShardCut Shard::Cut(size_t max_record_bytes, const CutRequest& request) {
  ShardCut cut;
  absl::MutexLock lock(&mu_);
  CutStateLocked(&cut);
  CutRowsLocked(max_record_bytes, request, &cut);
  if (cut.rows_to_read != 0) {
    // EmitRowsLocked's records: the rows as they are, under the lock.
    EndCutReadLocked();
    cut.rows_to_read = 0;
    auto add = [&cut](rpc::ShardRecord&& r) { cut.records.push_back(std::move(r)); };
    EmitRowsLocked(max_record_bytes, add);
    EmitTieredLocked(max_record_bytes, /*with_ages=*/false, add);
  }
  return cut;
}

uint32_t Shard::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void Shard::SetGenerationForTesting(uint32_t generation) {
  absl::MutexLock lock(&mu_);
  SetGenerationLocked(generation);
}

void Shard::BeginRestore() {
  absl::MutexLock lock(&mu_);
  ResetLocked();
  complete_ = false;
  applied_sequence_ = 0;
  applied_step_ = -1;
  restoring_ = true;
}

absl::Status Shard::RestoreRows(size_t table, const uint64_t* ids, const float* rows, size_t n) {
  absl::MutexLock lock(&mu_);
  if (!restoring_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("shard %d: rows to restore, but no restore was begun", id_));
  }
  RestoreRowsLocked(table, absl::MakeConstSpan(ids, n), rows);
  return absl::OkStatus();
}

void Shard::RestoreRowsLocked(size_t table, absl::Span<const uint64_t> ids, const void* rows) {
  // A checkpoint of rows that were in a tier may hold more than memory may: past the cap, the
  // rows go to this server's tier.
  const size_t cap = table < max_rows_.size() ? max_rows_[table] : 0;
  const bool to_tier =
      config_.tier != nullptr && cap != 0 && tables_[table]->size() + ids.size() > cap;
  AssignRowsLocked(table, ids, rows, to_tier);
}

absl::Status Shard::FinishRestore(const ShardCut& cut) {
  absl::MutexLock lock(&mu_);
  if (!restoring_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("shard %d: a restore to finish, but none was begun", id_));
  }
  return FinishRestoreLocked(cut);
}

absl::Status Shard::FinishRestoreLocked(const ShardCut& cut) {
  // The rows already here (a restore in pieces) stay: from the snapshot_begin's reset on, this is
  // ApplyRecordLocked's snapshot without its reset.
  restoring_ = false;
  complete_ = false;
  applied_step_ = cut.applied_step;
  snapshot_id_ = 0;
  applied_sequence_ = cut.sequence;
  absl::Status status;
  for (const rpc::ShardRecord& record : cut.records) {
    if (record.shard() != id_ || record.sequence() != cut.sequence ||
        !(record.has_rows() || record.has_dense() || record.has_window())) {
      status = absl::InvalidArgumentError(absl::StrFormat(
          "shard %d: a checkpoint's record for shard %d at %d is not rows, dense or window of "
          "shard %d at %d",
          id_, record.shard(), record.sequence(), id_, cut.sequence));
      break;
    }
    if (record.has_rows() && config_.tier != nullptr) {
      // Rows as RestoreRows takes them (past the cap, to the tier).
      std::vector<uint64_t> aligned_keys;
      std::vector<float> aligned_values;
      const uint64_t* keys = nullptr;
      const float* values = nullptr;
      size_t n = 0;
      status = ReadChange(record.rows(), /*gradients=*/false, &aligned_keys, &aligned_values, &keys,
                          &values, &n);
      if (!status.ok()) break;
      RestoreRowsLocked(record.rows().table(), absl::MakeConstSpan(keys, n), values);
      continue;
    }
    status = ApplyRecordLocked(record);
    if (!status.ok()) break;
  }
  if (!status.ok()) {
    ResetLocked();
    applied_sequence_ = 0;
    applied_step_ = -1;
    complete_ = false;
    return status;
  }
  rpc::ShardRecord end;
  end.set_shard(id_);
  end.set_sequence(cut.sequence);
  end.set_snapshot_end(true);
  return ApplyRecordLocked(end);
}

absl::Status Shard::ApplyRecordLocked(const rpc::ShardRecord& record,
                                      const absl::Span<const absl::string_view>* values_apart) {
  const bool snapshot_part = record.has_window() || record.snapshot_end();
  if (record.has_snapshot_begin()) {
    ResetLocked();
    complete_ = false;
    applied_step_ = record.snapshot_begin().applied_step();
    snapshot_id_ = record.snapshot_begin().snapshot_id();
    applied_sequence_ = record.sequence();
    return absl::OkStatus();
  }
  if (!complete_) {
    // Inside a snapshot (or a copy waiting for one): only its parts, at its sequence.
    if (record.sequence() != applied_sequence_ ||
        !(snapshot_part || record.has_rows() || record.has_tiered_rows() || record.has_dense() ||
          record.has_pending())) {
      return absl::AbortedError(
          absl::StrFormat("shard %d: record %d while waiting for a snapshot (at %d)", id_,
                          record.sequence(), applied_sequence_));
    }
  } else if (record.sequence() <= applied_sequence_) {
    return absl::OkStatus();  // applied before: a batch sent again
  } else if (record.sequence() != applied_sequence_ + 1 || snapshot_part) {
    return absl::AbortedError(absl::StrFormat("shard %d: record %d out of sequence (at %d)", id_,
                                              record.sequence(), applied_sequence_));
  }

  std::vector<uint64_t> aligned_keys;
  std::vector<float> aligned_values;
  const uint64_t* keys = nullptr;
  const float* values = nullptr;
  size_t n = 0;
  switch (record.change_case()) {
    case rpc::ShardRecord::kRows: {
      if (values_apart != nullptr) {
        absl::Status assigned = AssignRowsApart(record.rows(), *values_apart);
        if (!assigned.ok()) return assigned;
        break;
      }
      absl::Status read = ReadChange(record.rows(), /*gradients=*/false, &aligned_keys,
                                     &aligned_values, &keys, &values, &n);
      if (!read.ok()) return read;
      AssignRowsLocked(record.rows().table(), absl::MakeConstSpan(keys, n), values,
                       /*to_tier=*/false);
      break;
    }
    case rpc::ShardRecord::kTieredRows: {
      const rpc::RowsChange& change = record.tiered_rows();
      absl::Status read = ReadChange(change, /*gradients=*/false, &aligned_keys, &aligned_values,
                                     &keys, &values, &n);
      if (!read.ok()) return read;
      if (change.ages().size() != n * sizeof(uint32_t)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("shard %d: tiered rows record with %d keys and %d bytes of ages", id_,
                            n, change.ages().size()));
      }
      const std::vector<uint32_t> ages = Unpack<uint32_t>(change.ages());
      AssignRowsLocked(change.table(), absl::MakeConstSpan(keys, n), values, /*to_tier=*/true,
                       ages);
      break;
    }
    case rpc::ShardRecord::kPending: {
      if (!config_.sync) {
        return absl::InvalidArgumentError(
            absl::StrFormat("shard %d: a sync step record in a job that is not sync", id_));
      }
      absl::Status read = ReadChange(record.pending(), /*gradients=*/true, &aligned_keys,
                                     &aligned_values, &keys, &values, &n);
      if (!read.ok()) return read;
      AddToPending(record.pending().table(), absl::MakeConstSpan(keys, n), values);
      break;
    }
    case rpc::ShardRecord::kStep: {
      // Check everything before changing anything.
      for (const rpc::RowsChange& change : record.step().rows()) {
        absl::Status read = ReadChange(change, /*gradients=*/false, &aligned_keys, &aligned_values,
                                       &keys, &values, &n);
        if (!read.ok()) return read;
      }
      for (const rpc::RowsChange& change : record.step().rows()) {
        (void)ReadChange(change, /*gradients=*/false, &aligned_keys, &aligned_values, &keys,
                         &values, &n);
        AssignRowsLocked(change.table(), absl::MakeConstSpan(keys, n), values, /*to_tier=*/false);
      }
      for (StepSums& sums : pending_) sums = StepSums();
      applied_step_ = record.step().step();
      break;
    }
    case rpc::ShardRecord::kDense: {
      const rpc::DenseChange& d = record.dense();
      if (d.values().size() % sizeof(float) != 0 || d.state().size() % sizeof(float) != 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("shard %d: dense record of \"%s\" is not whole floats", id_, d.name()));
      }
      const std::vector<float> v = Unpack<float>(d.values());
      const std::vector<float> st = Unpack<float>(d.state());
      absl::Status restored =
          dense_.Restore(d.name(), d.chunk(), d.total_floats(), v, st, *config_.dense_optimizer);
      if (!restored.ok()) return restored;
      break;
    }
    case rpc::ShardRecord::kWindow: {
      const rpc::WindowEntry& w = record.window();
      ApplyWindow::Bitmap seen{};
      if (w.seen().size() != sizeof(seen)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("shard %d: window entry of worker %d has %d bytes, not %d", id_,
                            w.worker_id(), w.seen().size(), sizeof(seen)));
      }
      std::memcpy(seen.data(), w.seen().data(), sizeof(seen));
      window_.Restore(w.worker_id(), w.highest(), seen);
      break;
    }
    case rpc::ShardRecord::kEvict: {
      absl::Status erased = ApplyEvictLocked(record.evict(), /*demote=*/false);
      if (!erased.ok()) return erased;
      break;
    }
    case rpc::ShardRecord::kDemote: {
      absl::Status demoted = ApplyEvictLocked(record.demote(), /*demote=*/true);
      if (!demoted.ok()) return demoted;
      break;
    }
    case rpc::ShardRecord::kSnapshotEnd:
      complete_ = true;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("shard %d: record %d changes nothing", id_, record.sequence()));
  }
  if (record.worker_id() != 0) window_.Admit(record.worker_id(), record.push_sequence());
  applied_sequence_ = record.sequence();
  return absl::OkStatus();
}

}  // namespace server
}  // namespace ps

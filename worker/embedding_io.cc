#include "worker/embedding_io.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace ps {
namespace worker {
namespace {

// Seeds the hash of a cross's keys: crosses never share keys with single fields.
constexpr uint64_t kCrossSeed = 0x63726f7373ull;

// The table field f reads.
std::string FieldTable(const config::Job& job, int f) {
  if (job.data().has_schema() && job.data().schema().sparse(f).has_table()) {
    return job.data().schema().sparse(f).table();
  }
  if (job.model().has_shared_table()) return job.model().shared_table();
  return job.tables(f).name();
}

// Whether field f pools by MEAN.
bool FieldMean(const config::Job& job, int f) {
  if (job.data().has_schema() && job.data().schema().sparse(f).has_pooling()) {
    return job.data().schema().sparse(f).pooling() == config::Model::MEAN;
  }
  return job.model().pooling() == config::Model::MEAN;
}

bool MultiValued(const config::Job& job, int f) {
  return job.data().has_schema() && job.data().schema().sparse(f).has_separator();
}

// Appends the keys of `slot` for sample r of `batch` to `keys`.
void AppendSlotKeys(const EmbeddingSlot& slot, const Batch& batch, int num_fields, int r,
                    std::vector<uint64_t>* keys) {
  const uint32_t* off = batch.offsets.data() + size_t(r) * num_fields;
  if (slot.fields.size() == 1) {
    const int f = slot.fields[0];
    keys->insert(keys->end(), batch.keys.begin() + off[f], batch.keys.begin() + off[f + 1]);
    return;
  }
  uint64_t parts[16];
  size_t n = 0;
  for (int f : slot.fields) {
    // Crosses read single-valued fields (EmbeddingLayout::FromJob): one key each.
    parts[n++] = off[f + 1] > off[f] ? batch.keys[off[f]] : 0;
  }
  keys->push_back(XXH3_64bits_withSeed(parts, n * sizeof(uint64_t), kCrossSeed));
}

}  // namespace

absl::StatusOr<EmbeddingLayout> EmbeddingLayout::FromJob(const config::Job& job,
                                                         const ModelSpec& spec) {
  EmbeddingLayout layout;
  layout.num_fields_ = spec.num_fields();
  int offset = 0;
  for (int f = 0; f < spec.num_fields(); ++f) {
    EmbeddingSlot slot;
    slot.table = FieldTable(job, f);
    slot.dim = spec.field_dims[f];
    slot.mean = FieldMean(job, f);
    slot.fields = {f};
    slot.offset = offset;
    offset += slot.dim;
    layout.slots_.push_back(std::move(slot));
  }
  if (spec.num_linear > 0) {
    const std::string& table = job.model().linear_table();
    std::vector<std::string> names;
    if (job.data().has_schema()) {
      for (const config::SparseField& f : job.data().schema().sparse()) {
        names.push_back(f.has_name() ? f.name() : f.column());
      }
    } else {
      for (int f = 0; f < spec.num_fields(); ++f) names.push_back(absl::StrCat("C", f + 1));
    }
    if (job.model().type() == config::Model::DEEPFM) {
      for (int f = 0; f < spec.num_fields(); ++f) {
        layout.slots_.push_back(EmbeddingSlot{table, 1, FieldMean(job, f), {f}, offset++});
      }
    } else {
      for (const config::Model::WideFeature& w : job.model().wide()) {
        EmbeddingSlot slot{table, 1, false, {}, 0};
        if (w.fields_size() == 0 || w.fields_size() > 16) {
          return absl::InvalidArgumentError("a model.wide feature has 1 to 16 fields");
        }
        for (const std::string& name : w.fields()) {
          const auto it = std::find(names.begin(), names.end(), name);
          if (it == names.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat("model.wide names no sparse field \"", name, "\""));
          }
          const int f = static_cast<int>(it - names.begin());
          if (w.fields_size() > 1 && MultiValued(job, f)) {
            return absl::InvalidArgumentError(
                absl::StrCat("model.wide crosses multi-valued field \"", name,
                             "\"; crosses take single-valued "
                             "fields"));
          }
          slot.fields.push_back(f);
        }
        if (slot.fields.size() == 1) slot.mean = FieldMean(job, slot.fields[0]);
        slot.offset = offset++;
        layout.slots_.push_back(std::move(slot));
      }
    }
  }
  layout.width_ = offset;
  for (int s = 0; s < static_cast<int>(layout.slots_.size()); ++s) {
    const EmbeddingSlot& slot = layout.slots_[s];
    auto it = std::find_if(layout.tables_.begin(), layout.tables_.end(),
                           [&](const TableSlots& t) { return t.table == slot.table; });
    if (it == layout.tables_.end()) {
      layout.tables_.push_back(TableSlots{slot.table, slot.dim, {}});
      it = layout.tables_.end() - 1;
    }
    if (it->dim != slot.dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table \"", slot.table, "\" is read with dims ", it->dim, " and ", slot.dim));
    }
    it->slots.push_back(s);
  }
  layout.direct_ = layout.tables_.size() == 1 && spec.num_linear == 0;
  return layout;
}

void StartPull(Client* client, const EmbeddingLayout& layout, StepData* d) {
  const Batch& batch = d->batch;
  const int n = batch.size;
  d->emb.resize(size_t(n) * layout.width());
  d->pending.clear();
  d->direct = layout.direct() && batch.SingleValued();
  if (d->direct) {
    d->pending.push_back(
        client->PullAsync(layout.tables()[0].table, batch.keys, absl::MakeSpan(d->emb)));
    return;
  }
  GatherKeys(layout, batch, &d->keys, &d->ends);
  d->rows.resize(layout.tables().size());
  for (size_t g = 0; g < layout.tables().size(); ++g) {
    const TableSlots& t = layout.tables()[g];
    d->rows[g].resize(d->keys[g].size() * t.dim);
    d->pending.push_back(client->PullAsync(t.table, d->keys[g], absl::MakeSpan(d->rows[g])));
  }
}

void GatherKeys(const EmbeddingLayout& layout, const Batch& batch,
                std::vector<std::vector<uint64_t>>* keys_out,
                std::vector<std::vector<uint32_t>>* ends_out) {
  const size_t groups = layout.tables().size();
  keys_out->resize(groups);
  ends_out->resize(groups);
  for (size_t g = 0; g < groups; ++g) {
    const TableSlots& t = layout.tables()[g];
    std::vector<uint64_t>& keys = (*keys_out)[g];
    std::vector<uint32_t>& ends = (*ends_out)[g];
    keys.clear();
    ends.clear();
    for (int r = 0; r < batch.size; ++r) {
      for (int s : t.slots) {
        AppendSlotKeys(layout.slots()[s], batch, layout.num_fields(), r, &keys);
        ends.push_back(static_cast<uint32_t>(keys.size()));
      }
    }
  }
}

absl::Status FinishPull(const EmbeddingLayout& layout, StepData* d) {
  absl::Status status;
  for (auto& f : d->pending) status.Update(f.get());
  d->pending.clear();
  if (!status.ok() || d->direct) return status;
  PoolRows(layout, d->batch.size, d->ends, d->rows, d->emb.data());
  return absl::OkStatus();
}

void PoolRows(const EmbeddingLayout& layout, int samples,
              const std::vector<std::vector<uint32_t>>& all_ends,
              const std::vector<std::vector<float>>& all_rows, float* emb) {
  const int width = layout.width();
  for (size_t g = 0; g < layout.tables().size(); ++g) {
    const TableSlots& t = layout.tables()[g];
    const int dim = t.dim;
    const float* rows = all_rows[g].data();
    const uint32_t* ends = all_ends[g].data();
    uint32_t begin = 0;
    for (int r = 0; r < samples; ++r) {
      for (int s : t.slots) {
        const uint32_t end = *ends++;
        float* out = emb + size_t(r) * width + layout.slots()[s].offset;
        const uint32_t count = end - begin;
        if (count == 1) {
          std::memcpy(out, rows + size_t(begin) * dim, dim * sizeof(float));
        } else {
          std::fill(out, out + dim, 0.0f);
          for (uint32_t k = begin; k < end; ++k) {
            const float* row = rows + size_t(k) * dim;
            for (int c = 0; c < dim; ++c) out[c] += row[c];
          }
          if (count > 1 && layout.slots()[s].mean) {
            const float scale = 1.0f / static_cast<float>(count);
            for (int c = 0; c < dim; ++c) out[c] *= scale;
          }
        }
        begin = end;
      }
    }
  }
}

void StartPush(Client* client, const EmbeddingLayout& layout, const StepData& d,
               const std::vector<float>& emb_grad, int64_t step, PushData* p) {
  p->step = step;
  p->pending.clear();
  const size_t groups = layout.tables().size();
  p->keys.resize(groups);
  p->grads.resize(groups);
  const int n = d.batch.size;
  if (d.direct) {
    p->keys[0] = d.batch.keys;
    p->grads[0].assign(emb_grad.begin(), emb_grad.begin() + size_t(n) * layout.width());
    p->pending.push_back(client->PushAsync(layout.tables()[0].table, p->keys[0], p->grads[0]));
    return;
  }
  const int width = layout.width();
  for (size_t g = 0; g < groups; ++g) {
    const TableSlots& t = layout.tables()[g];
    const int dim = t.dim;
    p->keys[g] = d.keys[g];
    std::vector<float>& grads = p->grads[g];
    grads.resize(p->keys[g].size() * dim);
    const uint32_t* ends = d.ends[g].data();
    uint32_t begin = 0;
    for (int r = 0; r < n; ++r) {
      for (int s : t.slots) {
        const uint32_t end = *ends++;
        const float* in = emb_grad.data() + size_t(r) * width + layout.slots()[s].offset;
        const uint32_t count = end - begin;
        const float scale =
            layout.slots()[s].mean && count > 1 ? 1.0f / static_cast<float>(count) : 1.0f;
        for (uint32_t k = begin; k < end; ++k) {
          float* out = grads.data() + size_t(k) * dim;
          for (int c = 0; c < dim; ++c) out[c] = in[c] * scale;
        }
        begin = end;
      }
    }
    p->pending.push_back(client->PushAsync(t.table, p->keys[g], grads));
  }
}

void DrainPull(StepData* d) {
  for (auto& f : d->pending) f.wait();
  d->pending.clear();
}

absl::Status FinishPush(PushData* p) {
  absl::Status status;
  for (auto& f : p->pending) status.Update(f.get());
  p->pending.clear();
  return status;
}

}  // namespace worker
}  // namespace ps

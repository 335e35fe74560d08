#include "worker/embedding_io.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace ps {
namespace worker {
namespace {

// Seeds the hash of a cross's keys: crosses never share keys with single fields.
constexpr uint64_t kCrossSeed = 0x63726f7373ull;

// KeyDeduper's free slot.
constexpr uint32_t kEmptyPlace = ~uint32_t{0};

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

void StartPull(Client* client, const EmbeddingLayout& layout, StepData* d, RowCache* cache,
               int64_t step) {
  const Batch& batch = d->batch;
  const int n = batch.size;
  d->emb.resize(size_t(n) * layout.width());
  d->pending.clear();
  d->cache = cache;
  d->step = step;
  // The cache looks up distinct keys: no direct pull of the batch's keys with it.
  d->direct = cache == nullptr && layout.direct() && batch.SingleValued();
  if (d->direct) {
    d->pending.push_back(
        client->PullAsync(layout.tables()[0].table, batch.keys, absl::MakeSpan(d->emb)));
    return;
  }
  GatherKeys(layout, batch, &d->dedup, &d->tables);
  const size_t groups = layout.tables().size();
  d->rows.resize(groups);
  if (cache != nullptr) {
    d->misses.resize(groups);
    d->miss_keys.resize(groups);
    d->miss_rows.resize(groups);
    d->hit_slots.resize(groups);
    d->hit_places.resize(groups);
    d->admit_slots.resize(groups);
    d->admit_places.resize(groups);
  }
  for (size_t g = 0; g < groups; ++g) {
    const TableSlots& t = layout.tables()[g];
    const std::vector<uint64_t>& unique = d->tables[g].unique;
    d->rows[g].resize(unique.size() * t.dim);
    if (cache == nullptr) {
      d->pending.push_back(client->PullAsync(t.table, unique, absl::MakeSpan(d->rows[g])));
      continue;
    }
    if (cache->on_device()) {  // the hits' rows stay on the device: their slots travel
      cache->LookupSlots(static_cast<int>(g), step, unique, &d->hit_slots[g], &d->hit_places[g],
                         &d->misses[g]);
    } else {
      cache->Lookup(static_cast<int>(g), step, unique, d->rows[g].data(), &d->misses[g]);
    }
    std::vector<uint64_t>& keys = d->miss_keys[g];
    keys.clear();
    for (uint32_t i : d->misses[g]) keys.push_back(unique[i]);
    d->miss_rows[g].resize(keys.size() * t.dim);
    if (!keys.empty()) {
      d->pending.push_back(client->PullAsync(t.table, keys, absl::MakeSpan(d->miss_rows[g])));
    }
  }
}

void KeyDeduper::Reset(size_t max_keys) {
  size_t capacity = 16;
  int shift = 60;
  while (capacity < 2 * max_keys) {
    capacity *= 2;
    --shift;
  }
  if (keys_.size() != capacity) {
    keys_.resize(capacity);
    places_.resize(capacity);
  }
  std::fill(places_.begin(), places_.end(), kEmptyPlace);
  mask_ = capacity - 1;
  shift_ = shift;
}

uint32_t KeyDeduper::Find(uint64_t key, std::vector<uint64_t>* unique) {
  // Fibonacci hashing: keys may be small integers, so their low bits alone do not spread.
  uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> shift_;
  while (true) {
    const uint32_t place = places_[i];
    if (place == kEmptyPlace) {
      keys_[i] = key;
      places_[i] = static_cast<uint32_t>(unique->size());
      unique->push_back(key);
      return places_[i];
    }
    if (keys_[i] == key) return place;
    i = (i + 1) & mask_;
  }
}

void GatherKeys(const EmbeddingLayout& layout, const Batch& batch, KeyDeduper* dedup,
                std::vector<TableKeys>* tables) {
  const size_t groups = layout.tables().size();
  tables->resize(groups);
  std::vector<uint64_t>& values = dedup->values();
  for (size_t g = 0; g < groups; ++g) {
    const TableSlots& t = layout.tables()[g];
    TableKeys& out = (*tables)[g];
    out.unique.clear();
    out.index.clear();
    out.ends.clear();
    values.clear();
    for (int r = 0; r < batch.size; ++r) {
      for (int s : t.slots) {
        AppendSlotKeys(layout.slots()[s], batch, layout.num_fields(), r, &values);
        out.ends.push_back(static_cast<uint32_t>(values.size()));
      }
    }
    dedup->Reset(values.size());
    out.index.resize(values.size());
    for (size_t k = 0; k < values.size(); ++k) out.index[k] = dedup->Find(values[k], &out.unique);
  }
}

namespace {

// With a row cache: puts the pulled misses' rows in their places among the distinct rows and
// admits them into the cache. Nothing without one.
void PlaceMisses(const EmbeddingLayout& layout, StepData* d) {
  if (d->cache == nullptr) return;
  for (size_t g = 0; g < layout.tables().size(); ++g) {
    const int dim = layout.tables()[g].dim;
    const std::vector<uint32_t>& misses = d->misses[g];
    const float* pulled = d->miss_rows[g].data();
    float* rows = d->rows[g].data();
    for (size_t m = 0; m < misses.size(); ++m) {
      std::memcpy(rows + size_t(misses[m]) * dim, pulled + m * dim, dim * sizeof(float));
    }
    if (!d->cache->on_device()) {
      d->cache->Admit(static_cast<int>(g), d->step, d->miss_keys[g], pulled);
      continue;
    }
    // On the device: the slots the misses go to, with their places among the distinct rows.
    d->cache->AdmitSlots(static_cast<int>(g), d->step, d->miss_keys[g], &d->admit_slots[g],
                         &d->admit_places[g]);
    for (uint32_t& place : d->admit_places[g]) place = misses[place];
  }
}

}  // namespace

absl::Status FinishPull(const EmbeddingLayout& layout, StepData* d) {
  absl::Status status;
  for (auto& f : d->pending) status.Update(f.get());
  d->pending.clear();
  d->pooled = status.ok();
  if (!status.ok() || d->direct) return status;
  if (d->cache != nullptr && d->cache->on_device()) {
    return absl::FailedPreconditionError(
        "FinishPull: the row cache keeps its rows on the device; a model that pools there takes "
        "the batch (AwaitPull)");
  }
  PlaceMisses(layout, d);
  PoolRows(layout, d->batch.size, d->tables, d->rows, d->emb.data());
  return absl::OkStatus();
}

absl::Status AwaitPull(const EmbeddingLayout& layout, StepData* d) {
  absl::Status status;
  for (auto& f : d->pending) status.Update(f.get());
  d->pending.clear();
  d->pooled = status.ok() && d->direct;
  if (status.ok() && !d->direct) PlaceMisses(layout, d);
  return status;
}

PooledInput PooledInputOf(const EmbeddingLayout& layout, const StepData& d) {
  PooledInput in;
  in.batch = d.batch.size;
  in.dense = d.batch.dense.data();
  in.labels = d.batch.labels.data();
  in.tables.resize(layout.tables().size());
  for (size_t g = 0; g < layout.tables().size(); ++g) {
    const TableSlots& t = layout.tables()[g];
    PooledTable& out = in.tables[g];
    out.dim = t.dim;
    out.rows = d.rows[g];
    out.index = d.tables[g].index;
    out.ends = d.tables[g].ends;
    if (d.cache != nullptr && d.cache->on_device()) {
      out.cache_rows = d.cache->capacity();
      out.hit_slots = d.hit_slots[g];
      out.hit_places = d.hit_places[g];
      out.admit_slots = d.admit_slots[g];
      out.admit_places = d.admit_places[g];
    }
    for (int s : t.slots) {
      out.slot_offset.push_back(layout.slots()[s].offset);
      out.slot_mean.push_back(layout.slots()[s].mean ? 1 : 0);
    }
  }
  return in;
}

namespace {

// How many values ahead PoolTable and SpreadTable ask for the row they will read: the rows of
// distinct keys are read in the values' order, not the memory's, so the hardware's prefetcher
// cannot guess them.
constexpr size_t kPrefetch = 8;

// Calls fn(r, slot, begin, end) for every bag of table `t` (sample r, slot `slot`) in GatherKeys'
// order: the bag's values are keys.index[begin, end).
template <typename Fn>
void ForEachBag(const TableSlots& t, int samples, const TableKeys& keys, Fn fn) {
  const uint32_t* ends = keys.ends.data();
  uint32_t begin = 0;
  for (int r = 0; r < samples; ++r) {
    for (int s : t.slots) {
      const uint32_t end = *ends++;
      fn(r, s, begin, end);
      begin = end;
    }
  }
}

// PoolRows for one table, with its dim a compile-time constant when kDim > 0.
template <int kDim>
void PoolTable(const EmbeddingLayout& layout, const TableSlots& t, int samples,
               const TableKeys& keys, const float* rows, float* emb) {
  const int dim = kDim > 0 ? kDim : t.dim;
  const uint32_t* index = keys.index.data();
  const size_t total = keys.index.size();
  ForEachBag(t, samples, keys, [&](int r, int s, uint32_t begin, uint32_t end) {
    float* out = emb + size_t(r) * layout.width() + layout.slots()[s].offset;
    const uint32_t count = end - begin;
    if (count == 1) {
      if (begin + kPrefetch < total) {
        __builtin_prefetch(rows + size_t(index[begin + kPrefetch]) * dim);
      }
      std::memcpy(out, rows + size_t(index[begin]) * dim, dim * sizeof(float));
      return;
    }
    std::fill(out, out + dim, 0.0f);
    for (uint32_t k = begin; k < end; ++k) {
      if (k + kPrefetch < total) __builtin_prefetch(rows + size_t(index[k + kPrefetch]) * dim);
      const float* row = rows + size_t(index[k]) * dim;
      for (int c = 0; c < dim; ++c) out[c] += row[c];
    }
    if (count > 1 && layout.slots()[s].mean) {
      const float scale = 1.0f / static_cast<float>(count);
      for (int c = 0; c < dim; ++c) out[c] *= scale;
    }
  });
}

// SpreadGrads for one table, with its dim a compile-time constant when kDim > 0.
template <int kDim>
void SpreadTable(const EmbeddingLayout& layout, const TableSlots& t, int samples,
                 const TableKeys& keys, const float* emb_grad, float* grads) {
  const int dim = kDim > 0 ? kDim : t.dim;
  const uint32_t* index = keys.index.data();
  const size_t total = keys.index.size();
  ForEachBag(t, samples, keys, [&](int r, int s, uint32_t begin, uint32_t end) {
    const float* in = emb_grad + size_t(r) * layout.width() + layout.slots()[s].offset;
    const uint32_t count = end - begin;
    const float scale =
        layout.slots()[s].mean && count > 1 ? 1.0f / static_cast<float>(count) : 1.0f;
    for (uint32_t k = begin; k < end; ++k) {
      if (k + kPrefetch < total) __builtin_prefetch(grads + size_t(index[k + kPrefetch]) * dim, 1);
      float* out = grads + size_t(index[k]) * dim;
      for (int c = 0; c < dim; ++c) out[c] += in[c] * scale;
    }
  });
}

// Calls fn(std::integral_constant<int, D>) with D = dim for the common dims, else D = 0 (the dim
// read at run time): the table loops get a compile-time trip count where it matters.
template <typename Fn>
void WithDim(int dim, Fn fn) {
  switch (dim) {
    case 8:
      return fn(std::integral_constant<int, 8>());
    case 16:
      return fn(std::integral_constant<int, 16>());
    case 32:
      return fn(std::integral_constant<int, 32>());
    default:
      return fn(std::integral_constant<int, 0>());
  }
}

}  // namespace

void PoolRows(const EmbeddingLayout& layout, int samples, const std::vector<TableKeys>& tables,
              const std::vector<std::vector<float>>& rows, float* emb) {
  for (size_t g = 0; g < layout.tables().size(); ++g) {
    const TableSlots& t = layout.tables()[g];
    WithDim(t.dim, [&](auto dim) {
      PoolTable<decltype(dim)::value>(layout, t, samples, tables[g], rows[g].data(), emb);
    });
  }
}

void SpreadGrads(const EmbeddingLayout& layout, int samples, const std::vector<TableKeys>& tables,
                 const float* emb_grad, std::vector<std::vector<float>>* grads) {
  grads->resize(layout.tables().size());
  for (size_t g = 0; g < layout.tables().size(); ++g) {
    const TableSlots& t = layout.tables()[g];
    std::vector<float>& out = (*grads)[g];
    out.assign(tables[g].unique.size() * t.dim, 0.0f);
    WithDim(t.dim, [&](auto dim) {
      SpreadTable<decltype(dim)::value>(layout, t, samples, tables[g], emb_grad, out.data());
    });
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
  SpreadGrads(layout, n, d.tables, emb_grad.data(), &p->grads);
  for (size_t g = 0; g < groups; ++g) {
    p->keys[g] = d.tables[g].unique;
    p->pending.push_back(client->PushAsync(layout.tables()[g].table, p->keys[g], p->grads[g]));
  }
}

void StartPushRows(Client* client, const EmbeddingLayout& layout, const StepData& d,
                   std::vector<std::vector<float>>* row_grads, int64_t step, PushData* p) {
  p->step = step;
  p->pending.clear();
  const size_t groups = layout.tables().size();
  p->keys.resize(groups);
  p->grads.resize(groups);
  row_grads->resize(groups);
  for (size_t g = 0; g < groups; ++g) {
    p->keys[g] = d.tables[g].unique;
    p->grads[g].swap((*row_grads)[g]);
    p->pending.push_back(client->PushAsync(layout.tables()[g].table, p->keys[g], p->grads[g]));
  }
}

absl::StatusOr<std::unique_ptr<RowCache>> MakeRowCache(const config::Job& job,
                                                       const EmbeddingLayout& layout,
                                                       metrics::Registry* registry, int rank,
                                                       bool on_device) {
  if (!job.training().has_row_cache()) return std::unique_ptr<RowCache>();
  std::vector<int> dims;
  for (const TableSlots& t : layout.tables()) dims.push_back(t.dim);
  RowCache::Options options = RowCache::OptionsOf(job.training().row_cache(), std::move(dims));
  options.registry = registry;
  options.rank = rank;
  options.on_device = on_device;
  return RowCache::Create(options);
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

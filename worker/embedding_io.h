// A batch's embedding rows in and out of the servers: the model's pooled inputs (ModelSpec's
// emb layout) grouped by table (one pull and one push per table and step), the pulled rows
// pooled into the model's layout, and the model's gradients of the pooled inputs spread back
// over the rows they pooled, as per-table pushes. Used by the trainer and the held-out
// evaluation.
//
// Pooling: a slot's value for a sample is the SUM, or the MEAN, of the rows of its keys (zeros
// when it has none). Backward, each key's row gets the slot's gradient (divided by the number of
// keys for MEAN). A key that appears several times in a step (in one sample or in several) is
// pulled once, its row read from one place by every value that names it, and its gradients summed
// here into one row before the push: the rows and gradients in the worker's memory are one per
// distinct key, not one per value (a batch of multi-valued fields names the popular keys many
// times), and the client gets each key once.
#ifndef PS_WORKER_EMBEDDING_IO_H_
#define PS_WORKER_EMBEDDING_IO_H_

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "common/metrics/registry.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/model/model_spec.h"
#include "worker/model/pooled_input.h"
#include "worker/row_cache.h"

namespace ps {
namespace worker {

// One pooled input of the model: the rows of `table` for the values of one sparse field, or
// for the cross of several single-valued fields (one key a sample: XXH3-64 of their keys).
struct EmbeddingSlot {
  std::string table;
  int dim = 0;
  bool mean = false;        // MEAN pooling, else SUM
  std::vector<int> fields;  // one: the field's values; several: their cross
  int offset = 0;           // of the slot's floats in a sample's emb row
};

// The slots that read one table, in the order of the model's layout.
struct TableSlots {
  std::string table;
  int dim = 0;
  std::vector<int> slots;
};

// The model's embedding inputs, slot by slot. Thread-compatible (immutable once built).
class EmbeddingLayout {
 public:
  // The slots of `spec` (made from `job` by ModelSpec::FromJob): one a field, in order, reading
  // its table (data.schema's field table, else model.shared_table or the job's i-th table), then
  // the dim-1 slots of model.linear_table (WIDE_DEEP's wide features, DEEPFM's fields).
  // INVALID_ARGUMENT when a wide feature names no field, or crosses a multi-valued field.
  static absl::StatusOr<EmbeddingLayout> FromJob(const config::Job& job, const ModelSpec& spec);

  const std::vector<EmbeddingSlot>& slots() const { return slots_; }
  const std::vector<TableSlots>& tables() const { return tables_; }
  // Floats of emb a sample: spec.emb_width().
  int width() const { return width_; }
  int num_fields() const { return num_fields_; }
  // Whether a single-valued batch's keys are the pull's keys and its rows the emb layout: one
  // table, read by every field in order, with nothing else.
  bool direct() const { return direct_; }

 private:
  std::vector<EmbeddingSlot> slots_;
  std::vector<TableSlots> tables_;
  int width_ = 0;
  int num_fields_ = 0;
  bool direct_ = false;
};

// One table's keys in a batch: each distinct key once, and which of them every value reads.
struct TableKeys {
  // The distinct keys, in the order they first appear.
  std::vector<uint64_t> unique;
  // Per value, sample by sample and slot by slot (the slots of TableSlots::slots): the place of
  // its key in `unique`.
  std::vector<uint32_t> index;
  // Per (sample, slot): where its values end in `index`.
  std::vector<uint32_t> ends;
};

// Finds the distinct keys of a batch: an open-addressing table that keeps its memory from one
// batch to the next. Thread-compatible.
class KeyDeduper {
 public:
  // Starts a batch of at most `max_keys` keys: forgets every key seen.
  void Reset(size_t max_keys);
  // The place of `key` in `*unique`, appending it first when it is new to this batch.
  uint32_t Find(uint64_t key, std::vector<uint64_t>* unique);
  // Scratch for a table's values before they are deduplicated (GatherKeys).
  std::vector<uint64_t>& values() { return values_; }

 private:
  std::vector<uint64_t> values_;
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> places_;  // kEmpty, or the place in unique of keys_[i]
  uint64_t mask_ = 0;
  int shift_ = 63;
};

// The keys of every slot of every sample of `batch`, per table of `layout` ((*tables)[g] for
// layout.tables()[g], resized to them). `dedup` is scratch, kept between calls.
void GatherKeys(const EmbeddingLayout& layout, const Batch& batch, KeyDeduper* dedup,
                std::vector<TableKeys>* tables);

// Pools `rows` (per table, one row of the table's dim per distinct key of GatherKeys) into `emb`
// (`samples` x layout.width() floats): each slot's SUM or MEAN, zeros for a slot without keys.
void PoolRows(const EmbeddingLayout& layout, int samples, const std::vector<TableKeys>& tables,
              const std::vector<std::vector<float>>& rows, float* emb);

// The backward of PoolRows: (*grads)[g] (resized to table g's distinct keys x dim) gets, for
// each distinct key, the sum over the values that read it of their slot's gradient in `emb_grad`
// (divided by the slot's number of values for MEAN), summed in the order of the values.
void SpreadGrads(const EmbeddingLayout& layout, int samples, const std::vector<TableKeys>& tables,
                 const float* emb_grad, std::vector<std::vector<float>>* grads);

// One batch and its embedding rows, pulled asynchronously.
struct StepData {
  Batch batch;
  // Set by StartPull: the batch's keys are the pull's, and its rows land in `emb` directly
  // (EmbeddingLayout::direct() and a single-valued batch); tables and rows are then unused.
  bool direct = false;
  // Per table of the layout: its keys (the distinct ones are pulled) and their rows.
  std::vector<TableKeys> tables;
  std::vector<std::vector<float>> rows;
  KeyDeduper dedup;
  std::vector<std::future<absl::Status>> pending;
  // The batch's pooled inputs in the model's layout: batch.size x layout.width() floats.
  std::vector<float> emb;
  // Whether `emb` holds the batch's pooled inputs: set by FinishPull (and for a direct batch by
  // AwaitPull); false after AwaitPull of a batch whose rows stay unpooled in `rows`.
  bool pooled = false;
  // Set by StartPull with a row cache (else null): the cache, the step pulled for, and per table
  // the places in tables[g].unique of the keys it missed, their keys and their pulled rows.
  RowCache* cache = nullptr;
  int64_t step = 0;
  std::vector<std::vector<uint32_t>> misses;
  std::vector<std::vector<uint64_t>> miss_keys;
  std::vector<std::vector<float>> miss_rows;
  // A cache on the device (RowCache::on_device), per table: the hits' slots and their places in
  // tables[g].unique (set by StartPull; their rows in `rows` are left unset), and the slots the
  // pulled misses go to with their places there (set by AwaitPull). The model's pass copies both.
  std::vector<std::vector<uint32_t>> hit_slots;
  std::vector<std::vector<uint32_t>> hit_places;
  std::vector<std::vector<uint32_t>> admit_slots;
  std::vector<std::vector<uint32_t>> admit_places;
};

// Starts the pulls of `d->batch`'s rows. `d` must stay in place until FinishPull returns.
// With `cache` (not owned; training.row_cache), the pull is for step `step`: each table's
// distinct keys are looked up in the cache, whose fresh rows are copied now, and only the misses
// are pulled (none for a table whose keys all hit). Without it, every distinct key is pulled.
void StartPull(Client* client, const EmbeddingLayout& layout, StepData* d,
               RowCache* cache = nullptr, int64_t step = 0);

// Waits for the pulls StartPull began and pools the rows into `d->emb`; with a cache, first puts
// the pulled misses' rows in their places and admits them into the cache. Returns the first
// error of the client's pulls (then `d->emb` is unspecified and nothing is admitted).
absl::Status FinishPull(const EmbeddingLayout& layout, StepData* d);

// Waits for the pulls StartPull began, without pooling (with a cache, the pulled misses put in
// place and admitted, as FinishPull does): the rows stay in `d->rows`, one per distinct key (for a
// model that pools them on its device: PooledInputOf), except for a direct batch, whose rows are
// its pooled inputs in `d->emb`. Sets d->pooled accordingly. Returns the first error of the
// client's pulls.
absl::Status AwaitPull(const EmbeddingLayout& layout, StepData* d);

// The batch of `d` (pulled, after AwaitPull or FinishPull, not direct) as a model that pools on
// its device takes it: per table of `layout`, the distinct rows of `d->rows`, the index and ends
// of `d->tables`, and the offsets and MEAN flags of the table's slots. The spans point into `d`,
// which must stay unchanged while the result is used; dense and labels are d->batch's.
PooledInput PooledInputOf(const EmbeddingLayout& layout, const StepData& d);
// The row cache of `job`'s training.row_cache for the tables of `layout`, its series in
// `registry` (may be null) labelled with `rank`, its rows on the device when `on_device` (a model
// that pools there: RowCache::Options::on_device); null when the job has none. Errors of
// RowCache::Create.
absl::StatusOr<std::unique_ptr<RowCache>> MakeRowCache(const config::Job& job,
                                                       const EmbeddingLayout& layout,
                                                       metrics::Registry* registry, int rank,
                                                       bool on_device = false);

// Waits for whatever pulls of `d` are still in flight, ignoring their outcome (a batch that
// will not be used, before its buffers go).
void DrainPull(StepData* d);

// The embedding gradients of one step on their way to the servers.
struct PushData {
  int64_t step = -1;  // -1: none in flight
  std::vector<std::vector<uint64_t>> keys;
  std::vector<std::vector<float>> grads;
  std::vector<std::future<absl::Status>> pending;
};

// Starts the pushes of `emb_grad` (the gradient of the loss in d->emb's layout) for the keys
// `d` pulled, one per table, as step `step`. `p` must stay in place until FinishPush returns.
void StartPush(Client* client, const EmbeddingLayout& layout, const StepData& d,
               const std::vector<float>& emb_grad, int64_t step, PushData* p);

// Starts the pushes of `row_grads` (per table of `layout`, the gradient of each distinct key `d`
// pulled, in the order of d.tables[g].unique: what SpreadGrads computes, here from a model that
// pooled on its device) as step `step`. Takes the vectors' contents (they are swapped into `p`;
// *row_grads gets p's previous buffers back). `d` must not be direct. `p` must stay in place
// until FinishPush returns.
void StartPushRows(Client* client, const EmbeddingLayout& layout, const StepData& d,
                   std::vector<std::vector<float>>* row_grads, int64_t step, PushData* p);

// Waits for the pushes StartPush or StartPushRows began; the first error of the client's pushes.
absl::Status FinishPush(PushData* p);

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_EMBEDDING_IO_H_

// One shard's state on one server: every table's rows, the dense chunks, the exactly-once window,
// the sums of the pending sync step, the shard's applied step and its applied sequence.
//
// The shard is the unit that servers replicate, snapshot and restore, and that the coordinator
// moves between servers: everything a copy of a shard needs to take over lives here, and nothing
// of the server (routing, validation of requests, the step barrier) does.
#ifndef PS_SERVER_SHARD_SHARD_H_
#define PS_SERVER_SHARD_SHARD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/optimizer.h"
#include "proto/ps.pb.h"
#include "server/storage/apply_window.h"
#include "server/storage/dense_store.h"
#include "server/storage/embedding_table.h"
#include "server/storage/row_tier.h"

namespace ps {
namespace server {

// A shard's state at one point, as a checkpoint holds it: its rows with their optimizer state, its
// dense chunks and its exactly-once window (Snapshot's records without the snapshot's bounds and
// without pending sync sums), numbered with the shard's applied sequence and applied step.
//
// An incremental cut holds only the rows changed since the shard's cut for checkpoint `base_id`
// (and, always, every dense chunk and the whole window): applied over that cut's rows (and its
// base's, down to a full cut) it gives the shard exactly.
struct ShardCut {
  uint32_t shard = 0;
  uint64_t sequence = 0;
  int64_t applied_step = -1;
  bool incremental = false;
  // The checkpoint an incremental cut builds on; 0 for a full cut.
  uint64_t base_id = 0;
  // rows, dense and window records. A row may be in more than one rows record (a checkpoint
  // chain's cuts, oldest first): the last one holds its value, as Shard::FinishRestore applies
  // them in order. Other records in any order.
  std::vector<rpc::ShardRecord> records;
  // A full cut's rows are read after the cut, copy-on-write (Shard::ReadCutRows): the read under
  // way in its shard, 0 once every row is in `records`; and the table being read.
  uint64_t rows_to_read = 0;
  uint32_t rows_table = 0;
  // Whether the memory rows of rows_table were read, and its tiered rows are being read.
  bool reading_tier = false;
};

// What a checkpoint asks of a shard's cut (Shard::CutRows).
struct CutRequest {
  // The checkpoint the cut is for; 0: none (the cut is not remembered as a base).
  uint64_t checkpoint_id = 0;
  // The checkpoint it may build on; 0: a full cut. The cut is incremental only if this shard's
  // previous checkpoint cut was for exactly this checkpoint (see Shard::CutRows).
  uint64_t base_id = 0;
};

// A change as a Shard hands it to its record sink. A push's rows, the bulk of replication, keep
// their values apart from the record, where the optimizer wrote them, so that they are neither
// zero-filled nor copied before they are sent: then record.rows().values() is empty and `values`
// holds `value_bytes` bytes (row_floats floats a key of record.rows().keys()). Every other record
// holds everything itself (`values` null).
struct RecordOut {
  rpc::ShardRecord record;
  std::unique_ptr<float[]> values;
  size_t value_bytes = 0;

  // The record's values, wherever they are (rows records only).
  absl::string_view rows_values() const {
    return values != nullptr
               ? absl::string_view(reinterpret_cast<const char*>(values.get()), value_bytes)
               : absl::string_view(record.rows().values());
  }
  // The whole record, its values put back in it if they were apart (for ApplyRecord).
  rpc::ShardRecord Whole() const;
};

// What every shard of a server shares. Constant; the pointed-to objects must outlive the shards.
struct ShardConfig {
  // The job's tables, by table index. Not owned; must not be null.
  const std::vector<std::unique_ptr<TableSpec>>* tables = nullptr;
  // Applies dense gradients. Not owned; must not be null.
  const Optimizer* dense_optimizer = nullptr;
  // The cluster's dense_chunk_floats (> 0).
  uint32_t dense_chunk_floats = 65536;
  // Sync training: pushes are summed into the pending step and applied by ApplyStep.
  bool sync = false;
  // By table index: the counters per row of the table's admission sketch in each shard
  // (AdmissionOptions::width); missing entries: 65536. Only tables with admission have one.
  std::vector<size_t> sketch_width;
  // By table index, the clock rows' use is stamped with (TableShard::SetTick), read at each pull,
  // push and sweep: the memory keeper advances it (server/memory_keeper.h). Null: 0.
  const std::atomic<uint32_t>* use_ticks = nullptr;
  // The server's disk tier (server/storage/row_tier.h), or null for none. Not owned; outlives
  // the shards. With a tier, the rows that budget eviction takes out of memory are demoted to it
  // rather than dropped, and a pull or push of a row in it promotes the row back.
  RowTier* tier = nullptr;
};

// What one Shard::Sweep does to each table.
struct TableSweep {
  // Rows unused for more than this many ticks are evicted; 0: none by age.
  uint32_t ttl_ticks = 0;
  // Above `high_rows` rows, rows are evicted by the table's policy down to `low_rows`; 0: never.
  size_t high_rows = 0;
  size_t low_rows = 0;
  // Only evict above high_rows; no pass over the index for age (the sweeper's passes that follow
  // one that left a table above its high watermark).
  bool evict_only = false;
};

// What a Shard::Sweep did.
struct SweepResult {
  size_t evicted = 0;
  // Whether every table is now at or below its high_rows.
  bool within = true;
};

// A Shard holds one shard of every table and of the dense tensors. Thread-safe: one lock per
// shard serialises its calls, so different shards proceed in parallel.
//
// Callers have validated what they pass (table indices, keys of this shard, finite gradients of
// the table's dim): a Shard checks only what depends on its own state.
//
// Replication: while a record sink is set, every change is also described by one ShardRecord
// (proto/ps.proto; handed over as a RecordOut) numbered with the shard's applied sequence, handed to the sink under the
// shard's lock and so in sequence order. A copy applies them with ApplyRecord and ends in the same
// state bit for bit; Snapshot describes the whole shard for a copy that starts from nothing.
class Shard {
 public:
  // Receives the records of a shard's changes, under its lock: it must not call the shard, and
  // should be quick (queue the record).
  using RecordSink = std::function<void(RecordOut&&)>;

  // `expected_rows[t]` presizes table t's index (see TableShard); it may be shorter than the
  // tables (missing hints are 0). A shard created `complete` holds its state (a new primary's
  // empty shard); one created not complete is a copy waiting for a snapshot (see complete()).
  Shard(uint32_t id, const ShardConfig& config, absl::Span<const size_t> expected_rows,
        bool complete = true);

  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  // Drops the copy's rows in the tier.
  ~Shard();

  uint32_t id() const { return id_; }

  // Writes the embeddings of `keys` (dim floats each, in keys order) of table `table` to `out`,
  // creating missing rows with the table's initializer. With a tier, missing rows found in it
  // are promoted first: the tier is read without the shard's lock, so that the pulls of rows in
  // memory do not wait for the disk.
  void Pull(size_t table, absl::Span<const uint64_t> keys, float* out);

  // Like Pull without creating rows (TableShard::Peek): how a replica answers a pull. Rows in the
  // tier are read from it (outside the lock) and left there.
  void Read(size_t table, absl::Span<const uint64_t> keys, float* out) const;

  // Applies a push of `grads` (dim floats per key, in keys order; duplicates summed) to table
  // `table`, exactly once per (worker, sequence): the window's verdict is returned, and only
  // kApply changes anything. Sync mode: the gradients are added to the pending step's sums,
  // applied by ApplyStep; otherwise they are applied at once with the table's optimizer. An
  // applied push advances applied_sequence() by one.
  ApplyWindow::Verdict Push(size_t table, uint32_t worker, uint64_t sequence,
                            absl::Span<const uint64_t> keys, const float* grads);

  // Sync mode: applies the pending step's sums with the tables' optimizers and records `step` as
  // this shard's applied step. Advances applied_sequence() by one.
  void ApplyStep(int64_t step);

  // The newest step ApplyStep applied; -1 before any.
  int64_t applied_step() const;

  // Sync mode: whether the pending step has sums (a push of it was applied).
  bool has_pending() const;

  // Replaces *values with chunk `chunk` of dense tensor `name` and *total_floats with the
  // tensor's size. NOT_FOUND (outputs unchanged) if it was never written.
  absl::Status ReadDense(absl::string_view name, uint32_t chunk, std::vector<float>* values,
                         uint64_t* total_floats) const;

  // Whether a write of `length` floats to a dense chunk would be accepted
  // (DenseChunkStore::CheckWrite): OK or INVALID_ARGUMENT saying why.
  absl::Status CheckDenseWrite(absl::string_view name, uint32_t chunk, size_t length,
                               uint64_t total_floats) const;

  // Replaces the values of a dense chunk (DenseChunkStore::Assign). Advances applied_sequence()
  // by one when it succeeds; INVALID_ARGUMENT as Assign.
  absl::Status AssignDense(absl::string_view name, uint32_t chunk, absl::Span<const float> values,
                           uint64_t total_floats);

  // Applies a dense gradient with the dense optimizer, exactly once per (worker, sequence) when
  // sequence is not 0 (0: no exactly-once check). Returns the window's verdict (kApply when
  // sequence is 0); only kApply changes anything and advances applied_sequence() by one.
  // INVALID_ARGUMENT as DenseChunkStore::ApplyGradient, with nothing recorded in the window.
  absl::StatusOr<ApplyWindow::Verdict> ApplyDenseGradient(absl::string_view name, uint32_t chunk,
                                                          absl::Span<const float> grads,
                                                          uint64_t total_floats, uint32_t worker,
                                                          uint64_t sequence);

  // How many changes (pushes, dense writes, step applications) this shard has applied: a copy
  // that has applied more holds newer state. 0 when new.
  uint64_t applied_sequence() const;

  // Adds, for every table t, its rows held to (*rows)[t] and its bytes to (*bytes)[t]. Both must
  // have one entry per table.
  void AddSizes(std::vector<uint64_t>* rows, std::vector<uint64_t>* bytes) const;

  // Adds every table's TableShard::Counters to (*counters)[t] (one entry per table).
  void AddCounters(std::vector<TableShard::Counters>* counters) const;

  // --- Bounds and eviction ---

  // Caps each table's rows (TableShard::SetMaxRows; by table index, missing: no cap), now and
  // for the tables a snapshot or restore creates later.
  void SetMaxRows(absl::Span<const size_t> max_rows);

  // One step of eviction on a complete shard (a primary's; a copy's rows follow its primary's
  // records), table by table: visits max(`max_buckets`, a 200th of the table's index) buckets and
  // examines at most `max_buckets` rows for eviction, in pieces, each under the shard's lock
  // alone (a pull or push waits for one piece at most): sweeps out rows older than its
  // TTL, and above high_rows evicts by policy towards low_rows. `sweeps` has one entry per
  // table. The evicted rows go to the record sink as evict records (one per table and step), so
  // that copies remove them too (one per table and piece that evicted); each advances
  // applied_sequence() by one. Does nothing on a copy that is not complete, nor to a table whose
  // sweep has neither a TTL nor a high_rows.
  SweepResult Sweep(absl::Span<const TableSweep> sweeps, size_t max_buckets);

  // --- Replication ---

  // Sets the sink of this shard's records (nullptr: no records). Takes effect for the next change.
  void SetRecordSink(RecordSink sink);

  // Describes the whole shard for a copy that starts from nothing: under the shard's lock, hands
  // `emit` a snapshot_begin record, the rows of every table (records of at most about
  // `max_record_bytes` each), every dense chunk, every window entry, the pending step's sums, and
  // a snapshot_end record, all numbered with the current applied sequence; then calls `then`,
  // still under the lock, so that nothing changes between the snapshot and what the caller
  // arranges in `then` (typically: add the copy to the sink's targets).
  // `snapshot_id` names the snapshot (SnapshotBegin.snapshot_id).
  void Snapshot(uint64_t snapshot_id, size_t max_record_bytes,
                absl::FunctionRef<void(rpc::ShardRecord&&)> emit, absl::FunctionRef<void()> then);

  // --- Checkpoints ---

  // Adds to `cut` (under the shard's lock) what Cut would, without the rows: sets its shard,
  // sequence and applied step and appends the dense chunks and the window. With CutRows later,
  // for a sync step boundary: a step's pushes leave the rows unchanged until the step is applied,
  // so the rows may be cut after the window until then.
  void CutState(ShardCut* cut) const;

  // Cuts the rows of every table for `cut` and closes the shard's current generation (rows
  // changed from now on belong to the next).
  //
  // Incremental when `request.base_id` is not 0 and is the checkpoint_id of this shard's
  // previous cut and no row was evicted or demoted to the tier since (an increment has no way to
  // say a row is gone, and reads only the rows in memory):
  // then only the rows changed since that cut are appended to `cut`'s records (of
  // at most about `max_record_bytes`), and `cut` is marked incremental on base_id. Otherwise
  // every row, the tier's too (a full cut): so a shard new to this object (a failover's promoted
  // replica, a restart, a restore, a new snapshot) is cut in full first. A full cut's rows are not
  // copied here but read afterwards by ReadCutRows, as of this instant, while the shard keeps
  // changing (cut->rows_to_read is set). Any new cut abandons the read of an earlier one. A request
  // with a checkpoint_id is remembered as the base for the next one.
  void CutRows(size_t max_record_bytes, const CutRequest& request, ShardCut* cut);

  // Appends to `cut` the next record of its rows (at most about `max_record_bytes`) as they were
  // at CutRows. Returns true if one was appended, false (with cut->rows_to_read reset to 0) once
  // every row is in `cut`, or if there was nothing to read. The shard's lock is held only while
  // the rows are copied into buffers allocated before (a memcpy of about max_record_bytes), so
  // that pushes wait no longer than that copy. Until the read ends, the first change to a row not
  // read yet copies it aside (see TableShard::StartCut). ABORTED if the read was abandoned
  // (AbandonCutRows, a newer cut) or the shard's rows were replaced (a restore or a primary's
  // snapshot) since CutRows.
  absl::StatusOr<bool> ReadCutRows(size_t max_record_bytes, ShardCut* cut);

  // Abandons the read of a cut's rows under way, if any, dropping the rows copied aside for it.
  void AbandonCutRows();

  // CutState and CutRows under one lock: the whole shard at one applied sequence, a full cut's
  // rows left for ReadCutRows.
  ShardCut StartCut(size_t max_record_bytes, const CutRequest& request = {});

  // CutState and CutRows under one lock: the whole shard at one applied sequence, the rows read
  // under that lock too (the cut is complete: rows_to_read is 0). Pending sync sums are left out
  // (a sync checkpoint is cut at a step boundary, where there are none).
  ShardCut Cut(size_t max_record_bytes, const CutRequest& request = {});

  // The generation rows changing now are stamped with: 1 when new, advanced by each CutRows.
  // Generations are 16 bits (TableShard::kMaxGeneration): the cut that would take it past that
  // sets every row's to 0 and starts again at 1 (see CutRows; the remembered base moves with
  // it).
  uint32_t generation() const;

  // Tests of the wrap-around: the generation as if that many cuts had been taken.
  void SetGenerationForTesting(uint32_t generation);

  // A restore, as a server loads a checkpoint (server/checkpoint/server_checkpoint.h): rows
  // streamed from files rather than held in a cut's records. BeginRestore empties the shard (not
  // complete, sequence 0); RestoreRows then writes `n` whole rows (row_floats() floats each, in
  // ids order) of table `table` (a valid index; an id's later row replaces its earlier one);
  // FinishRestore applies `cut` over those rows (its rows records, dense chunks and window; its
  // applied sequence and step), and the shard becomes complete.
  // RestoreRows: FAILED_PRECONDITION, nothing written, unless a restore was begun and not
  // finished. FinishRestore: FAILED_PRECONDITION without BeginRestore; INVALID_ARGUMENT, with the
  // shard left empty at sequence 0 and not complete, when a record is malformed (see
  // ApplyRecord) or is not a rows, dense or window record of this shard.
  void BeginRestore();
  absl::Status RestoreRows(size_t table, const uint64_t* ids, const float* rows, size_t n);
  absl::Status FinishRestore(const ShardCut& cut);

  // The snapshot this copy was built from; 0 for a shard never restored from one.
  uint64_t snapshot_id() const;

  // Applies a record of this shard's primary. Records after a snapshot_begin (up to its
  // snapshot_end) must carry its sequence; any other must carry applied_sequence() + 1.
  // OK (applied; a record of a sequence already applied is ignored, for retried batches);
  // ABORTED, with nothing changed, for a record out of sequence (a snapshot must come first);
  // INVALID_ARGUMENT, with nothing changed, for a malformed one (unknown table, lengths that
  // disagree). A copy applying records has no record sink.
  absl::Status ApplyRecord(const rpc::ShardRecord& record);

  // ApplyRecord for a rows record whose values are not in it (record.rows().values() is ignored)
  // but in `values`: runs of bytes that hold them together, in order, a run possibly ending
  // inside a row (a Replicate call's values as they lie in gRPC's slices), so that they are
  // copied only into the rows. ApplyRecord's outcomes; INVALID_ARGUMENT, with nothing changed,
  // also when the record is not a rows record or the runs do not hold exactly a row per key.
  absl::Status ApplyRowsRecord(const rpc::ShardRecord& record,
                               absl::Span<const absl::string_view> values);

  // False from the construction of a copy (complete = false) or a snapshot_begin until the
  // snapshot_end: the copy does not yet hold the shard's state.
  bool complete() const;

 private:
  // Sync mode: the summed gradients of one table for the pending step.
  struct StepSums {
    absl::flat_hash_map<uint64_t, uint32_t> index;  // id -> position in ids
    std::vector<uint64_t> ids;
    std::vector<float> sums;  // ids.size() x dim
  };

  // Erases the rows of an evict record's keys; with `demote`, moves them to the tier instead
  // (erases them without one).
  absl::Status ApplyEvictLocked(const rpc::RowsChange& change, bool demote)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- The tier ---
  // Whether table `table` may have rows in the tier.
  bool TieredLocked(size_t table) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return config_.tier != nullptr && table < tiered_.size() && tiered_[table];
  }
  // Promotes the rows of `keys` of `table` that are in the tier and not in memory. With
  // `may_unlock`, the tier is read with mu_ released (and read again if a demotion or a reset
  // happened meanwhile); the lock is held again on return.
  void PromoteLocked(size_t table, absl::Span<const uint64_t> keys, bool may_unlock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With a tier and a row cap: demotes rows of `table` (by its policy) until the rows of `keys`
  // not in memory fit under the cap, so that a pull or push about to create them is not refused;
  // the demotion goes to the record sink as a sweep's does. Then promotes any of `keys` that were
  // demoted (under the lock). Does nothing without a tier or a cap.
  void MakeRoomLocked(size_t table, absl::Span<const uint64_t> keys)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `departed` rows of `table` (ids in `ids`) to the tier, or drops them if it is full,
  // counting them and recording the change (a demote or evict record). Returns the rows.
  size_t DemoteOrDropLocked(size_t table, const std::vector<uint64_t>& ids,
                            const TableShard::Departed& departed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts departed rows of `table` in the tier: OK, or RESOURCE_EXHAUSTED (tier at its cap, nothing
  // written).
  absl::Status DemoteLocked(size_t table, const TableShard::Departed& rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whole rows (row_floats() fp32 floats each, need not be aligned) for `keys` of `table`, from
  // a record, a snapshot or a restore: written to memory, except with `to_tier` those with no row
  // in memory, which go to the tier (if it refuses, to memory). A stale tier copy of a row
  // written to memory is deleted.
  void AssignRowsLocked(size_t table, absl::Span<const uint64_t> keys, const void* rows,
                        bool to_tier, absl::Span<const uint32_t> ages = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A restore's rows: to memory, or past the table's cap to the tier (AssignRowsLocked).
  void RestoreRowsLocked(size_t table, absl::Span<const uint64_t> ids, const void* rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Emits the tiered rows of every table: as tiered_rows records with their ages (a snapshot),
  // or as rows records (a cut).
  void EmitTieredLocked(size_t max_record_bytes, bool with_ages,
                        absl::FunctionRef<void(rpc::ShardRecord&&)> emit) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops this copy's rows in the tier and takes a new incarnation.
  void ResetTierLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Describes the rows of `keys` of table `table` as they are now into `change`.
  void DescribeRows(size_t table, absl::Span<const uint64_t> keys, rpc::RowsChange* change) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Describes a dense chunk (written before) as it is now into `change`.
  void DescribeDense(absl::string_view name, uint32_t chunk, uint64_t total_floats,
                     rpc::DenseChange* change) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Sets table `table`'s use clock from config_.use_ticks.
  void SetTickLocked(size_t table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (config_.use_ticks != nullptr) {
      tables_[table]->SetTick(config_.use_ticks[table].load(std::memory_order_relaxed));
    }
  }
  // Adds gradients to the pending step's sums of `table`.
  void AddToPending(size_t table, absl::Span<const uint64_t> keys, const float* grads)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands a record of the change that made applied_sequence_ what it is to the sink, if any.
  void Emit(RecordOut&& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a RowsChange whose values are `values_bytes` bytes against its table (dim floats a key
  // of gradients, or whole rows): OK, or INVALID_ARGUMENT naming what disagrees.
  absl::Status CheckChange(const rpc::RowsChange& change, bool gradients,
                           size_t values_bytes) const;
  // Checks a RowsChange against its table (CheckChange) and
  // points *keys and *values at its *n keys and their floats, in place when the bytes are
  // aligned, else in the aligned_ copies.
  absl::Status ReadChange(const rpc::RowsChange& change, bool gradients,
                          std::vector<uint64_t>* aligned_keys, std::vector<float>* aligned_values,
                          const uint64_t** keys, const float** values, size_t* n) const;
  // `values_apart`: ApplyRowsRecord's values (null: the record holds its own).
  absl::Status ApplyRecordLocked(const rpc::ShardRecord& record,
                                 const absl::Span<const absl::string_view>* values_apart = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the rows of a rows record whose values are `values` (ApplyRowsRecord), checked
  // before anything is written.
  absl::Status AssignRowsApart(const rpc::RowsChange& change,
                               absl::Span<const absl::string_view> values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Snapshot's parts: the rows of every table, the dense chunks, the window; each record is
  // numbered with the shard and its applied sequence.
  // `since` (if not null): only the rows whose generation is above it.
  void EmitRowsLocked(size_t max_record_bytes, absl::FunctionRef<void(rpc::ShardRecord&&)> emit,
                      const uint32_t* since = nullptr) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void EmitDenseLocked(absl::FunctionRef<void(rpc::ShardRecord&&)> emit) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void EmitWindowLocked(absl::FunctionRef<void(rpc::ShardRecord&&)> emit) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // CutState's and CutRows' work under the lock.
  void CutStateLocked(ShardCut* cut) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void CutRowsLocked(size_t max_record_bytes, const CutRequest& request, ShardCut* cut)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the read of a cut's rows under way, if any.
  void EndCutReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stamps every table's changes from now on with `generation`.
  void SetGenerationLocked(uint32_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replaces every table, the window, the dense chunks and the pending sums with empty ones.
  void ResetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FinishRestore's work under the lock.
  absl::Status FinishRestoreLocked(const ShardCut& cut) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const uint32_t id_;
  const ShardConfig config_;
  const std::vector<size_t> expected_rows_;

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<TableShard>> tables_ ABSL_GUARDED_BY(mu_);  // by table index
  ApplyWindow window_ ABSL_GUARDED_BY(mu_);
  DenseChunkStore dense_ ABSL_GUARDED_BY(mu_);
  std::vector<StepSums> pending_ ABSL_GUARDED_BY(mu_);  // by table index; sync mode
  int64_t applied_step_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t applied_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  bool complete_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t snapshot_id_ ABSL_GUARDED_BY(mu_) = 0;
  RecordSink sink_ ABSL_GUARDED_BY(mu_);
  // Incremental checkpoints: the generation of changes now, and the previous checkpoint cut of
  // this object's rows (its checkpoint, 0 for none since the rows were last replaced, and the
  // generation it closed: the rows changed since have a greater one).
  uint32_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t base_checkpoint_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t base_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The full cut whose rows are being read (ReadCutRows), 0 for none; and the last one's number.
  uint64_t cut_read_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cut_reads_ ABSL_GUARDED_BY(mu_) = 0;
  // Between BeginRestore and FinishRestore.
  bool restoring_ ABSL_GUARDED_BY(mu_) = false;
  // Row caps by table (SetMaxRows).
  std::vector<size_t> max_rows_ ABSL_GUARDED_BY(mu_);
  // Whether a row was evicted (or erased by an evict record) since the last cut: the next cut
  // is full.
  bool evicted_since_cut_ ABSL_GUARDED_BY(mu_) = false;
  // The tier: this copy's incarnation there (0: none yet), by table whether rows were put there
  // since, and a count of the demotions and resets, which a promotion that read the tier without
  // the lock checks.
  uint32_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<bool> tiered_ ABSL_GUARDED_BY(mu_);
  uint64_t tier_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // A full cut's reads of the tiered rows, by table (shared: read without the lock).
  std::vector<std::shared_ptr<RowTier::Scanner>> cut_scanners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_SHARD_SHARD_H_

// A batch's embedding rows in and out of the servers: the sparse fields grouped by table (one
// pull and one push per table and step), the rows gathered into the model's layout after a pull,
// and the model's embedding gradients scattered into per-table pushes. Used by the trainer and
// the held-out evaluation.
#ifndef PS_WORKER_EMBEDDING_IO_H_
#define PS_WORKER_EMBEDDING_IO_H_

#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/ps_client.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"

namespace ps {
namespace worker {

// The sparse fields that share one table.
struct FieldGroup {
  std::string table;
  std::vector<int> fields;  // indexes of the batch's sparse fields, increasing
};

// The fields of `num_sparse` grouped by the table they read: one group holding every field with
// the model's shared_table, else one group per table of the job (field i reads the i-th table).
std::vector<FieldGroup> GroupFields(const config::Job& job, int num_sparse);

// One batch and its embedding rows, pulled asynchronously. With one group holding every field in
// order (a shared table), the batch's keys are the call's keys and the rows land in `emb`
// directly; otherwise each group's keys are gathered and its rows scattered into `emb`.
struct StepData {
  Batch batch;
  std::vector<std::vector<uint64_t>> keys;
  std::vector<std::vector<float>> rows;
  std::vector<std::future<absl::Status>> pending;
  // The batch's rows in the model's layout: sample-major, then field, then `dim` floats.
  std::vector<float> emb;
};

// Starts the pulls of `d->batch`'s rows (`dim` floats each). `d` must stay in place until
// FinishPull returns.
void StartPull(Client* client, const std::vector<FieldGroup>& groups, int num_sparse, int dim,
               StepData* d);

// Waits for the pulls StartPull began and lays the rows out in `d->emb`. Returns the first
// error of the client's pulls (then `d->emb` is unspecified).
absl::Status FinishPull(const std::vector<FieldGroup>& groups, int num_sparse, int dim,
                        StepData* d);

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

// Starts the pushes of `emb_grad` (laid out as StepData::emb) for `batch`'s keys, one per group,
// as step `step`. `p` must stay in place until FinishPush returns.
void StartPush(Client* client, const std::vector<FieldGroup>& groups, int num_sparse, int dim,
               const Batch& batch, const std::vector<float>& emb_grad, int64_t step, PushData* p);

// Waits for the pushes StartPush began; the first error of the client's pushes.
absl::Status FinishPush(PushData* p);

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_EMBEDDING_IO_H_

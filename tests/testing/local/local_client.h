// An in-process ps::Client: the tables of a job held by one server::ShardedStore in this process,
// with no coordinator and no network. What training costs without the cluster
// (tests/bench/train_bench.cc), and a Client for tests that need real tables but no daemons.
//
//   auto client = ps::testing::LocalClient::Create(job, {});
//   absl::Status s = (*client)->Pull("emb", keys, absl::MakeSpan(rows));
//
// Requests are built as the network client builds them and handed to the store as a server's
// service would: keys grouped into runs by shard (ps::ShardOf), cut at the job's message limit, a
// fresh sequence number per push request, the step clock in every header, dense tensors in
// chunks. So the store validates and applies exactly what a cluster would. The client does not
// dedupe keys (the store sums the gradients of repeated keys). In sync mode it waits where the
// cluster waits: a pull for step t, as a server holds it, until step t - 1 is applied; a push or
// EndStep the store refuses as ahead of its pending step (UNAVAILABLE, which the network client
// retries), until the step before it is applied, then once more.
// In sync mode the store applies a step once the job's quorum of cluster.num_workers have ended
// it: a job trained by one LocalClient needs num_workers: 1.
#ifndef PS_TESTS_TESTING_LOCAL_LOCAL_CLIENT_H_
#define PS_TESTS_TESTING_LOCAL_LOCAL_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/ps_client.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "server/sharded_store.h"

namespace ps {
namespace testing {

struct LocalClientOptions {
  // The worker_id this client's pushes carry (the store admits each (worker_id, sequence) once
  // per shard). Default 1; any value.
  uint32_t worker_id = 1;
  // What rank() answers. Default 0; the trainer takes its rank from its AllReduce, not from here.
  int rank = 0;
  // How long a sync-mode call waits for the step before its own to be applied (the network
  // client's retry_timeout): then a pull returns DEADLINE_EXCEEDED, a push or EndStep the store's
  // UNAVAILABLE. Default 60 s, > 0.
  absl::Duration step_wait_timeout = absl::Seconds(60);
};

// A LocalClient is a Client whose store serves every shard of the job in this process.
// Thread-safe: the store locks per shard. The asynchronous calls run inline: `done` is called on
// the caller's thread before PullAsync or PushAsync returns.
class LocalClient final : public Client {
 public:
  // Creates the store and installs a shard map (version 1) in which one server, id 0, is the
  // primary of every shard. INVALID_ARGUMENT if the job fails validation or for a
  // step_wait_timeout <= 0.
  static absl::StatusOr<std::unique_ptr<LocalClient>> Create(const config::Job& job,
                                                             const LocalClientOptions& options);

  LocalClient(const LocalClient&) = delete;
  LocalClient& operator=(const LocalClient&) = delete;

  const config::Job& job() const override { return job_; }
  uint32_t worker_id() const override { return options_.worker_id; }
  int rank() const override { return options_.rank; }
  int64_t start_step() const override { return 0; }
  // The table's dim; NOT_FOUND for an unknown table.
  absl::StatusOr<uint32_t> Dim(absl::string_view table) const override;

  // As Client. NOT_FOUND for an unknown table; INVALID_ARGUMENT if values.size() is not
  // keys.size() * dim; sync mode: ABORTED if step clock was already applied (a straggler's pull),
  // DEADLINE_EXCEEDED if step clock - 1 is not applied within step_wait_timeout; otherwise the
  // store's error (none for valid calls). On error `values` is unspecified.
  absl::Status Pull(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<float> values) override;

  // As Client. NOT_FOUND for an unknown table; INVALID_ARGUMENT for lengths that disagree or a
  // NaN or Inf gradient, with nothing applied; otherwise the store's error (sync mode:
  // INVALID_ARGUMENT without a clock; UNAVAILABLE for a step after the pending one when the step
  // before it is not applied within step_wait_timeout; a push for an applied step is dropped).
  absl::Status Push(absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads) override;

  // As Client. NOT_FOUND if the tensor was never pushed (or has fewer chunks than values needs);
  // INVALID_ARGUMENT if it holds a different number of floats than values.size().
  absl::Status PullDense(absl::string_view name, absl::Span<float> values) override;

  // As Client. INVALID_ARGUMENT for an empty name, a NaN or Inf value, or a size that disagrees
  // with the tensor's.
  absl::Status PushDense(absl::string_view name, absl::Span<const float> values,
                         DenseUpdate update) override;

  // Run inline: `done` gets what Pull or Push returns, before these return; except a sync-mode
  // pull whose step clock - 1 is not applied yet, which waits as a server holds it: `done` then
  // runs on the thread that applies that step (after its EndStep), with the rows of the step
  // (UNAVAILABLE if the store shuts down first). `keys` and `values` must stay in place until then.
  void PullAsync(absl::string_view table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                 Callback done) override;
  void PushAsync(absl::string_view table, absl::Span<const uint64_t> keys,
                 absl::Span<const float> grads, Callback done) override;
  using Client::PullAsync;
  using Client::PushAsync;

  // As Client: sync mode, the store's EndStep (the newest applied step; for a step after the
  // pending one, waits as Push does, else UNAVAILABLE); -1 at once in the other modes.
  absl::StatusOr<int64_t> EndStep(int64_t step) override;

  void SetClock(int64_t step) override { clock_.store(step, std::memory_order_relaxed); }

  rpc::ShardMap shard_map() const override { return map_; }

  // The store behind this client, for tests that look at it directly.
  server::ShardedStore& store() { return *store_; }

 private:
  struct TableInfo {
    std::string name;
    uint32_t dim = 0;
    uint64_t name_hash = 0;
  };

  // The positions of a call's keys grouped by shard: order[shard_begin[s] .. shard_begin[s+1])
  // are the positions (in the caller's keys) of shard s's keys, in call order.
  struct ShardPlan {
    std::vector<uint32_t> order;
    std::vector<uint32_t> shard_begin;
  };

  LocalClient(const config::Job& job, const LocalClientOptions& options,
              std::unique_ptr<server::ShardedStore> store, rpc::ShardMap map);

  // The table, or NOT_FOUND.
  absl::StatusOr<const TableInfo*> FindTable(absl::string_view name) const;

  ShardPlan PlanKeys(const TableInfo& table, absl::Span<const uint64_t> keys) const;

  // Keys per request so that a request's keys and rows stay under the message limit.
  uint32_t MaxKeysPerRequest(uint32_t dim) const;

  // Calls `send(runs, positions)` for each request of a call: runs of consecutive shards whose
  // keys (positions into the caller's keys, in run order) are at most MaxKeysPerRequest(dim).
  // Stops at the first error and returns it.
  template <typename Send>
  absl::Status ForEachRequest(const TableInfo& table, const ShardPlan& plan, Send send) const;

  void FillHeader(rpc::RequestHeader* header, int64_t clock) const;

  // Pull's reading of the rows as they are at step `clock` (applied already), after its checks.
  absl::Status PullRows(const TableInfo& info, int64_t clock, absl::Span<const uint64_t> keys,
                        absl::Span<float> values);

  // Sync mode: waits until the store has applied `step` (at once in other modes or for step < 0).
  // DEADLINE_EXCEEDED after step_wait_timeout.
  absl::Status WaitApplied(int64_t step);

  // Runs `call`; in sync mode, if it answers UNAVAILABLE (step `step` is ahead of the store's
  // pending one), waits for step - 1 and runs it once more. The UNAVAILABLE if the wait fails.
  template <typename Call>
  auto WaitingForStep(int64_t step, Call call) -> decltype(call());

  // Constant after construction.
  const config::Job job_;
  const LocalClientOptions options_;
  const std::unique_ptr<server::ShardedStore> store_;
  const rpc::ShardMap map_;
  const uint32_t num_shards_;
  const uint64_t max_message_bytes_;
  const bool sync_;
  std::vector<TableInfo> tables_;
  absl::flat_hash_map<std::string, size_t> table_index_;

  std::atomic<uint64_t> next_sequence_{1};
  std::atomic<int64_t> clock_{-1};
};

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_LOCAL_LOCAL_CLIENT_H_

#include "tests/testing/local/local_client.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "client/internal/dense_chunks.h"
#include "common/finite.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace ps {
namespace testing {
namespace {

// Room for the header, table name and runs of a request beyond keys and values (as the network
// client reserves).
constexpr uint64_t kRequestOverheadBytes = 64 << 10;

// The id of the one server of the in-process map.
constexpr uint32_t kServerId = 0;

rpc::ShardMap OneServerMap(uint32_t num_shards) {
  rpc::ShardMap map;
  map.set_version(1);
  map.set_num_shards(num_shards);
  rpc::ServerInfo* server = map.add_servers();
  server->set_server_id(kServerId);
  server->set_address("in-process");
  server->set_alive(true);
  for (uint32_t s = 0; s < num_shards; ++s) {
    rpc::ShardAssignment* a = map.add_shards();
    a->set_shard(s);
    a->set_primary(kServerId);
  }
  return map;
}

// The chunks of a dense tensor of `total_floats` floats, cut into requests as the network client
// cuts one server's chunks: at most half the message limit each. Chunk c of a tensor lives on the
// shard ShardOf(NameHash(name), c), which the store checks.
std::vector<std::vector<uint32_t>> DenseRequests(uint64_t total_floats, uint64_t chunk_floats,
                                                 uint64_t max_message_bytes) {
  const uint64_t num_chunks = (total_floats + chunk_floats - 1) / chunk_floats;
  const uint64_t per_request =
      std::max<uint64_t>(1, (max_message_bytes / 2) / (chunk_floats * sizeof(float)));
  std::vector<std::vector<uint32_t>> requests;
  for (uint64_t c = 0; c < num_chunks; ++c) {
    if (c % per_request == 0) requests.emplace_back();
    requests.back().push_back(static_cast<uint32_t>(c));
  }
  return requests;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalClient>> LocalClient::Create(
    const config::Job& job, const LocalClientOptions& options) {
  if (options.step_wait_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("LocalClientOptions.step_wait_timeout must be > 0");
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<server::ShardedStore> store,
                      server::ShardedStore::Create(job, server::ShardedStore::Options{}));
  rpc::ShardMap map = OneServerMap(job.cluster().num_shards());
  store->SetShardMap(map, kServerId);
  return std::unique_ptr<LocalClient>(
      new LocalClient(job, options, std::move(store), std::move(map)));
}

LocalClient::LocalClient(const config::Job& job, const LocalClientOptions& options,
                         std::unique_ptr<server::ShardedStore> store, rpc::ShardMap map)
    : job_(job),
      options_(options),
      store_(std::move(store)),
      map_(std::move(map)),
      num_shards_(job.cluster().num_shards()),
      max_message_bytes_(job.cluster().max_message_bytes()),
      sync_(job.training().mode() == config::Training::SYNC) {
  for (const config::Table& t : job_.tables()) {
    tables_.push_back(TableInfo{t.name(), t.dim(), NameHash(t.name())});
  }
  for (size_t i = 0; i < tables_.size(); ++i) table_index_[tables_[i].name] = i;
}

absl::StatusOr<const LocalClient::TableInfo*> LocalClient::FindTable(absl::string_view name) const {
  const auto it = table_index_.find(name);
  if (it == table_index_.end()) {
    return absl::NotFoundError(absl::StrFormat("unknown table \"%s\"", name));
  }
  return &tables_[it->second];
}

absl::StatusOr<uint32_t> LocalClient::Dim(absl::string_view table) const {
  PS_ASSIGN_OR_RETURN(const TableInfo* info, FindTable(table));
  return info->dim;
}

uint32_t LocalClient::MaxKeysPerRequest(uint32_t dim) const {
  const uint64_t per_key = sizeof(uint64_t) + uint64_t{dim} * sizeof(float);
  const uint64_t room = max_message_bytes_ > 2 * kRequestOverheadBytes
                            ? max_message_bytes_ - kRequestOverheadBytes
                            : max_message_bytes_ / 2;
  return static_cast<uint32_t>(
      std::min<uint64_t>(std::max<uint64_t>(1, room / per_key), UINT32_MAX));
}

LocalClient::ShardPlan LocalClient::PlanKeys(const TableInfo& table,
                                             absl::Span<const uint64_t> keys) const {
  // A counting sort by shard, stable within a shard.
  std::vector<uint32_t> shard_of(keys.size());
  ShardPlan plan;
  plan.shard_begin.assign(num_shards_ + 1, 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    shard_of[i] = ShardOf(table.name_hash, keys[i], num_shards_);
    ++plan.shard_begin[shard_of[i] + 1];
  }
  for (uint32_t s = 0; s < num_shards_; ++s) plan.shard_begin[s + 1] += plan.shard_begin[s];
  std::vector<uint32_t> next(plan.shard_begin.begin(), plan.shard_begin.end() - 1);
  plan.order.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    plan.order[next[shard_of[i]]++] = static_cast<uint32_t>(i);
  return plan;
}

template <typename Send>
absl::Status LocalClient::ForEachRequest(const TableInfo& table, const ShardPlan& plan,
                                         Send send) const {
  const uint32_t max_keys = MaxKeysPerRequest(table.dim);
  google::protobuf::RepeatedPtrField<rpc::ShardRun> runs;
  uint32_t first = 0;  // index in plan.order of the request's first key
  uint32_t count = 0;  // keys in the request so far
  auto flush = [&]() -> absl::Status {
    if (count == 0) return absl::OkStatus();
    absl::Status status = send(runs, absl::MakeConstSpan(plan.order.data() + first, count));
    runs.Clear();
    first += count;
    count = 0;
    return status;
  };
  for (uint32_t s = 0; s < num_shards_; ++s) {
    uint32_t left = plan.shard_begin[s + 1] - plan.shard_begin[s];
    while (left > 0) {
      const uint32_t take = std::min(left, max_keys - count);
      rpc::ShardRun* run = runs.Add();
      run->set_shard(s);
      run->set_count(take);
      count += take;
      left -= take;
      if (count == max_keys) PS_RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

void LocalClient::FillHeader(rpc::RequestHeader* header, int64_t clock) const {
  header->set_map_version(map_.version());
  header->set_worker_id(options_.worker_id);
  header->set_clock(clock);
}

absl::Status LocalClient::WaitApplied(int64_t step) {
  if (!sync_ || step < 0) return absl::OkStatus();
  // Shared with the store's callback, which may run after a timed-out wait has returned.
  struct Wait {
    absl::Notification ready;
    absl::Status status;
  };
  auto wait = std::make_shared<Wait>();
  store_->RunWhenApplied(step, [wait](absl::Status status) {
    wait->status = std::move(status);
    wait->ready.Notify();
  });
  if (!wait->ready.WaitForNotificationWithTimeout(options_.step_wait_timeout)) {
    return absl::DeadlineExceededError(
        absl::StrFormat("step %d was not applied within %s", step,
                        absl::FormatDuration(options_.step_wait_timeout)));
  }
  return wait->status;
}

template <typename Call>
auto LocalClient::WaitingForStep(int64_t step, Call call) -> decltype(call()) {
  auto result = call();
  auto code = [](const auto& r) {
    if constexpr (std::is_same_v<std::decay_t<decltype(r)>, absl::Status>) {
      return r.code();
    } else {
      return r.status().code();
    }
  };
  if (!sync_ || code(result) != absl::StatusCode::kUnavailable) return result;
  if (!WaitApplied(step - 1).ok()) return result;
  return call();
}

absl::StatusOr<int64_t> LocalClient::EndStep(int64_t step) {
  if (!sync_) return int64_t{-1};
  return WaitingForStep(step, [&] { return store_->EndStep(options_.worker_id, step); });
}

absl::Status LocalClient::Pull(absl::string_view table, absl::Span<const uint64_t> keys,
                               absl::Span<float> values) {
  PS_ASSIGN_OR_RETURN(const TableInfo* info, FindTable(table));
  const uint32_t dim = info->dim;
  if (values.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pull of %d keys of dim %d needs %d values, got %d", keys.size(), dim,
                        keys.size() * dim, values.size()));
  }
  const int64_t clock = clock_.load(std::memory_order_relaxed);
  // As a server refuses a straggler's pull, and holds a pull for step t until step t - 1 is
  // applied.
  PS_RETURN_IF_ERROR(store_->CheckPullStep(clock));
  PS_RETURN_IF_ERROR(WaitApplied(clock - 1));
  return PullRows(*info, clock, keys, values);
}

absl::Status LocalClient::PullRows(const TableInfo& table, int64_t clock,
                                   absl::Span<const uint64_t> keys, absl::Span<float> values) {
  const TableInfo* info = &table;
  const uint32_t dim = info->dim;
  const ShardPlan plan = PlanKeys(*info, keys);
  std::vector<float> rows;
  return ForEachRequest(
      *info, plan,
      [&](const google::protobuf::RepeatedPtrField<rpc::ShardRun>& runs,
          absl::Span<const uint32_t> positions) -> absl::Status {
        rpc::PullRequest request;
        FillHeader(request.mutable_header(), clock);
        request.set_table(info->name);
        *request.mutable_runs() = runs;
        std::string* key_bytes = request.mutable_keys();
        key_bytes->resize(positions.size() * sizeof(uint64_t));
        uint64_t* out_keys = reinterpret_cast<uint64_t*>(key_bytes->data());
        for (size_t i = 0; i < positions.size(); ++i) out_keys[i] = keys[positions[i]];
        PS_RETURN_IF_ERROR(store_->Pull(request, [&](size_t num_keys, uint32_t row_dim) {
          rows.resize(num_keys * row_dim);
          return rows.data();
        }));
        const size_t row_bytes = size_t{dim} * sizeof(float);
        for (size_t i = 0; i < positions.size(); ++i) {
          std::memcpy(values.data() + size_t{positions[i]} * dim, rows.data() + i * dim, row_bytes);
        }
        return absl::OkStatus();
      });
}

absl::Status LocalClient::Push(absl::string_view table, absl::Span<const uint64_t> keys,
                               absl::Span<const float> grads) {
  PS_ASSIGN_OR_RETURN(const TableInfo* info, FindTable(table));
  const uint32_t dim = info->dim;
  if (grads.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("push of %d keys of dim %d needs %d gradients, got %d", keys.size(), dim,
                        keys.size() * dim, grads.size()));
  }
  // Checked here, not only by the store, because a push cut into several requests must apply
  // none of them.
  if (!AllFinite(grads.data(), grads.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "push to table \"%s\" has a NaN or Inf gradient; nothing was applied", table));
  }
  const int64_t clock = clock_.load(std::memory_order_relaxed);
  const ShardPlan plan = PlanKeys(*info, keys);
  return ForEachRequest(*info, plan,
                        [&](const google::protobuf::RepeatedPtrField<rpc::ShardRun>& runs,
                            absl::Span<const uint32_t> positions) -> absl::Status {
                          rpc::PushRequest request;
                          FillHeader(request.mutable_header(), clock);
                          request.mutable_header()->set_sequence(
                              next_sequence_.fetch_add(1, std::memory_order_relaxed));
                          request.set_table(info->name);
                          *request.mutable_runs() = runs;
                          std::string* key_bytes = request.mutable_keys();
                          key_bytes->resize(positions.size() * sizeof(uint64_t));
                          uint64_t* out_keys = reinterpret_cast<uint64_t*>(key_bytes->data());
                          std::string* grad_bytes = request.mutable_grads();
                          const size_t row_bytes = size_t{dim} * sizeof(float);
                          grad_bytes->resize(positions.size() * row_bytes);
                          char* out_grads = grad_bytes->data();
                          for (size_t i = 0; i < positions.size(); ++i) {
                            out_keys[i] = keys[positions[i]];
                            std::memcpy(out_grads + i * row_bytes,
                                        grads.data() + size_t{positions[i]} * dim, row_bytes);
                          }
                          // Only retries are duplicates, and nothing is retried; late keys (a sync
                          // step applied without this worker) are dropped by the store as a server
                          // drops them.
                          uint32_t duplicate_keys = 0;
                          uint32_t late_keys = 0;
                          return WaitingForStep(clock, [&] {
                            return store_->Push(request, &duplicate_keys, &late_keys);
                          });
                        });
}

void LocalClient::PullAsync(absl::string_view table, absl::Span<const uint64_t> keys,
                            absl::Span<float> values, Callback done) {
  const int64_t clock = clock_.load(std::memory_order_relaxed);
  absl::StatusOr<const TableInfo*> info = FindTable(table);
  if (!sync_ || clock <= 0 || !info.ok() || values.size() != keys.size() * (*info)->dim ||
      !store_->CheckPullStep(clock).ok()) {
    done(Pull(table, keys, values));  // at once: its rows, or its error
    return;
  }
  // Held as a server holds it, until step clock - 1 is applied (at once if it is).
  store_->RunWhenApplied(clock - 1, [this, info = *info, clock, keys, values,
                                     done = std::move(done)](absl::Status applied) {
    if (applied.ok()) applied = store_->CheckPullStep(clock);
    done(applied.ok() ? PullRows(*info, clock, keys, values) : applied);
  });
}

void LocalClient::PushAsync(absl::string_view table, absl::Span<const uint64_t> keys,
                            absl::Span<const float> grads, Callback done) {
  done(Push(table, keys, grads));
}

absl::Status LocalClient::PullDense(absl::string_view name, absl::Span<float> values) {
  const uint64_t chunk_floats = job_.cluster().dense_chunk_floats();
  for (const std::vector<uint32_t>& chunks :
       DenseRequests(values.size(), chunk_floats, max_message_bytes_)) {
    rpc::PullDenseRequest request;
    FillHeader(request.mutable_header(), clock_.load(std::memory_order_relaxed));
    request.set_name(std::string(name));
    for (const uint32_t c : chunks) request.add_chunks(c);
    rpc::PullDenseResponse response;
    PS_RETURN_IF_ERROR(store_->PullDense(request, &response));
    PS_RETURN_IF_ERROR(client_internal::CopyDenseChunks(name, response, chunk_floats, values));
  }
  return absl::OkStatus();
}

absl::Status LocalClient::PushDense(absl::string_view name, absl::Span<const float> values,
                                    DenseUpdate update) {
  if (name.empty()) return absl::InvalidArgumentError("dense tensor without a name");
  if (!AllFinite(values.data(), values.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense tensor \"%s\" has a NaN or Inf value; nothing was applied", name));
  }
  const uint64_t chunk_floats = job_.cluster().dense_chunk_floats();
  // Chunk c of a gradient carries sequence + c, which its shard admits once (proto/ps.proto).
  const uint64_t num_chunks = (values.size() + chunk_floats - 1) / chunk_floats;
  const uint64_t sequence =
      next_sequence_.fetch_add(std::max<uint64_t>(1, num_chunks), std::memory_order_relaxed);
  for (const std::vector<uint32_t>& chunks :
       DenseRequests(values.size(), chunk_floats, max_message_bytes_)) {
    rpc::PushDenseRequest request;
    FillHeader(request.mutable_header(), clock_.load(std::memory_order_relaxed));
    request.mutable_header()->set_sequence(sequence);
    client_internal::SetPushDenseBody(name, values, chunk_floats, chunks,
                                      update == DenseUpdate::kAssign
                                          ? rpc::PushDenseRequest::ASSIGN
                                          : rpc::PushDenseRequest::GRADIENT,
                                      &request);
    PS_RETURN_IF_ERROR(store_->PushDense(request));
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace ps

#include "client/internal/sparse_call.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "client/internal/sparse_wire.h"
#include "common/finite.h"
#include "common/grpc_status.h"
#include "proto/ps.pb.h"

namespace ps {
namespace client_internal {
namespace {

// How many rows ahead the gather of gradients and the scatter of pulled rows prefetch: their
// rows are at random places of the caller's buffers, and the copies are bound by how many cache
// misses are in flight.
constexpr uint32_t kPrefetchRows = 16;

// Prefetches the cache lines of a row of `bytes` bytes at `row` (for writing if `write`).
template <bool write>
inline void PrefetchRow(const void* row, size_t bytes) {
  const char* p = static_cast<const char*>(row);
  __builtin_prefetch(p, write ? 1 : 0);
  __builtin_prefetch(p + bytes - 1, write ? 1 : 0);
}

// By shard of `num_shards`: where its distinct keys start in the plan's `unique` (the lowest
// begin of its segments in `parts`); max() for a shard without keys.
std::vector<uint32_t> FirstOfShards(const std::vector<Part>& parts, size_t num_shards) {
  std::vector<uint32_t> first(num_shards, std::numeric_limits<uint32_t>::max());
  for (const Part& part : parts) {
    for (const Segment& seg : part.segments) first[seg.shard] = std::min(first[seg.shard], seg.begin);
  }
  return first;
}

}  // namespace

bool IsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kFailedPrecondition:  // a stale map: retried after refreshing it
    case absl::StatusCode::kDeadlineExceeded:
      return true;
    default:
      return false;
  }
}

void SparseCall::Request::OnDone(const grpc::Status& status) { call->host->OnAnswer(this, status); }

void SparseCall::Request::WritePayload(char* keys_out, char* grads_out) const {
  const SparseCall& c = *call;
  const uint32_t dim = c.table->dim;
  const size_t row_bytes = size_t{dim} * sizeof(float);
  for (const Segment& seg : part.segments) {
    std::memcpy(keys_out, c.plan_.unique.data() + seg.begin, seg.count * sizeof(uint64_t));
    keys_out += seg.count * sizeof(uint64_t);
  }
  if (c.kind != Kind::kPush) return;
  char* g = grads_out;
  for (const Segment& seg : part.segments) {
    if (c.grad_sums_.empty()) {
      const uint32_t end = seg.begin + seg.count;
      for (uint32_t j = seg.begin; j < end; ++j) {
        if (j + kPrefetchRows < end) {
          PrefetchRow<false>(c.grads.data() + size_t{c.plan_.order[j + kPrefetchRows]} * dim,
                             row_bytes);
        }
        std::memcpy(g, c.grads.data() + size_t{c.plan_.order[j]} * dim, row_bytes);
        g += row_bytes;
      }
    } else {
      const size_t bytes = size_t{seg.count} * row_bytes;
      std::memcpy(g, c.grad_sums_.data() + size_t{seg.begin} * dim, bytes);
      g += bytes;
    }
  }
}

absl::Status SparseCall::Plan(absl::Span<const uint32_t> owners, uint32_t max_keys_per_request,
                              PlanCache* cache) {
  const uint32_t dim = table->dim;
  const bool push = kind == Kind::kPush;
  max_keys_per_request_ = max_keys_per_request;
  std::optional<KeyPlan> found;
  if (cache != nullptr) found = cache->Find(keys, table->name_hash, owners, max_keys_per_request);
  if (found.has_value()) {
    plan_ = *std::move(found);
    FiniteCheck finite;
    if (push) finite.Add(grads.data(), grads.size());
    plan_.rows_finite = finite.ok();
  } else {
    plan_ = PlanKeys(keys, table->name_hash, owners, max_keys_per_request,
                     push ? grads : absl::Span<const float>(), push ? dim : 0);
    if (cache != nullptr)
      cache->Remember(keys, table->name_hash, owners, max_keys_per_request, plan_);
  }
  if (!plan_.rows_finite) {
    // Before any request is sent: nothing is applied anywhere.
    return absl::InvalidArgumentError(absl::StrFormat(
        "push to table \"%s\" has a NaN or Inf gradient; nothing was applied", table->name));
  }
  if (push && plan_.unique.size() < keys.size()) {
    // Repeated keys: sum their gradients first. Without repeats, unique[j] is
    // keys[plan.order[j]] and WritePayload gathers the caller's gradients directly.
    std::vector<float> sums(plan_.unique.size() * dim, 0.0f);
    const float* g = grads.data();
    for (size_t p = 0; p < keys.size(); ++p) {
      float* dst = sums.data() + size_t{plan_.unique_of[p]} * dim;
      const float* src = g + size_t{plan_.order[p]} * dim;
      for (uint32_t j = 0; j < dim; ++j) dst[j] += src[j];
    }
    grad_sums_ = std::move(sums);
  }
  return absl::OkStatus();
}

std::vector<std::unique_ptr<SparseCall::Request>> SparseCall::TakeRequests() {
  std::vector<std::unique_ptr<Request>> requests;
  requests.reserve(plan_.parts.size());
  for (Part& part : plan_.parts) {
    auto request = std::make_unique<Request>();
    request->part = std::move(part);
    requests.push_back(std::move(request));
  }
  plan_.parts.clear();
  return requests;
}

absl::StatusOr<std::vector<std::unique_ptr<SparseCall::Request>>> SparseCall::RequestsOf(
    const PushTicket& ticket, absl::Span<const uint32_t> shard_to_server) {
  // Each shard's distinct keys: where they start in plan_.unique, and how many.
  const size_t num_shards = plan_.shard_begin.size();
  const std::vector<uint32_t> first = FirstOfShards(plan_.parts, num_shards);
  std::vector<uint64_t> count(num_shards, 0);
  for (const Part& part : plan_.parts) {
    for (const Segment& seg : part.segments) count[seg.shard] += seg.count;
  }
  plan_.parts.clear();
  const absl::Status other_keys = absl::InvalidArgumentError(absl::StrFormat(
      "the keys of this push to table \"%s\" are not those of the push its ticket names "
      "(sequences %d to %d); nothing was sent",
      table->name, ticket.first_sequence(), ticket.last_sequence()));
  std::vector<uint64_t> covered(num_shards, 0);
  std::vector<std::unique_ptr<Request>> numbered;
  for (const PushTicket::Run& run : ticket.runs) {
    if (run.shard >= num_shards || uint64_t{run.offset} + run.count > count[run.shard] ||
        run.count == 0) {
      return other_keys;
    }
    if (numbered.empty() || numbered.back()->sequence != run.sequence) {
      numbered.push_back(std::make_unique<Request>());
      numbered.back()->sequence = run.sequence;
    }
    Part& part = numbered.back()->part;
    part.segments.push_back(Segment{run.shard, first[run.shard] + run.offset, run.count});
    part.num_keys += run.count;
    covered[run.shard] += run.count;
  }
  if (covered != count) return other_keys;
  return Reroute(&numbered, shard_to_server);
}

PushTicket SparseCall::Ticket(uint32_t worker_id) const {
  if (retry_of != nullptr) return *retry_of;
  PushTicket ticket;
  ticket.worker_id = worker_id;
  ticket.table = table->name;
  ticket.clock = clock;
  ticket.fingerprint = PushTicket::Fingerprint(keys, grads);
  // The call's plan again (its own parts went into its requests): the same keys, map and limit
  // give the same parts, numbered in order.
  const KeyPlan plan =
      PlanKeys(keys, table->name_hash, routing->shard_to_server, max_keys_per_request_);
  const std::vector<uint32_t> first = FirstOfShards(plan.parts, plan.shard_begin.size());
  uint64_t sequence = first_sequence;
  for (const Part& part : plan.parts) {
    for (const Segment& seg : part.segments) {
      ticket.runs.push_back(
          PushTicket::Run{sequence, seg.shard, seg.begin - first[seg.shard], seg.count});
    }
    ++sequence;
  }
  return ticket;
}

void SparseCall::Describe(Request* request, uint64_t map_version, uint32_t worker_id) const {
  // The small fields through protobuf; keys and gradients written in place after them.
  rpc::PushRequest& fields = request->fields;
  rpc::RequestHeader* header = fields.mutable_header();
  header->set_map_version(map_version);
  header->set_worker_id(worker_id);
  header->set_sequence(request->sequence);
  header->set_clock(clock);
  fields.set_table(table->name);
  for (const Segment& seg : request->part.segments) {
    rpc::ShardRun* run = fields.add_runs();
    run->set_shard(seg.shard);
    run->set_count(seg.count);
  }
  const size_t num_keys = request->part.num_keys;
  const size_t row_bytes = size_t{table->dim} * sizeof(float);
  request->push = kind == Kind::kPush;
  request->num_keys = request->part.num_keys;
  request->key_bytes = num_keys * sizeof(uint64_t);
  request->grad_bytes = request->push ? num_keys * row_bytes : 0;
  request->answer_bytes = num_keys * row_bytes;
}

absl::Status SparseCall::TakeAnswer(Request* request) {
  const uint32_t dim = table->dim;
  if (kind == Kind::kPush) {
    rpc::PushResponse response;
    return FromGrpcStatus(grpc::SerializationTraits<rpc::PushResponse>::Deserialize(
        &request->response_bytes, &response));
  }
  PullResponseReader reader;
  absl::Status status = reader.Parse(request->response_bytes);
  if (status.ok() && reader.values_in_slot()) {
    if (request->slot < 0) {
      return absl::InternalError(absl::StrFormat(
          "server %s answered rows in a shared slot to a request that named none",
          PeerOf(*request)));
    }
    reader.ReadFromSlot(request->region->slot(static_cast<uint32_t>(request->slot)),
                        size_t{request->part.num_keys} * dim * sizeof(float));
  }
  if (status.ok() &&
      reader.values_size() != size_t{request->part.num_keys} * dim * sizeof(float)) {
    return absl::InternalError(
        absl::StrFormat("server %s answered %d bytes for %d keys of dim %d", PeerOf(*request),
                        reader.values_size(), request->part.num_keys, dim));
  }
  if (!status.ok()) return status;
  // Scatter this response's rows, straight from gRPC's slices, to every position of their keys,
  // here on the thread that received it, while other responses are still on their way.
  float* out = values.data();
  const size_t row_bytes = size_t{dim} * sizeof(float);
  size_t rows = 0;  // byte offset in the values of the segment's first row
  for (const Segment& seg : request->part.segments) {
    const uint32_t end = seg.begin + seg.count;
    const uint32_t shard_end = plan_.shard_end[seg.shard];
    for (uint32_t p = plan_.shard_begin[seg.shard]; p < shard_end; ++p) {
      if (p + kPrefetchRows < shard_end) {
        PrefetchRow<true>(out + size_t{plan_.order[p + kPrefetchRows]} * dim, row_bytes);
      }
      const uint32_t u = plan_.unique_of[p];
      if (u < seg.begin || u >= end) continue;  // in another part of a split shard
      reader.Copy(rows + size_t{u - seg.begin} * row_bytes, row_bytes,
                  out + size_t{plan_.order[p]} * dim);
    }
    rows += size_t{seg.count} * row_bytes;
  }
  return absl::OkStatus();
}

void SparseCall::Sent(int n) {
  absl::MutexLock lock(&mu_);
  outstanding_ += n;
}

bool SparseCall::Record(std::unique_ptr<Request> request, const absl::Status& status) {
  const bool retry = !status.ok() && IsRetryable(status);
  if (retry) {
    request->call.reset();
    request->link.reset();
  } else {
    // Done with (rows scattered, push applied, or failed for good): freed before the call can
    // finish, for once it has, the caller may destroy the client, and with it the channels the
    // request's ClientContext refers to.
    request.reset();
  }
  absl::MutexLock lock(&mu_);
  if (retry) {
    last_retryable_ = status;
    to_retry_.push_back(std::move(request));
  } else if (!status.ok() && error_.ok()) {
    error_ = status;
  }
  return --outstanding_ == 0;
}

SparseCall::Next SparseCall::EndRound(absl::Time now) {
  Next next;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    next.retry = std::move(to_retry_);
    to_retry_.clear();
    error = error_;
    next.last_retryable = last_retryable_;
  }
  if (!error.ok()) {
    next.retry.clear();
    next.status = error;
    return next;
  }
  if (next.retry.empty()) return next;
  if (now + backoff_ > deadline) {
    next.retry.clear();
    next.status = next.last_retryable;
    return next;
  }
  next.when = now + backoff_;
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
  return next;
}

std::vector<std::unique_ptr<SparseCall::Request>> SparseCall::Reroute(
    std::vector<std::unique_ptr<Request>>* retry, absl::Span<const uint32_t> shard_to_server) {
  std::vector<std::unique_ptr<Request>> resend;
  for (auto& old : *retry) {
    for (Part& part : client_internal::Reroute(old->part, shard_to_server)) {
      auto request = std::make_unique<Request>();
      request->part = std::move(part);
      request->sequence = old->sequence;
      resend.push_back(std::move(request));
    }
  }
  retry->clear();
  return resend;
}

}  // namespace client_internal
}  // namespace ps

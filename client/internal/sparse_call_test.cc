#include "client/internal/sparse_call.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "common/hash.h"
#include "proto/ps.pb.h"

namespace ps {
namespace client_internal {
namespace {

std::unique_ptr<SparseCall::Request> RequestWith(uint64_t sequence) {
  auto request = std::make_unique<SparseCall::Request>();
  request->sequence = sequence;
  return request;
}

TEST_CASE("what is retried", "[client][sparse_call]") {
  CHECK(IsRetryable(absl::UnavailableError("")));
  CHECK(IsRetryable(absl::DeadlineExceededError("")));
  CHECK(IsRetryable(absl::FailedPreconditionError("stale map")));
  CHECK_FALSE(IsRetryable(absl::InvalidArgumentError("")));
  CHECK_FALSE(IsRetryable(absl::NotFoundError("")));
  CHECK_FALSE(IsRetryable(absl::DataLossError("")));
  CHECK_FALSE(IsRetryable(absl::OkStatus()));
}

TEST_CASE("a round whose requests all succeed finishes the call OK", "[client][sparse_call]") {
  SparseCall call;
  call.Sent(2);
  CHECK_FALSE(call.Record(RequestWith(1), absl::OkStatus()));
  CHECK(call.Record(RequestWith(2), absl::OkStatus()));
  SparseCall::Next next = call.EndRound(absl::Now());
  CHECK(next.status.ok());
  CHECK(next.retry.empty());
}

TEST_CASE("retryable failures are resent with their sequences after a doubling backoff",
          "[client][sparse_call]") {
  SparseCall call;
  const absl::Time now = absl::FromUnixSeconds(1000);
  call.deadline = now + absl::Seconds(60);
  call.Sent(3);
  CHECK_FALSE(call.Record(RequestWith(7), absl::UnavailableError("server 1 is down")));
  CHECK_FALSE(call.Record(RequestWith(8), absl::OkStatus()));
  CHECK(call.Record(RequestWith(9), absl::FailedPreconditionError("stale map")));
  SparseCall::Next next = call.EndRound(now);
  CHECK(next.status.ok());
  REQUIRE(next.retry.size() == 2);
  CHECK(next.retry[0]->sequence == 7);
  CHECK(next.retry[1]->sequence == 9);
  CHECK(next.when == now + SparseCall::kFirstBackoff);
  CHECK(next.last_retryable.code() == absl::StatusCode::kFailedPrecondition);

  // The next round: the backoff has doubled; it stops doubling at kMaxBackoff.
  call.Sent(1);
  CHECK(call.Record(std::move(next.retry[0]), absl::DeadlineExceededError("slow")));
  next = call.EndRound(now);
  REQUIRE(next.retry.size() == 1);
  CHECK(next.when == now + 2 * SparseCall::kFirstBackoff);
  CHECK(next.last_retryable.code() == absl::StatusCode::kDeadlineExceeded);
  for (int round = 0; round < 20; ++round) {
    call.Sent(1);
    CHECK(call.Record(std::move(next.retry[0]), absl::UnavailableError("down")));
    next = call.EndRound(now);
    REQUIRE(next.retry.size() == 1);
  }
  CHECK(next.when == now + SparseCall::kMaxBackoff);
}

TEST_CASE("the first error that is not retryable ends the call, and nothing is resent",
          "[client][sparse_call]") {
  SparseCall call;
  call.Sent(3);
  call.Record(RequestWith(1), absl::UnavailableError("down"));
  call.Record(RequestWith(2), absl::InvalidArgumentError("NaN"));
  CHECK(call.Record(RequestWith(3), absl::NotFoundError("no table")));
  SparseCall::Next next = call.EndRound(absl::Now());
  CHECK(next.status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(next.retry.empty());
}

TEST_CASE("retries that would start after the deadline end the call with the last retryable "
          "error",
          "[client][sparse_call]") {
  SparseCall call;
  const absl::Time now = absl::FromUnixSeconds(1000);
  call.deadline = now + SparseCall::kFirstBackoff / 2;
  call.Sent(1);
  CHECK(call.Record(RequestWith(4), absl::UnavailableError("still down")));
  SparseCall::Next next = call.EndRound(now);
  CHECK(next.status.code() == absl::StatusCode::kUnavailable);
  CHECK(next.status.message() == "still down");
  CHECK(next.retry.empty());
}

TEST_CASE("a request rerouted over a newer map keeps its sequence in every part",
          "[client][sparse_call]") {
  std::vector<std::unique_ptr<SparseCall::Request>> retry;
  retry.push_back(RequestWith(11));
  retry[0]->part.server = 0;
  retry[0]->part.segments = {Segment{0, 0, 3}, Segment{1, 3, 2}, Segment{2, 5, 1}};
  retry[0]->part.num_keys = 6;
  // Shards 0 and 2 moved to server 1, shard 1 to server 2.
  const std::vector<uint32_t> shard_to_server = {1, 2, 1};
  std::vector<std::unique_ptr<SparseCall::Request>> resend =
      SparseCall::Reroute(&retry, shard_to_server);
  CHECK(retry.empty());
  REQUIRE(resend.size() == 2);
  std::map<uint32_t, uint32_t> keys_by_server;
  for (const auto& r : resend) {
    CHECK(r->sequence == 11);
    keys_by_server[r->part.server] += r->part.num_keys;
  }
  CHECK(keys_by_server == std::map<uint32_t, uint32_t>{{1, 4}, {2, 2}});
}

TEST_CASE("a push's payload carries every unique key once with its summed gradients",
          "[client][sparse_call]") {
  TableInfo table{"user", 2, NameHash("user")};
  std::mt19937_64 random(42);
  std::vector<uint64_t> keys(50);
  for (uint64_t& key : keys) key = random() % 20;  // repeats
  std::vector<float> grads(keys.size() * 2);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 7) - 3.0f;
  std::map<uint64_t, std::vector<float>> expected;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<float>& sum = expected[keys[i]];
    sum.resize(2, 0.0f);
    sum[0] += grads[2 * i];
    sum[1] += grads[2 * i + 1];
  }
  auto call = std::make_shared<SparseCall>();
  call->kind = SparseCall::Kind::kPush;
  call->table = &table;
  call->clock = 5;
  call->keys = keys;
  call->grads = grads;
  const std::vector<uint32_t> owners = {0, 1, 0, 1, 2, 2, 0, 1};
  REQUIRE(call->Plan(owners, /*max_keys_per_request=*/4).ok());
  std::vector<std::unique_ptr<SparseCall::Request>> requests = call->TakeRequests();
  REQUIRE(requests.size() >= 3);
  std::map<uint64_t, std::vector<float>> sent;
  for (auto& request : requests) {
    request->sequence = 3;
    request->call = call;
    call->Describe(request.get(), /*map_version=*/9, /*worker_id=*/4);
    CHECK(request->push);
    CHECK(request->num_keys <= 4);
    CHECK(request->fields.header().map_version() == 9);
    CHECK(request->fields.header().worker_id() == 4);
    CHECK(request->fields.header().sequence() == 3);
    CHECK(request->fields.header().clock() == 5);
    CHECK(request->fields.table() == "user");
    uint32_t run_keys = 0;
    for (const rpc::ShardRun& run : request->fields.runs()) {
      CHECK(owners[run.shard()] == request->part.server);
      run_keys += run.count();
    }
    CHECK(run_keys == request->num_keys);
    REQUIRE(request->key_bytes == request->num_keys * sizeof(uint64_t));
    REQUIRE(request->grad_bytes == request->num_keys * 2 * sizeof(float));
    std::vector<uint64_t> k(request->num_keys);
    std::vector<float> g(request->num_keys * 2);
    request->WritePayload(reinterpret_cast<char*>(k.data()), reinterpret_cast<char*>(g.data()));
    for (size_t i = 0; i < k.size(); ++i) {
      CHECK(sent.count(k[i]) == 0);
      CHECK(owners[ShardOf(table.name_hash, k[i], 8)] == request->part.server);
      sent[k[i]] = {g[2 * i], g[2 * i + 1]};
    }
  }
  CHECK(sent == expected);
}

TEST_CASE("a push with a NaN or Inf gradient plans nothing", "[client][sparse_call]") {
  TableInfo table{"user", 1, NameHash("user")};
  const std::vector<uint64_t> keys = {1, 2};
  const float bad = GENERATE(std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity());
  const std::vector<float> grads = {0.5f, bad};
  SparseCall call;
  call.kind = SparseCall::Kind::kPush;
  call.table = &table;
  call.keys = keys;
  call.grads = grads;
  const absl::Status planned = call.Plan(std::vector<uint32_t>{0, 0}, 16);
  CHECK(planned.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(planned.message(), "\"user\""));
}

grpc::ByteBuffer BufferOf(const google::protobuf::MessageLite& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST_CASE("a pull's answer fills every position of its keys, and a wrong one is refused",
          "[client][sparse_call]") {
  TableInfo table{"item", 3, NameHash("item")};
  const std::vector<uint64_t> keys = {8, 3, 8, 6, 3};
  std::vector<float> values(keys.size() * 3, -1.0f);
  auto call = std::make_shared<SparseCall>();
  call->kind = SparseCall::Kind::kPull;
  call->table = &table;
  call->keys = keys;
  call->values = absl::MakeSpan(values);
  REQUIRE(call->Plan(std::vector<uint32_t>{0, 0, 0, 0}, 100).ok());
  std::vector<std::unique_ptr<SparseCall::Request>> requests = call->TakeRequests();
  REQUIRE(requests.size() == 1);
  SparseCall::Request* request = requests[0].get();
  request->call = call;
  call->Describe(request, 1, 1);
  CHECK_FALSE(request->push);
  CHECK(request->answer_bytes == 3 * 3 * sizeof(float));
  std::vector<uint64_t> sent(request->num_keys);
  request->WritePayload(reinterpret_cast<char*>(sent.data()), nullptr);
  REQUIRE(sent.size() == 3);
  // Row of key k: k, k + 0.5, k + 0.25.
  rpc::PullResponse response;
  response.set_dim(3);
  std::string rows;
  for (uint64_t key : sent) {
    const float row[3] = {static_cast<float>(key), key + 0.5f, key + 0.25f};
    rows.append(reinterpret_cast<const char*>(row), sizeof(row));
  }
  SECTION("the rows of the answer") {
    response.set_values(rows);
    request->response_bytes = BufferOf(response);
    REQUIRE(call->TakeAnswer(request).ok());
    for (size_t p = 0; p < keys.size(); ++p) {
      CHECK(values[3 * p] == static_cast<float>(keys[p]));
      CHECK(values[3 * p + 1] == keys[p] + 0.5f);
      CHECK(values[3 * p + 2] == keys[p] + 0.25f);
    }
  }
  SECTION("too few rows") {
    response.set_values(rows.substr(4));
    request->response_bytes = BufferOf(response);
    CHECK(call->TakeAnswer(request).code() == absl::StatusCode::kInternal);
  }
  SECTION("rows in a slot the request did not name") {
    response.set_values_in_slot(true);
    request->response_bytes = BufferOf(response);
    CHECK(call->TakeAnswer(request).code() == absl::StatusCode::kInternal);
  }
}


// The keys each sequence carried: sequence -> sorted keys.
std::map<uint64_t, std::vector<uint64_t>> KeysBySequence(
    const SparseCall& call, const std::vector<std::unique_ptr<SparseCall::Request>>& requests) {
  std::map<uint64_t, std::vector<uint64_t>> by_sequence;
  for (const auto& request : requests) {
    std::vector<uint64_t>& keys = by_sequence[request->sequence];
    for (const Segment& seg : request->part.segments) {
      keys.insert(keys.end(), call.plan().unique.begin() + seg.begin,
                  call.plan().unique.begin() + seg.begin + seg.count);
    }
  }
  for (auto& [sequence, keys] : by_sequence) std::sort(keys.begin(), keys.end());
  return by_sequence;
}

TEST_CASE("a push made again from its ticket sends each key with its sequence, over a newer map",
          "[client][sparse_call][push_ticket]") {
  TableInfo table{"user", 2, NameHash("user")};
  std::mt19937_64 random(7);
  std::vector<uint64_t> keys(300);
  for (uint64_t& key : keys) key = random() % 200;  // repeats
  const std::vector<float> grads(keys.size() * 2, 0.25f);
  auto routing = std::make_shared<Routing>();
  routing->shard_to_server = {0, 1, 0, 1, 0, 1, 0, 1};
  auto push = [&](std::shared_ptr<const PushTicket> retry_of) {
    auto call = std::make_shared<SparseCall>();
    call->kind = SparseCall::Kind::kPush;
    call->table = &table;
    call->clock = 17;
    call->keys = keys;
    call->grads = grads;
    call->retry_of = std::move(retry_of);
    return call;
  };
  // The push: its requests numbered from 40.
  auto call = push(nullptr);
  REQUIRE(call->Plan(routing->shard_to_server, 16).ok());
  std::vector<std::unique_ptr<SparseCall::Request>> requests = call->TakeRequests();
  REQUIRE(requests.size() > 4);
  call->routing = routing;
  call->first_sequence = 40;
  for (size_t i = 0; i < requests.size(); ++i) requests[i]->sequence = 40 + i;
  const PushTicket ticket = call->Ticket(/*worker_id=*/3);
  CHECK(ticket.worker_id == 3);
  CHECK(ticket.table == "user");
  CHECK(ticket.clock == 17);
  CHECK(ticket.fingerprint == PushTicket::Fingerprint(keys, grads));
  CHECK(ticket.first_sequence() == 40);
  CHECK(ticket.last_sequence() == 40 + requests.size() - 1);
  const auto sent = KeysBySequence(*call, requests);

  // Made again over a map where every shard moved, with a larger request limit.
  const std::vector<uint32_t> newer = {2, 2, 3, 3, 4, 4, 5, 5};
  auto again = push(std::make_shared<const PushTicket>(ticket));
  REQUIRE(again->Plan(newer, 1000).ok());
  absl::StatusOr<std::vector<std::unique_ptr<SparseCall::Request>>> resent =
      again->RequestsOf(ticket, newer);
  REQUIRE(resent.ok());
  for (const auto& request : *resent) {
    for (const Segment& seg : request->part.segments) {
      CHECK(newer[seg.shard] == request->part.server);
    }
  }
  CHECK(KeysBySequence(*again, *resent) == sent);
  CHECK(again->Ticket(99) == ticket);  // a push made again names the same ticket

  SECTION("other keys are refused") {
    std::vector<uint64_t> other = keys;
    other.push_back(100000);
    auto different = push(nullptr);
    different->keys = other;
    const std::vector<float> more(other.size() * 2, 0.25f);
    different->grads = more;
    REQUIRE(different->Plan(newer, 1000).ok());
    CHECK(different->RequestsOf(ticket, newer).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace client_internal
}  // namespace ps

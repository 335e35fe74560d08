#include "client/internal/dense_calls.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "client/internal/dense_chunks.h"
#include "client/internal/sparse_call.h"
#include "common/finite.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "proto/ps.grpc.pb.h"

namespace ps {
namespace client_internal {

std::vector<DenseRoute> RouteDense(uint64_t name_hash, uint64_t total_floats,
                                   uint64_t chunk_floats, uint64_t max_message_bytes,
                                   absl::Span<const uint32_t> shard_to_server) {
  const uint64_t num_chunks = (total_floats + chunk_floats - 1) / chunk_floats;
  const uint64_t per_request =
      std::max<uint64_t>(1, (max_message_bytes / 2) / (chunk_floats * sizeof(float)));
  std::vector<DenseRoute> routes;
  absl::flat_hash_map<uint32_t, size_t> open;  // server -> index of its unfilled route
  for (uint64_t c = 0; c < num_chunks; ++c) {
    const uint32_t shard = ShardOf(name_hash, c, static_cast<uint32_t>(shard_to_server.size()));
    const uint32_t server = shard_to_server[shard];
    auto it = open.find(server);
    if (it == open.end() || routes[it->second].chunks.size() >= per_request) {
      routes.push_back(DenseRoute{server, {}});
      open[server] = routes.size() - 1;
      it = open.find(server);
    }
    routes[it->second].chunks.push_back(static_cast<uint32_t>(c));
  }
  return routes;
}

absl::Status DenseCalls::Retry(const std::function<absl::Status(const Routing&)>& attempt) {
  const absl::Time deadline = absl::Now() + options_.retry_timeout;
  absl::Duration backoff = absl::Milliseconds(5);
  while (true) {
    const std::shared_ptr<const Routing> routing = host_->CurrentRouting();
    absl::Status status = attempt(*routing);
    if (status.ok() || !IsRetryable(status)) return status;
    if (absl::Now() + backoff > deadline) return status;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
    const bool changed = host_->RefreshMap(routing->version);
    if (!changed && status.code() == absl::StatusCode::kFailedPrecondition) return status;
  }
}

void DenseCalls::FillHeader(const Routing& routing, rpc::RequestHeader* header) const {
  header->set_map_version(routing.version);
  header->set_worker_id(options_.worker_id);
  header->set_clock(clock_->load(std::memory_order_relaxed));
}

absl::Status DenseCalls::Reported(uint32_t server, absl::Status status) const {
  if (absl::IsUnavailable(status)) host_->ReportUnavailable(server, status);
  return status;
}

absl::StatusOr<int64_t> DenseCalls::EndStep(int64_t step) {
  if (!options_.sync) return int64_t{-1};
  int64_t applied = -1;
  PS_RETURN_IF_ERROR(Retry([&](const Routing& routing) -> absl::Status {
    for (const auto& [server_id, link] : routing.servers) {
      // A dead server's shards have moved to the others, which count the steps it would have.
      const auto& servers = routing.map.servers();
      // A copy: C++17 lambdas cannot capture a structured binding (clang refuses it).
      const auto id = server_id;
      const bool dead = std::any_of(servers.begin(), servers.end(), [&](const rpc::ServerInfo& s) {
        return s.server_id() == id && !s.alive();
      });
      if (dead) continue;
      rpc::EndStepRequest request;
      FillHeader(routing, request.mutable_header());
      request.mutable_header()->set_clock(step);
      rpc::EndStepResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + options_.request_timeout));
      PS_RETURN_IF_ERROR(Reported(
          server_id,
          FromGrpcStatus(link->channel()->Stub()->EndStep(&context, request, &response))));
      applied = std::max(applied, response.applied_step());
    }
    return absl::OkStatus();
  }));
  return applied;
}

absl::Status DenseCalls::Pull(absl::string_view name, absl::Span<float> values) {
  const uint64_t name_hash = NameHash(name);
  return Retry([&](const Routing& routing) -> absl::Status {
    for (const DenseRoute& route : RouteDense(name_hash, values.size(), options_.chunk_floats,
                                              options_.max_message_bytes,
                                              routing.shard_to_server)) {
      rpc::PullDenseRequest request;
      FillHeader(routing, request.mutable_header());
      request.set_name(std::string(name));
      for (uint32_t c : route.chunks) request.add_chunks(c);
      rpc::PullDenseResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + options_.request_timeout));
      PS_RETURN_IF_ERROR(Reported(
          route.server, FromGrpcStatus(routing.servers.at(route.server)->channel()->Stub()->PullDense(
                            &context, request, &response))));
      PS_RETURN_IF_ERROR(CopyDenseChunks(name, response, options_.chunk_floats, values));
    }
    return absl::OkStatus();
  });
}

absl::Status DenseCalls::Push(absl::string_view name, absl::Span<const float> values,
                              rpc::PushDenseRequest::Kind kind) {
  if (name.empty()) return absl::InvalidArgumentError("dense tensor without a name");
  if (!AllFinite(values.data(), values.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense tensor \"%s\" has a NaN or Inf value; nothing was applied", name));
  }
  const uint64_t chunk_floats = options_.chunk_floats;
  // Each server's chunks go in one request (or a few); a retry resends all of them. Assign is
  // idempotent; a gradient retried after a lost acknowledgement must not apply twice, so chunk c
  // carries the sequence `sequence + c`, which its shard admits once (like sparse pushes).
  const uint64_t num_chunks = (values.size() + chunk_floats - 1) / chunk_floats;
  const uint64_t sequence =
      next_sequence_->fetch_add(std::max<uint64_t>(1, num_chunks), std::memory_order_relaxed);
  const uint64_t name_hash = NameHash(name);
  return Retry([&](const Routing& routing) -> absl::Status {
    for (const DenseRoute& route : RouteDense(name_hash, values.size(), chunk_floats,
                                              options_.max_message_bytes,
                                              routing.shard_to_server)) {
      rpc::PushDenseRequest request;
      FillHeader(routing, request.mutable_header());
      request.mutable_header()->set_sequence(sequence);
      SetPushDenseBody(name, values, chunk_floats, route.chunks, kind, &request);
      rpc::PushDenseResponse response;
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + options_.request_timeout));
      PS_RETURN_IF_ERROR(Reported(
          route.server, FromGrpcStatus(routing.servers.at(route.server)->channel()->Stub()->PushDense(
                            &context, request, &response))));
    }
    return absl::OkStatus();
  });
}

}  // namespace client_internal
}  // namespace ps

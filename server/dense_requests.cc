#include "server/dense_requests.h"

#include <cstring>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "common/finite.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace ps {
namespace server {
namespace {

// The floats of a dense chunk's bytes (whole floats: the caller checked). An empty chunk gives an
// empty vector, whose data() may be null: memcpy must not see it, even for 0 bytes.
std::vector<float> ChunkFloats(const std::string& bytes) {
  std::vector<float> floats(bytes.size() / sizeof(float));
  if (!floats.empty()) std::memcpy(floats.data(), bytes.data(), floats.size() * sizeof(float));
  return floats;
}

}  // namespace

absl::Status PullDenseChunks(const rpc::PullDenseRequest& request, uint32_t num_shards,
                             uint64_t max_message_bytes, ServedShard served,
                             rpc::PullDenseResponse* response) {
  const uint64_t name_hash = NameHash(request.name());
  for (const uint32_t chunk : request.chunks()) {
    PS_RETURN_IF_ERROR(served(ShardOf(name_hash, chunk, num_shards)).status());
  }
  uint64_t bytes = 0;
  for (const uint32_t chunk : request.chunks()) {
    PS_ASSIGN_OR_RETURN(Shard* const shard, served(ShardOf(name_hash, chunk, num_shards)));
    std::vector<float> values;
    uint64_t total = 0;
    PS_RETURN_IF_ERROR(shard->ReadDense(request.name(), chunk, &values, &total));
    bytes += values.size() * sizeof(float);
    if (bytes > max_message_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "dense chunks requested exceed the message limit of %d bytes", max_message_bytes));
    }
    rpc::DenseChunk* out = response->add_chunks();
    out->set_chunk(chunk);
    out->set_values(values.data(), values.size() * sizeof(float));
    response->set_total_floats(total);
  }
  return absl::OkStatus();
}

absl::Status PushDenseChunks(const rpc::PushDenseRequest& request, uint32_t num_shards,
                             ServedShard served,
                             std::vector<std::pair<uint32_t, uint64_t>>* replicated_at) {
  if (request.name().empty()) return absl::InvalidArgumentError("dense tensor without a name");
  const bool gradient = request.kind() == rpc::PushDenseRequest::GRADIENT;
  const uint64_t sequence = request.header().sequence();
  if (gradient && sequence == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "gradient push to dense tensor \"%s\" without a sequence number (header.sequence >= 1; "
        "chunk c is admitted once as sequence + c)",
        request.name()));
  }
  const uint64_t name_hash = NameHash(request.name());
  // Every chunk is checked before any is written: a malformed request changes nothing.
  absl::flat_hash_set<uint32_t> chunks;
  for (const rpc::DenseChunk& chunk : request.chunks()) {
    PS_ASSIGN_OR_RETURN(Shard* const shard, served(ShardOf(name_hash, chunk.chunk(), num_shards)));
    if (!chunks.insert(chunk.chunk()).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chunk %d of \"%s\" is in the request twice", chunk.chunk(), request.name()));
    }
    if (gradient && sequence > UINT64_MAX - chunk.chunk()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sequence %d + chunk %d of \"%s\" is above 2^64 - 1", sequence,
                          chunk.chunk(), request.name()));
    }
    if (chunk.values().size() % sizeof(float) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chunk %d of \"%s\" is %d bytes, not whole floats", chunk.chunk(),
                          request.name(), chunk.values().size()));
    }
    const std::vector<float> check = ChunkFloats(chunk.values());
    if (!AllFinite(check.data(), check.size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chunk %d of \"%s\" has a NaN or Inf value; nothing was applied",
                          chunk.chunk(), request.name()));
    }
    PS_RETURN_IF_ERROR(shard->CheckDenseWrite(request.name(), chunk.chunk(), check.size(),
                                              request.total_floats()));
  }
  for (const rpc::DenseChunk& chunk : request.chunks()) {
    const uint32_t s = ShardOf(name_hash, chunk.chunk(), num_shards);
    PS_ASSIGN_OR_RETURN(Shard* const shard, served(s));
    const std::vector<float> values = ChunkFloats(chunk.values());
    if (replicated_at != nullptr) {
      // Taken after the write below: the chunk's record is at or before the shard's newest.
      replicated_at->emplace_back(s, 0);
    }
    if (!gradient) {
      PS_RETURN_IF_ERROR(
          shard->AssignDense(request.name(), chunk.chunk(), values, request.total_floats()));
      if (replicated_at != nullptr) replicated_at->back().second = shard->applied_sequence();
      continue;
    }
    PS_ASSIGN_OR_RETURN(
        const ApplyWindow::Verdict verdict,
        shard->ApplyDenseGradient(request.name(), chunk.chunk(), values, request.total_floats(),
                                  request.header().worker_id(), sequence + chunk.chunk()));
    if (verdict == ApplyWindow::Verdict::kTooOld) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dense push sequence %d of worker %d (chunk %d: sequence %d) is more than %d below the "
          "newest sequence its shard admitted from that worker, so the shard cannot tell whether "
          "it applied it: that chunk and those after it were not applied",
          sequence, request.header().worker_id(), chunk.chunk(), sequence + chunk.chunk(),
          ApplyWindow::kWindow));
    }
    if (replicated_at != nullptr) replicated_at->back().second = shard->applied_sequence();
  }
  return absl::OkStatus();
}

}  // namespace server
}  // namespace ps

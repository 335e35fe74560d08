// A server's side of the dense tensors' requests. A dense tensor is cut into chunks of the
// cluster's dense_chunk_floats floats; chunk c of tensor `name` lives on shard
// ShardOf(NameHash(name), c, num_shards). A pull reads chunks; a push assigns chunks or applies
// gradients to them with the dense optimizer, chunk c exactly once per (worker_id, sequence + c).
// A request is checked completely before any chunk is written.
//
// These functions hold no state: they are as thread-safe as the shards `served` gives them, which
// the caller keeps alive (ShardedStore holds its map lock around the call).
#ifndef PS_SERVER_DENSE_REQUESTS_H_
#define PS_SERVER_DENSE_REQUESTS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "server/shard/shard.h"

namespace ps {
namespace server {

// The copy of `shard` that serves a request, or the error to answer (the server's routing
// check: a shard out of range, lost, not served here).
using ServedShard = absl::FunctionRef<absl::StatusOr<Shard*>(uint32_t shard)>;

// Adds the requested chunks of a dense tensor to `response` (and its total_floats). `served`'s
// error for a chunk's shard, checked for every chunk before any is read; NOT_FOUND if the tensor
// or a chunk was never written; RESOURCE_EXHAUSTED once the chunks exceed `max_message_bytes`.
// On error `response` may hold the chunks read before.
absl::Status PullDenseChunks(const rpc::PullDenseRequest& request, uint32_t num_shards,
                             uint64_t max_message_bytes, ServedShard served,
                             rpc::PullDenseResponse* response);

// Assigns (request.kind ASSIGN) or applies gradients to (GRADIENT) the request's chunks of a
// dense tensor, which its first write creates. Every chunk is checked before any is written:
// INVALID_ARGUMENT, with nothing applied, for a tensor without a name, a gradient without a
// sequence (0), a chunk given twice, sequence + chunk above 2^64 - 1, a length that is not
// whole floats or disagrees with the chunking or total (Shard::CheckDenseWrite), or a NaN or Inf
// value; `served`'s error for a chunk's shard. INVALID_ARGUMENT if a chunk's sequence is more
// than ApplyWindow::kWindow below the newest its shard admitted from the worker (that chunk and
// the later ones of the request are not applied). `replicated_at` (if not null) receives, per
// chunk written, its shard and the shard's applied sequence after the write (see
// ShardedStore::WhenReplicated).
absl::Status PushDenseChunks(const rpc::PushDenseRequest& request, uint32_t num_shards,
                             ServedShard served,
                             std::vector<std::pair<uint32_t, uint64_t>>* replicated_at);

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_DENSE_REQUESTS_H_

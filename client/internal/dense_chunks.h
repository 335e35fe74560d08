// Dense tensors on the wire: the chunks a tensor is split into, a PushDenseRequest's body, and
// copying a PullDenseResponse into the caller's buffer. Private to the client library (and its in-process twin in tests).
#ifndef PS_CLIENT_INTERNAL_DENSE_CHUNKS_H_
#define PS_CLIENT_INTERNAL_DENSE_CHUNKS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"

namespace ps {
namespace client_internal {

// Sets everything of `request` but its header: tensor `name` of values.size() floats, the update
// `kind`, and the values of `chunks` (chunk c holds values [c * chunk_floats, (c + 1) *
// chunk_floats), the last one shorter). Every chunk must lie within `values`.
void SetPushDenseBody(absl::string_view name, absl::Span<const float> values,
                      uint64_t chunk_floats, const std::vector<uint32_t>& chunks,
                      rpc::PushDenseRequest::Kind kind, rpc::PushDenseRequest* request);

// Copies the chunks of `response` (a tensor split into chunks of `chunk_floats` floats) into
// `values`. INVALID_ARGUMENT if the tensor does not have values.size() floats; INTERNAL for a
// chunk of the wrong size or out of range.
absl::Status CopyDenseChunks(absl::string_view name, const rpc::PullDenseResponse& response,
                             uint64_t chunk_floats, absl::Span<float> values);

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_DENSE_CHUNKS_H_

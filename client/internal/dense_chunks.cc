#include "client/internal/dense_chunks.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"

namespace ps {
namespace client_internal {

void SetPushDenseBody(absl::string_view name, absl::Span<const float> values,
                      uint64_t chunk_floats, const std::vector<uint32_t>& chunks,
                      rpc::PushDenseRequest::Kind kind, rpc::PushDenseRequest* request) {
  request->set_name(std::string(name));
  request->set_total_floats(values.size());
  request->set_kind(kind);
  for (const uint32_t c : chunks) {
    const uint64_t begin = uint64_t{c} * chunk_floats;
    const uint64_t count = std::min<uint64_t>(chunk_floats, values.size() - begin);
    rpc::DenseChunk* chunk = request->add_chunks();
    chunk->set_chunk(c);
    chunk->set_values(reinterpret_cast<const char*>(values.data() + begin),
                      count * sizeof(float));
  }
}

absl::Status CopyDenseChunks(absl::string_view name, const rpc::PullDenseResponse& response,
                             uint64_t chunk_floats, absl::Span<float> values) {
  if (response.total_floats() != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense tensor \"%s\" has %d floats, the caller asked for %d", name,
                        response.total_floats(), values.size()));
  }
  for (const rpc::DenseChunk& chunk : response.chunks()) {
    const uint64_t begin = uint64_t{chunk.chunk()} * chunk_floats;
    if (begin >= values.size()) return absl::InternalError("dense chunk out of range");
    const uint64_t count = std::min<uint64_t>(chunk_floats, values.size() - begin);
    if (chunk.values().size() != count * sizeof(float)) {
      return absl::InternalError("dense chunk of unexpected size");
    }
    std::memcpy(values.data() + begin, chunk.values().data(), chunk.values().size());
  }
  return absl::OkStatus();
}

}  // namespace client_internal
}  // namespace ps

#include "server/storage/dense_store.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace ps {
namespace server {

DenseChunkStore::DenseChunkStore(uint32_t chunk_floats) : chunk_floats_(chunk_floats) {
  if (chunk_floats == 0) {
    std::fprintf(stderr, "DenseChunkStore: chunk_floats must be > 0\n");
    std::abort();
  }
}

absl::Status DenseChunkStore::CheckWrite(absl::string_view name, uint32_t chunk, size_t length,
                                         uint64_t total_floats) const {
  if (name.empty()) return absl::InvalidArgumentError("dense tensor: empty name");
  if (total_floats == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense tensor \"%s\": total_floats must be > 0", name));
  }
  const auto it = tensors_.find(name);
  if (it != tensors_.end() && it->second.total_floats != total_floats) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dense tensor \"%s\" has %d floats, the request says %d", name,
                        it->second.total_floats, total_floats));
  }
  const uint64_t begin = uint64_t{chunk} * chunk_floats_;
  if (begin >= total_floats) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dense tensor \"%s\": chunk %d is beyond its %d floats", name, chunk, total_floats));
  }
  const uint64_t expected = std::min<uint64_t>(chunk_floats_, total_floats - begin);
  if (length != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dense tensor \"%s\": chunk %d has %d floats, got %d", name, chunk, expected, length));
  }
  return absl::OkStatus();
}

DenseChunkStore::Chunk& DenseChunkStore::GetOrCreate(absl::string_view name, uint32_t chunk,
                                                     uint64_t total_floats) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    it = tensors_.emplace(std::string(name), Tensor()).first;
    it->second.total_floats = total_floats;
  }
  auto [chunk_it, created] = it->second.chunks.try_emplace(chunk);
  if (created) {
    const uint64_t begin = uint64_t{chunk} * chunk_floats_;
    chunk_it->second.values.assign(std::min<uint64_t>(chunk_floats_, total_floats - begin), 0.0f);
  }
  return chunk_it->second;
}

absl::Status DenseChunkStore::Assign(absl::string_view name, uint32_t chunk,
                                     absl::Span<const float> values, uint64_t total_floats) {
  PS_RETURN_IF_ERROR(CheckWrite(name, chunk, values.size(), total_floats));
  Chunk& c = GetOrCreate(name, chunk, total_floats);
  std::copy(values.begin(), values.end(), c.values.begin());
  return absl::OkStatus();
}

absl::Status DenseChunkStore::ApplyGradient(absl::string_view name, uint32_t chunk,
                                            absl::Span<const float> grads, uint64_t total_floats,
                                            const Optimizer& opt) {
  PS_RETURN_IF_ERROR(CheckWrite(name, chunk, grads.size(), total_floats));
  Chunk& c = GetOrCreate(name, chunk, total_floats);
  const uint32_t length = static_cast<uint32_t>(c.values.size());
  if (c.state.size() != opt.StateFloats(length)) {
    c.state.resize(opt.StateFloats(length));
    opt.InitState(length, c.state.data());
  }
  opt.Apply(length, grads.data(), c.values.data(), c.state.data());
  return absl::OkStatus();
}

absl::Status DenseChunkStore::Read(absl::string_view name, uint32_t chunk,
                                   std::vector<float>* out) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrFormat("no dense tensor \"%s\"", name));
  }
  const auto chunk_it = it->second.chunks.find(chunk);
  if (chunk_it == it->second.chunks.end()) {
    return absl::NotFoundError(absl::StrFormat("dense tensor \"%s\" has no chunk %d", name, chunk));
  }
  *out = chunk_it->second.values;
  return absl::OkStatus();
}

absl::Status DenseChunkStore::ReadWithState(absl::string_view name, uint32_t chunk,
                                            std::vector<float>* values,
                                            std::vector<float>* state) const {
  PS_RETURN_IF_ERROR(Read(name, chunk, values));
  *state = tensors_.find(name)->second.chunks.find(chunk)->second.state;
  return absl::OkStatus();
}

absl::Status DenseChunkStore::Restore(absl::string_view name, uint32_t chunk,
                                      uint64_t total_floats, absl::Span<const float> values,
                                      absl::Span<const float> state, const Optimizer& opt) {
  PS_RETURN_IF_ERROR(CheckWrite(name, chunk, values.size(), total_floats));
  if (!state.empty() && state.size() != opt.StateFloats(static_cast<uint32_t>(values.size()))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dense tensor \"%s\": chunk %d has %d floats of optimizer state, expected %d", name,
        chunk, state.size(), opt.StateFloats(static_cast<uint32_t>(values.size()))));
  }
  Chunk& c = GetOrCreate(name, chunk, total_floats);
  c.values.assign(values.begin(), values.end());
  c.state.assign(state.begin(), state.end());
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DenseChunkStore::TotalFloats(absl::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrFormat("no dense tensor \"%s\"", name));
  }
  return it->second.total_floats;
}

}  // namespace server
}  // namespace ps

// The dense tensors a shard holds (the dense part of the model), as chunks.
//
// A dense tensor of total_floats floats is cut into chunks of chunk_floats floats (the last one
// shorter); chunk c is floats [c * chunk_floats, min((c + 1) * chunk_floats, total_floats)) and is
// stored, with its optimizer state, on the shard that ps::KeyHash(NameHash(name), c) picks.
#ifndef PS_SERVER_STORAGE_DENSE_STORE_H_
#define PS_SERVER_STORAGE_DENSE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/optimizer.h"

namespace ps {
namespace server {

// A DenseChunkStore holds chunks of dense tensors by (tensor name, chunk index). Thread-compatible.
//
// A tensor is created by the first write of one of its chunks and keeps its total_floats; every
// call names the total it believes in and is refused if it disagrees.
class DenseChunkStore {
 public:
  // `chunk_floats` (> 0) is the cluster's dense_chunk_floats.
  explicit DenseChunkStore(uint32_t chunk_floats);

  DenseChunkStore(const DenseChunkStore&) = delete;
  DenseChunkStore& operator=(const DenseChunkStore&) = delete;

  // Replaces the values of chunk `chunk` of tensor `name` (creating either), keeping the chunk's
  // optimizer state if it has one. OK; INVALID_ARGUMENT (and nothing changes) if name is empty,
  // total_floats is 0 or not the tensor's, the chunk is beyond total_floats, or values.size() is
  // not the chunk's length.
  absl::Status Assign(absl::string_view name, uint32_t chunk, absl::Span<const float> values,
                      uint64_t total_floats);

  // Applies one update of `opt` with the gradient `grads` (finite, checked by the caller) to the
  // chunk. A missing chunk (or tensor) is created first as zeros with the optimizer's initial
  // state (Optimizer::InitState), as is the state of a chunk only assigned so far. Errors as for
  // Assign.
  absl::Status ApplyGradient(absl::string_view name, uint32_t chunk, absl::Span<const float> grads,
                             uint64_t total_floats, const Optimizer& opt);

  // Replaces *out with the values of the chunk. OK; NOT_FOUND (and *out unchanged) if the tensor
  // or the chunk has never been written.
  absl::Status Read(absl::string_view name, uint32_t chunk, std::vector<float>* out) const;

  // Like Read, and also replaces *state with the chunk's optimizer state (empty before a gradient
  // was applied).
  absl::Status ReadWithState(absl::string_view name, uint32_t chunk, std::vector<float>* values,
                             std::vector<float>* state) const;

  // Sets a chunk's values and optimizer state as ReadWithState gave them (replicas, restores).
  // Errors as Assign, plus INVALID_ARGUMENT for a state of the wrong length (not 0, not
  // opt.StateFloats(values.size())).
  absl::Status Restore(absl::string_view name, uint32_t chunk, uint64_t total_floats,
                       absl::Span<const float> values, absl::Span<const float> state,
                       const Optimizer& opt);

  // Calls f(name, chunk, total_floats, values, state) for every chunk, in no fixed order.
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [name, tensor] : tensors_) {
      for (const auto& [chunk, c] : tensor.chunks) {
        f(absl::string_view(name), chunk, tensor.total_floats, absl::MakeConstSpan(c.values),
          absl::MakeConstSpan(c.state));
      }
    }
  }

  // Drops every tensor.
  void Clear() { tensors_.clear(); }

  // The tensor's total_floats, or NOT_FOUND.
  absl::StatusOr<uint64_t> TotalFloats(absl::string_view name) const;

  uint32_t chunk_floats() const { return chunk_floats_; }

  // Whether Assign or ApplyGradient of `length` floats to (name, chunk) with `total_floats` would
  // be accepted: OK, or the INVALID_ARGUMENT they would return.
  absl::Status CheckWrite(absl::string_view name, uint32_t chunk, size_t length,
                          uint64_t total_floats) const;

 private:
  struct Chunk {
    std::vector<float> values;
    // Optimizer::StateFloats(values.size()) floats once a gradient was applied; empty before.
    std::vector<float> state;
  };
  struct Tensor {
    uint64_t total_floats = 0;
    absl::flat_hash_map<uint32_t, Chunk> chunks;
  };

  // The chunk, creating it (zeros) and its tensor as needed; CheckWrite must have passed.
  Chunk& GetOrCreate(absl::string_view name, uint32_t chunk, uint64_t total_floats);

  // Constant after construction.
  const uint32_t chunk_floats_;

  absl::flat_hash_map<std::string, Tensor> tensors_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_STORAGE_DENSE_STORE_H_

// A thin layer over NCCL and the CUDA runtime for NcclAllReduce. Its .cc is compiled by nvcc (see
// BUILD), because Bazel's C++ rules refuse include paths outside the workspace such as
// /usr/local/cuda/include; this header names no CUDA or NCCL type.
#ifndef PS_WORKER_COLLECTIVE_INTERNAL_NCCL_COMM_H_
#define PS_WORKER_COLLECTIVE_INTERNAL_NCCL_COMM_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ps {
namespace worker {
namespace internal {

// The size of an ncclUniqueId.
inline constexpr size_t kNcclUniqueIdBytes = 128;

// A new NCCL unique id (kNcclUniqueIdBytes bytes) for rank 0 to hand to the others. INTERNAL on
// NCCL's failure.
absl::StatusOr<std::string> NewNcclUniqueId();

// An NcclComm is one rank's NCCL communicator on one CUDA device, with a stream of its own. It is
// created non-blocking, so that every wait on the peers is bounded by a deadline and a wait that
// runs past it aborts the communicator instead of hanging. Thread-compatible.
class NcclComm {
 public:
  // Initialises rank `rank` of `size` on CUDA device `device` from rank 0's `unique_id`, waiting
  // until `deadline` for the other ranks. DEADLINE_EXCEEDED when they do not all come in time;
  // INVALID_ARGUMENT for an id of the wrong size; INTERNAL (UNAVAILABLE for NCCL's system and
  // remote errors) for CUDA's and NCCL's failures.
  static absl::StatusOr<std::unique_ptr<NcclComm>> Create(const std::string& unique_id, int rank,
                                                          int size, int device,
                                                          absl::Time deadline);

  // Finalises the communicator (waiting at most the last deadline's span for the peers) and
  // destroys it, or aborts it if it failed.
  ~NcclComm();

  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int device() const { return device_; }

  // True when `data` points into memory SumInPlace takes: of device() or managed. False for host
  // memory and anything CUDA does not know (the error it raises is cleared).
  bool TakesMemory(const float* data) const;

  // Sums `data`, device memory of device(), in place across the ranks on this communicator's
  // stream and waits until `deadline` for the result. INVALID_ARGUMENT (nothing is run) when
  // `data` is not memory of device() (nor managed memory); DEADLINE_EXCEEDED when the peers do
  // not take part in time; UNAVAILABLE or INTERNAL for NCCL's and CUDA's errors. After any error
  // but INVALID_ARGUMENT the communicator is aborted at destruction.
  absl::Status SumInPlace(absl::Span<float> data, absl::Time deadline);

 private:
  NcclComm(void* comm, void* stream, int device) : comm_(comm), stream_(stream), device_(device) {}

  // Constant after construction: an ncclComm_t and a cudaStream_t.
  void* const comm_;
  void* const stream_;
  const int device_;

  bool failed_ = false;
  absl::Duration last_timeout_ = absl::Seconds(10);
};

// An array of floats in the memory of one CUDA device, for tests and benchmarks that feed
// NcclComm. Thread-compatible.
class DeviceFloats {
 public:
  // `size` floats on `device`, uninitialised. INTERNAL when CUDA fails (out of memory, no device).
  static absl::StatusOr<std::unique_ptr<DeviceFloats>> Create(size_t size, int device);
  ~DeviceFloats();

  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;

  absl::Span<float> span() { return absl::Span<float>(data_, size_); }
  size_t size() const { return size_; }

  // Copy host.size() floats from or to host memory, at the start of this array. INVALID_ARGUMENT
  // when host.size() > size(); INTERNAL when CUDA fails.
  absl::Status CopyFromHost(absl::Span<const float> host);
  absl::Status CopyToHost(absl::Span<float> host) const;

 private:
  DeviceFloats(float* data, size_t size, int device) : data_(data), size_(size), device_(device) {}

  float* const data_;
  const size_t size_;
  const int device_;
};

}  // namespace internal
}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_INTERNAL_NCCL_COMM_H_

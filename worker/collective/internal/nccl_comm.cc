#include "worker/collective/internal/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ps {
namespace worker {
namespace internal {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "ncclUniqueId changed size");

// How often a non-blocking NCCL call or a stream is polled.
constexpr absl::Duration kPollInterval = absl::Microseconds(50);

ncclComm_t Comm(void* comm) { return static_cast<ncclComm_t>(comm); }
cudaStream_t Stream(void* stream) { return static_cast<cudaStream_t>(stream); }

absl::Status CudaError(cudaError_t error, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::Status NcclError(ncclResult_t result, ncclComm_t comm, const std::string& what) {
  std::string detail = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') absl::StrAppend(&detail, " (", last, ")");
  if (result == ncclRemoteError || result == ncclSystemError) {
    return absl::UnavailableError(absl::StrCat(what, ": ", detail));
  }
  return absl::InternalError(absl::StrCat(what, ": ", detail));
}

absl::Status PeersLate(const std::string& what) {
  return absl::DeadlineExceededError(absl::StrCat(what, ": the peers did not take part in time"));
}

// Waits until `comm`'s pending non-blocking call (initialisation, enqueueing a collective,
// finalisation) is done. DEADLINE_EXCEEDED at `deadline`; NCCL's error otherwise.
absl::Status AwaitComm(ncclComm_t comm, absl::Time deadline, const std::string& what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm, &state);
    if (result != ncclSuccess) return NcclError(result, comm, what);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(state, comm, what);
    if (absl::Now() >= deadline) return PeersLate(what);
    absl::SleepFor(kPollInterval);
  }
}

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  const ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) return NcclError(result, nullptr, "ncclGetUniqueId");
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(const std::string& unique_id, int rank,
                                                           int size, int device,
                                                           absl::Time deadline) {
  const std::string what = absl::StrCat("NCCL rank ", rank, " of ", size, " on device ", device);
  if (unique_id.size() != sizeof(ncclUniqueId)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": an NCCL unique id has ", sizeof(ncclUniqueId), " bytes, got ", unique_id.size()));
  }
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof(id));

  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaError(error, what + ": cudaSetDevice");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    absl::Status status = NcclError(result, comm, what + ": ncclCommInitRankConfig");
    if (comm != nullptr) ncclCommAbort(comm);
    return status;
  }
  absl::Status initialised = AwaitComm(comm, deadline, what + ": ncclCommInitRankConfig");
  if (!initialised.ok()) {
    ncclCommAbort(comm);
    return initialised;
  }

  cudaStream_t stream = nullptr;
  error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (error != cudaSuccess) {
    ncclCommAbort(comm);
    return CudaError(error, what + ": cudaStreamCreateWithFlags");
  }
  return std::unique_ptr<NcclComm>(new NcclComm(comm, stream, device));
}

NcclComm::~NcclComm() {
  cudaSetDevice(device_);
  bool clean = !failed_;
  if (clean) {
    // Finalising flushes the communicator's work and may wait for peers: bounded, like the rest.
    const ncclResult_t result = ncclCommFinalize(Comm(comm_));
    clean = (result == ncclSuccess || result == ncclInProgress) &&
            AwaitComm(Comm(comm_), absl::Now() + last_timeout_, "ncclCommFinalize").ok();
  }
  if (clean) {
    ncclCommDestroy(Comm(comm_));
  } else {
    ncclCommAbort(Comm(comm_));
  }
  cudaStreamDestroy(Stream(stream_));
}

bool NcclComm::TakesMemory(const float* data) const {
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so that later calls start clean
    return false;
  }
  return (attributes.type == cudaMemoryTypeDevice && attributes.device == device_) ||
         attributes.type == cudaMemoryTypeManaged;
}

absl::Status NcclComm::SumInPlace(absl::Span<float> data, absl::Time deadline) {
  const std::string what = absl::StrCat("NCCL AllReduce of ", data.size(), " floats");
  if (data.empty()) return absl::OkStatus();
  last_timeout_ = std::max(absl::Seconds(1), deadline - absl::Now());

  cudaPointerAttributes attributes;
  const cudaError_t attr_error = cudaPointerGetAttributes(&attributes, data.data());
  if (attr_error != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so that later calls start clean
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": needs device memory: ", cudaGetErrorString(attr_error)));
  }
  const bool usable = (attributes.type == cudaMemoryTypeDevice && attributes.device == device_) ||
                      attributes.type == cudaMemoryTypeManaged;
  if (!usable) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": needs memory of CUDA device ", device_, ", got memory of type ",
                     static_cast<int>(attributes.type), " (device ", attributes.device, ")"));
  }

  failed_ = true;  // until it succeeds
  cudaError_t error = cudaSetDevice(device_);
  if (error != cudaSuccess) return CudaError(error, what + ": cudaSetDevice");
  const ncclResult_t result = ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat,
                                            ncclSum, Comm(comm_), Stream(stream_));
  if (result != ncclSuccess && result != ncclInProgress) {
    return NcclError(result, Comm(comm_), what);
  }
  absl::Status enqueued = AwaitComm(Comm(comm_), deadline, what);
  if (!enqueued.ok()) return enqueued;
  while ((error = cudaStreamQuery(Stream(stream_))) == cudaErrorNotReady) {
    // A peer that stops taking part leaves the kernel spinning: NCCL reports that through the
    // communicator's asynchronous error, or not before our deadline.
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(Comm(comm_), &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      return NcclError(state, Comm(comm_), what);
    }
    if (absl::Now() >= deadline) return PeersLate(what);
    absl::SleepFor(kPollInterval);
  }
  if (error != cudaSuccess) return CudaError(error, what + ": cudaStreamQuery");
  failed_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceFloats>> DeviceFloats::Create(size_t size, int device) {
  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaError(error, "cudaSetDevice");
  void* data = nullptr;
  error = cudaMalloc(&data, std::max<size_t>(1, size) * sizeof(float));
  if (error != cudaSuccess) {
    cudaGetLastError();
    return CudaError(error, absl::StrCat("cudaMalloc of ", size, " floats"));
  }
  return std::unique_ptr<DeviceFloats>(new DeviceFloats(static_cast<float*>(data), size, device));
}

DeviceFloats::~DeviceFloats() {
  cudaSetDevice(device_);
  cudaFree(data_);
}

absl::Status DeviceFloats::CopyFromHost(absl::Span<const float> host) {
  if (host.size() > size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("copying ", host.size(), " floats into ", size_));
  }
  cudaSetDevice(device_);
  const cudaError_t error =
      cudaMemcpy(data_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  return error == cudaSuccess ? absl::OkStatus() : CudaError(error, "cudaMemcpy to the device");
}

absl::Status DeviceFloats::CopyToHost(absl::Span<float> host) const {
  if (host.size() > size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("copying ", host.size(), " floats out of ", size_));
  }
  cudaSetDevice(device_);
  const cudaError_t error =
      cudaMemcpy(host.data(), data_, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
  return error == cudaSuccess ? absl::OkStatus() : CudaError(error, "cudaMemcpy to the host");
}

}  // namespace internal
}  // namespace worker
}  // namespace ps

// The NCCL implementation of AllReduce (AllReduce::CreateNccl); NCCL and CUDA are called through
// internal/nccl_comm.h.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cuda_kernels/device.h"
#include "worker/collective/allreduce.h"
#include "worker/collective/internal/group_args.h"
#include "worker/collective/internal/nccl_comm.h"

namespace ps {
namespace worker {
namespace {

class NcclAllReduce final : public AllReduce {
 public:
  NcclAllReduce(int rank, int size, absl::Duration timeout,
                std::unique_ptr<internal::NcclComm> comm)
      : rank_(rank), size_(size), timeout_(timeout), comm_(std::move(comm)) {}

  absl::Status SumInPlace(absl::Span<float> data) override {
    if (data.empty()) return absl::OkStatus();
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("AllReduce group is broken by an earlier error: ", broken_.ToString()));
    }
    const absl::Time deadline = absl::Now() + timeout_;
    if (comm_->TakesMemory(data.data())) {
      absl::Status status = comm_->SumInPlace(data, deadline);
      if (!status.ok() && !absl::IsInvalidArgument(status)) broken_ = status;
      return status;
    }
    return SumStaged(data, deadline);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  // Sums host memory through staging_, grown to the largest call so far: copied in, reduced on
  // the device, copied back. A failed allocation or copy in leaves the group usable (nothing
  // reached the peers); a failed reduction or copy back breaks it.
  absl::Status SumStaged(absl::Span<float> data, absl::Time deadline) {
    if (staging_ == nullptr || staging_->size() < data.size()) {
      staging_.reset();
      absl::StatusOr<std::unique_ptr<internal::DeviceFloats>> grown =
          internal::DeviceFloats::Create(data.size(), comm_->device());
      if (!grown.ok()) return grown.status();
      staging_ = *std::move(grown);
    }
    absl::Status status = staging_->CopyFromHost(data);
    if (!status.ok()) return status;
    status = comm_->SumInPlace(staging_->span().first(data.size()), deadline);
    if (!status.ok()) {
      if (!absl::IsInvalidArgument(status)) broken_ = status;
      return status;
    }
    status = staging_->CopyToHost(data);
    if (!status.ok()) broken_ = status;  // the peers have the sum, this rank does not
    return status;
  }

  // Constant after construction.
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  const std::unique_ptr<internal::NcclComm> comm_;

  // The first error of SumInPlace that broke the group; OK while it works.
  absl::Status broken_;
  // Device memory for sums of host memory; null until the first.
  std::unique_ptr<internal::DeviceFloats> staging_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AllReduce>> AllReduce::CreateNccl(CoordinatorClient* coordinator,
                                                                 const std::string& group, int rank,
                                                                 int size, int device,
                                                                 absl::Duration timeout) {
  absl::Status valid = internal::ValidateGroupArgs(coordinator, group, rank, size, timeout);
  if (!valid.ok()) return valid;
  const int devices = cuda::DeviceCount();
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device");
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " outside [0, ", devices, ")"));
  }
  const std::string what =
      absl::StrCat("NCCL group \"", group, "\" rank ", rank, " of ", size, " on device ", device);
  const absl::Time deadline = absl::Now() + timeout;

  // Rank 0's unique id reaches the others through the coordinator.
  const std::string key = absl::StrCat("collective/nccl/", group, "/id");
  std::string id;
  if (rank == 0) {
    absl::StatusOr<std::string> new_id = internal::NewNcclUniqueId();
    if (!new_id.ok()) return new_id.status();
    id = *std::move(new_id);
    if (size > 1) {
      absl::Status set = coordinator->KvSet(key, id);
      if (!set.ok()) return absl::Status(set.code(), absl::StrCat(what, ": ", set.message()));
    }
  } else {
    absl::StatusOr<std::vector<std::string>> values = coordinator->KvWait({key}, timeout);
    if (!values.ok()) {
      return absl::Status(
          values.status().code(),
          absl::StrCat(what, ": waiting for rank 0's id: ", values.status().message()));
    }
    id = (*values)[0];
  }

  absl::StatusOr<std::unique_ptr<internal::NcclComm>> comm =
      internal::NcclComm::Create(id, rank, size, device, deadline);
  if (!comm.ok()) {
    return absl::Status(comm.status().code(), absl::StrCat(what, ": ", comm.status().message()));
  }
  return std::unique_ptr<AllReduce>(new NcclAllReduce(rank, size, timeout, *std::move(comm)));
}

}  // namespace worker
}  // namespace ps

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
    absl::Status status = comm_->SumInPlace(data, absl::Now() + timeout_);
    if (!status.ok() && !absl::IsInvalidArgument(status)) broken_ = status;
    return status;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  // Constant after construction.
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  const std::unique_ptr<internal::NcclComm> comm_;

  // The first error of SumInPlace that broke the group; OK while it works.
  absl::Status broken_;
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

// A worker's part of the checkpoints of a sync training job: its state (dense parameters and the
// dense optimizer's state) at the last step boundaries, handed to the coordinator when a
// checkpoint's notice asks for it, and read back when a restored job resumes.
#ifndef PS_WORKER_WORKER_CHECKPOINT_H_
#define PS_WORKER_WORKER_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/coordinator_client.h"
#include "proto/coordinator.pb.h"

namespace ps {
namespace worker {

// A WorkerCheckpointer keeps a worker's state at its two latest step boundaries and answers the
// coordinator's checkpoint notices with the one of the notice's boundary. Thread-compatible.
//
// Why two: a notice for boundary t is set before any push of step t can be applied, so a worker
// sees it in its clock report of step t - 1 or, at the latest, of step t; by then it has the
// state at boundary t + 1, and the one before.
class WorkerCheckpointer {
 public:
  // `coordinator` is not owned and must outlive this. `optimizer` is the dense optimizer's type.
  WorkerCheckpointer(CoordinatorClient* coordinator, int rank, std::string optimizer);

  // Records the state at boundary `step` (after step - 1, before step): copies of `params` and
  // `optimizer_state`. The one recorded before it is kept too.
  void AtBoundary(int64_t step, absl::Span<const float> params,
                  absl::Span<const float> optimizer_state);

  // Answers `notice` (from the latest clock answer) once per checkpoint attempt, that is per
  // notice key: puts the state at its boundary under its key, or, when that boundary is older
  // than the states kept, an error saying so (rpc::CheckpointNotice, kWorkerStateError), as when
  // the state is over the rendezvous store's value limit (Coordinator::kMaxValueBytes). A notice
  // of a later boundary waits for it. The coordinator's error if the put fails otherwise.
  absl::Status Answer(const std::optional<rpc::CheckpointNotice>& notice);

  // The state at the newest boundary recorded.
  rpc::CheckpointWorkerState Latest() const;

  // The state of worker `rank` in the checkpoint in `folder` (its manifest's file of that rank,
  // else of rank 0: with dense_sync_every 1 every worker holds the same dense model), checked
  // against its manifest entry and against the model: `num_params` parameters and
  // `optimizer_floats` floats of state of optimizer `optimizer`. Errors:
  // ReadCheckpointManifest's; FAILED_PRECONDITION when the checkpoint holds no worker's state or
  // it does not fit; DATA_LOSS for a damaged file.
  static absl::StatusOr<rpc::CheckpointWorkerState> Load(const std::string& folder, int rank,
                                                         size_t num_params, size_t optimizer_floats,
                                                         const std::string& optimizer);

  // Copies a state's floats into `params` and `optimizer_state` (sizes checked by Load).
  static void Unpack(const rpc::CheckpointWorkerState& state, absl::Span<float> params,
                     absl::Span<float> optimizer_state);

 private:
  struct Kept {
    int64_t step = -1;
    std::vector<float> params;
    std::vector<float> optimizer_state;
  };

  rpc::CheckpointWorkerState ToProto(const Kept& kept) const;

  CoordinatorClient* const coordinator_;
  const int rank_;
  const std::string optimizer_;
  Kept latest_, previous_;
  std::string answered_;  // the key of the last checkpoint answered (unique per attempt)
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_WORKER_CHECKPOINT_H_

#include "worker/worker_checkpoint.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"

namespace ps {
namespace worker {
namespace {

std::string Bytes(const std::vector<float>& floats) {
  return std::string(reinterpret_cast<const char*>(floats.data()), floats.size() * sizeof(float));
}

}  // namespace

WorkerCheckpointer::WorkerCheckpointer(CoordinatorClient* coordinator, int rank,
                                       std::string optimizer)
    : coordinator_(coordinator), rank_(rank), optimizer_(std::move(optimizer)) {}

void WorkerCheckpointer::AtBoundary(int64_t step, absl::Span<const float> params,
                                    absl::Span<const float> optimizer_state) {
  std::swap(previous_, latest_);
  latest_.step = step;
  latest_.params.assign(params.begin(), params.end());
  latest_.optimizer_state.assign(optimizer_state.begin(), optimizer_state.end());
}

rpc::CheckpointWorkerState WorkerCheckpointer::ToProto(const Kept& kept) const {
  rpc::CheckpointWorkerState state;
  state.set_rank(rank_);
  state.set_step(kept.step);
  state.set_params(Bytes(kept.params));
  state.set_optimizer_state(Bytes(kept.optimizer_state));
  state.set_optimizer(optimizer_);
  return state;
}

rpc::CheckpointWorkerState WorkerCheckpointer::Latest() const { return ToProto(latest_); }

absl::Status WorkerCheckpointer::Answer(const std::optional<rpc::CheckpointNotice>& notice) {
  if (!notice.has_value() || notice->key() == answered_ || notice->step() > latest_.step) {
    return absl::OkStatus();
  }
  answered_ = notice->key();
  const std::string key = absl::StrCat(notice->key(), rank_);
  const Kept* kept = notice->step() == latest_.step     ? &latest_
                     : notice->step() == previous_.step ? &previous_
                                                        : nullptr;
  if (kept != nullptr) {
    const std::string state = ToProto(*kept).SerializeAsString();
    absl::Status put = coordinator_->KvSet(key, state);
    if (!absl::IsResourceExhausted(put)) return put;
    // Too big for the rendezvous store: the checkpoint fails, saying so; training goes on.
    return coordinator_->KvSet(
        key, absl::StrFormat("%sits state of %d bytes is over the coordinator's limit: %s",
                             kWorkerStateError, state.size(), put.message()));
  }
  return coordinator_->KvSet(
      key, absl::StrFormat("%sat step %d it no longer has its state of step %d", kWorkerStateError,
                           latest_.step, notice->step()));
}

absl::StatusOr<rpc::CheckpointWorkerState> WorkerCheckpointer::Load(const std::string& folder,
                                                                    int rank, size_t num_params,
                                                                    size_t optimizer_floats,
                                                                    const std::string& optimizer) {
  absl::StatusOr<rpc::CheckpointManifest> manifest = ReadCheckpointManifest(folder);
  if (!manifest.ok()) return manifest.status();
  const rpc::CheckpointWorkerFile* entry = nullptr;
  for (const rpc::CheckpointWorkerFile& w : manifest->workers()) {
    if (w.rank() == rank || (entry == nullptr && w.rank() == 0)) entry = &w;
  }
  if (entry == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", folder,
        " holds no worker's state (taken without workers, or not in sync mode): a training job "
        "cannot resume from it"));
  }
  const std::string path = absl::StrCat(folder, "/", entry->file());
  rpc::CheckpointShardFile expected;  // VerifyShardFile checks size and XXH3 of any file
  expected.set_bytes(entry->bytes());
  expected.set_xxh3(entry->xxh3());
  absl::Status verified = VerifyShardFile(path, expected);
  if (!verified.ok()) return verified;
  rpc::CheckpointWorkerState state;
  std::ifstream in(path, std::ios::binary);
  if (!in || !state.ParseFromIstream(&in)) {
    return absl::DataLossError(absl::StrCat("worker state ", path, " does not parse"));
  }
  if (state.step() != manifest->step()) {
    return absl::DataLossError(
        absl::StrFormat("worker state %s is of step %d, its checkpoint of %d", path, state.step(),
                        manifest->step()));
  }
  if (state.params().size() != num_params * sizeof(float) ||
      state.optimizer_state().size() != optimizer_floats * sizeof(float) ||
      state.optimizer() != optimizer) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "worker state %s holds %d dense parameters and %d floats of %s state; the job's model has "
        "%d and %d of %s",
        path, state.params().size() / sizeof(float), state.optimizer_state().size() / sizeof(float),
        state.optimizer(), num_params, optimizer_floats, optimizer));
  }
  return state;
}

void WorkerCheckpointer::Unpack(const rpc::CheckpointWorkerState& state, absl::Span<float> params,
                                absl::Span<float> optimizer_state) {
  std::memcpy(params.data(), state.params().data(), state.params().size());
  std::memcpy(optimizer_state.data(), state.optimizer_state().data(),
              state.optimizer_state().size());
}

}  // namespace worker
}  // namespace ps

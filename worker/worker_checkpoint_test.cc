#include "worker/worker_checkpoint.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_catalog.h"
#include "common/checkpoint_reader.h"
#include "tests/testing/in_process_coordinator.h"
#include "tests/testing/temp_dir.h"

namespace ps {
namespace worker {
namespace {

rpc::CheckpointNotice Notice(uint64_t id, int64_t step) {
  rpc::CheckpointNotice n;
  n.set_id(id);
  n.set_step(step);
  n.set_key(absl::StrCat("ps/checkpoint/", id, "/worker/"));
  return n;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST_CASE("a worker answers a checkpoint with its state at the checkpoint's boundary",
          "[worker][checkpoint]") {
  testing::InProcessCoordinator c(1, 2);
  std::unique_ptr<CoordinatorClient> client = c.Connect();
  WorkerCheckpointer checkpointer(client.get(), /*rank=*/1, "adam");
  auto put = [&](uint64_t id) -> std::string {
    absl::StatusOr<std::vector<std::string>> v =
        c.coordinator->KvGet({absl::StrCat("ps/checkpoint/", id, "/worker/1")});
    return v.ok() ? v->front() : "";
  };
  checkpointer.AtBoundary(5, std::vector<float>{5, 5}, std::vector<float>{50});
  checkpointer.AtBoundary(6, std::vector<float>{6, 6}, std::vector<float>{60});

  REQUIRE(checkpointer.Answer(Notice(1, 6)).ok());
  rpc::CheckpointWorkerState state;
  REQUIRE(state.ParseFromString(put(1)));
  CHECK(state.rank() == 1);
  CHECK(state.step() == 6);
  CHECK(Floats(state.params()) == std::vector<float>{6, 6});
  CHECK(Floats(state.optimizer_state()) == std::vector<float>{60});
  CHECK(state.optimizer() == "adam");

  // Seen one step late: the state before.
  REQUIRE(checkpointer.Answer(Notice(2, 5)).ok());
  REQUIRE(state.ParseFromString(put(2)));
  CHECK(Floats(state.params()) == std::vector<float>{5, 5});
  // Too late: an error the checkpoint reports.
  REQUIRE(checkpointer.Answer(Notice(3, 4)).ok());
  CHECK(put(3) ==
        absl::StrCat(kWorkerStateError, "at step 6 it no longer has its state of step 4"));
  // Ahead: nothing yet, then the state once the worker is there.
  REQUIRE(checkpointer.Answer(Notice(4, 7)).ok());
  CHECK(put(4).empty());
  checkpointer.AtBoundary(7, std::vector<float>{7, 7}, std::vector<float>{70});
  REQUIRE(checkpointer.Answer(Notice(4, 7)).ok());
  REQUIRE(state.ParseFromString(put(4)));
  CHECK(state.step() == 7);
  // Each checkpoint is answered once.
  REQUIRE(c.coordinator->KvSet("ps/checkpoint/4/worker/1", "taken").ok());
  REQUIRE(checkpointer.Answer(Notice(4, 7)).ok());
  CHECK(put(4) == "taken");
  // A retry of that checkpoint (the same id, a new attempt's key) is answered again.
  rpc::CheckpointNotice retry = Notice(4, 7);
  retry.set_key("ps/checkpoint/4/retry/worker/");
  REQUIRE(checkpointer.Answer(retry).ok());
  absl::StatusOr<std::vector<std::string>> again =
      c.coordinator->KvGet({"ps/checkpoint/4/retry/worker/1"});
  REQUIRE(again.ok());
  REQUIRE(state.ParseFromString(again->front()));
  CHECK(state.step() == 7);
  CHECK(checkpointer.Answer(std::nullopt).ok());
}

TEST_CASE("a state over the rendezvous store's limit fails the checkpoint, not the worker",
          "[worker][checkpoint]") {
  testing::InProcessCoordinator c(1, 1);
  std::unique_ptr<CoordinatorClient> client = c.Connect();
  WorkerCheckpointer checkpointer(client.get(), /*rank=*/0, "adam");
  checkpointer.AtBoundary(3, std::vector<float>(5 << 20, 1.0f), std::vector<float>{1});
  REQUIRE(checkpointer.Answer(Notice(1, 3)).ok());
  absl::StatusOr<std::vector<std::string>> put = c.coordinator->KvGet({"ps/checkpoint/1/worker/0"});
  REQUIRE(put.ok());
  CHECK_THAT(put->front(), Catch::StartsWith(kWorkerStateError));
  CHECK_THAT(put->front(), Catch::Contains("over the coordinator's limit"));
}

// A checkpoint folder whose manifest (step 8) lists the given worker states.
std::string WriteCheckpoint(const std::vector<rpc::CheckpointWorkerState>& states) {
  static int n = 0;
  const std::string folder =
      absl::StrCat(testing::TempDir(), "/worker_ckpt_", ++n, "/", CheckpointFolderName(3));
  std::filesystem::create_directories(folder);
  rpc::CheckpointManifest manifest;
  manifest.set_format(kCheckpointFormat);
  manifest.set_id(3);
  manifest.set_step(8);
  for (const rpc::CheckpointWorkerState& s : states) {
    const std::string file = absl::StrCat("worker-", s.rank(), ".pb");
    std::ofstream(folder + "/" + file, std::ios::binary) << s.SerializeAsString();
    rpc::CheckpointWorkerFile* entry = manifest.add_workers();
    entry->set_rank(s.rank());
    entry->set_file(file);
    entry->set_bytes(std::filesystem::file_size(folder + "/" + file));
    entry->set_xxh3(*FileXxh3(folder + "/" + file));
  }
  REQUIRE(WriteCheckpointManifest(folder, manifest).ok());
  return folder;
}

rpc::CheckpointWorkerState State(int rank, int64_t step, std::vector<float> params,
                                 std::vector<float> optimizer) {
  rpc::CheckpointWorkerState s;
  s.set_rank(rank);
  s.set_step(step);
  s.set_params(std::string(reinterpret_cast<const char*>(params.data()), params.size() * 4));
  s.set_optimizer_state(
      std::string(reinterpret_cast<const char*>(optimizer.data()), optimizer.size() * 4));
  s.set_optimizer("adam");
  return s;
}

TEST_CASE("a resumed worker loads its rank's state, else rank 0's, checked",
          "[worker][checkpoint]") {
  const std::string folder =
      WriteCheckpoint({State(0, 8, {1, 2, 3}, {4, 5}), State(2, 8, {7, 8, 9}, {1, 1})});
  absl::StatusOr<rpc::CheckpointWorkerState> two =
      WorkerCheckpointer::Load(folder, 2, 3, 2, "adam");
  REQUIRE(two.ok());
  std::vector<float> params(3), optimizer(2);
  WorkerCheckpointer::Unpack(*two, absl::MakeSpan(params), absl::MakeSpan(optimizer));
  CHECK(params == std::vector<float>{7, 8, 9});
  CHECK(optimizer == std::vector<float>{1, 1});
  absl::StatusOr<rpc::CheckpointWorkerState> one =
      WorkerCheckpointer::Load(folder, 1, 3, 2, "adam");
  REQUIRE(one.ok());
  CHECK(one->rank() == 0);

  // Another model or optimizer: refused.
  CHECK(WorkerCheckpointer::Load(folder, 0, 4, 2, "adam").status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(WorkerCheckpointer::Load(folder, 0, 3, 2, "sgd").status().code() ==
        absl::StatusCode::kFailedPrecondition);
  // A damaged file: refused.
  std::ofstream(folder + "/worker-2.pb", std::ios::binary | std::ios::app) << "x";
  CHECK(WorkerCheckpointer::Load(folder, 2, 3, 2, "adam").status().code() ==
        absl::StatusCode::kDataLoss);
  // Without workers' state there is nothing to resume.
  absl::StatusOr<rpc::CheckpointWorkerState> none =
      WorkerCheckpointer::Load(WriteCheckpoint({}), 0, 3, 2, "adam");
  CHECK(none.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(none.status().message()), Catch::Contains("holds no worker's state"));
}

}  // namespace
}  // namespace worker
}  // namespace ps

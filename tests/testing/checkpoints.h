// What the checkpoint tests share: taking a checkpoint of a running cluster, connecting a client,
// and reading a checkpoint's whole content back, comparable regardless of its files.
#ifndef PS_TESTS_TESTING_CHECKPOINTS_H_
#define PS_TESTS_TESTING_CHECKPOINTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/ps_client.h"
#include "proto/checkpoint.pb.h"
#include "proto/coordinator.pb.h"
#include "tests/testing/local_cluster.h"

namespace ps {
namespace testing {

// Has the coordinator at `coordinator` take a checkpoint (sync jobs: at boundary `step`; -1: the
// coordinator's pick) and waits up to a minute for it. The coordinator's error otherwise.
absl::StatusOr<rpc::CheckpointResponse> TakeCheckpoint(const std::string& coordinator,
                                                       int64_t step = -1);

// A client of `cluster` (the test fails if it cannot connect).
std::unique_ptr<Client> ConnectClient(const LocalCluster& cluster);
// A client of the coordinator at `coordinator` (waiting up to 30 s for it).
std::unique_ptr<Client> ConnectClient(const std::string& coordinator);

// `n` random 64-bit keys from `seed`.
std::vector<uint64_t> RandomKeys(size_t n, uint64_t seed);

// Everything a checkpoint restores to.
struct CheckpointStore {
  std::map<std::pair<std::string, uint64_t>, std::string> rows;   // (table, id) -> row + state
  std::map<std::pair<std::string, uint32_t>, std::string> dense;  // (name, chunk) -> DenseChange
  std::map<std::pair<uint32_t, uint32_t>, std::string> windows;   // (shard, worker) -> entry
  std::map<uint32_t, uint64_t> sequences;                         // shard -> applied sequence
  bool operator==(const CheckpointStore& o) const {
    return rows == o.rows && dense == o.dense && windows == o.windows && sequences == o.sequences;
  }
};

// The checkpoint in `folder` (of the job in `job_path`) as a restore sees it, read without the
// restore's code: its base's content (the folder named by base_id beside it) first, then each of
// its shard files over it (a full file replacing its shard's rows), and its own dense chunks,
// windows and sequences. The test fails if a file cannot be read.
CheckpointStore ReadCheckpointStore(const std::string& folder, const std::string& job_path);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_CHECKPOINTS_H_

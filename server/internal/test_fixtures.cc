#include "server/internal/test_fixtures.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "common/job_config.h"

namespace ps {
namespace server {
namespace testing {

uint64_t LentRegionBytes(const rpc::OpenSharedRegionResponse& lent) {
  return lent.header_bytes() + uint64_t{lent.slots()} * lent.slot_bytes();
}

absl::StatusOr<unsigned char*> MapLentRegion(const rpc::OpenSharedRegionResponse& lent) {
  const std::string path = absl::StrFormat("/proc/%d/fd/%d", lent.pid(), lent.fd());
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrFormat("open %s: %s", path, std::strerror(errno)));
  }
  void* mapped = mmap(nullptr, LentRegionBytes(lent), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (mapped == MAP_FAILED) {
    return absl::InternalError(absl::StrFormat("mmap %s: %s", path, std::strerror(error)));
  }
  return static_cast<unsigned char*>(mapped);
}

absl::StatusOr<std::map<uint64_t, std::vector<float>>> PullStoreRows(
    ShardedStore& store, const std::vector<uint64_t>& keys) {
  rpc::PullRequest request;
  request.set_table("emb");
  request.mutable_header()->set_clock(-1);
  SetKeys(keys, &request);
  rpc::PullResponse response;
  absl::Status status = store.Pull(request, &response);
  if (!status.ok()) return status;
  if (response.dim() != 4) {
    return absl::InternalError(absl::StrFormat("pulled rows of dim %d, not 4", response.dim()));
  }
  std::map<uint64_t, std::vector<float>> rows;
  std::vector<uint64_t> sent(request.keys().size() / 8);
  std::memcpy(sent.data(), request.keys().data(), request.keys().size());
  const float* v = reinterpret_cast<const float*>(response.values().data());
  for (size_t i = 0; i < sent.size(); ++i) rows[sent[i]].assign(v + 4 * i, v + 4 * i + 4);
  return rows;
}

config::Job TestJob() {
  absl::StatusOr<config::Job> job =
      ParseJob(R"pb(
                 tables {
                   name: "emb"
                   dim: 4
                   initializer { kind: UNIFORM low: -1 high: 1 }
                   optimizer { type: "sgd" learning_rate: 0.5 }
                 }
                 training { mode: ASYNC }
                 cluster { num_shards: 8 num_servers: 2 max_message_bytes: 1048576 }
               )pb",
               "test.pbtxt");
  if (!job.ok()) {  // a broken fixture, not a test failure
    std::fprintf(stderr, "TestJob: %s\n", job.status().ToString().c_str());
    std::abort();
  }
  return *job;
}

rpc::ShardMap EvenOddMap(uint64_t version) {
  rpc::ShardMap map;
  map.set_version(version);
  map.set_num_shards(kTestShards);
  for (uint32_t s = 0; s < kTestShards; ++s) {
    rpc::ShardAssignment* a = map.add_shards();
    a->set_shard(s);
    a->set_primary(s % 2);
  }
  return map;
}

std::vector<uint64_t> KeysOnShards(int parity, int n) {
  std::vector<uint64_t> keys;
  const uint64_t table = NameHash("emb");
  for (uint64_t k = 0; keys.size() < static_cast<size_t>(n); ++k) {
    if (static_cast<int>(ShardOf(table, k, kTestShards) % 2) == parity) keys.push_back(k);
  }
  return keys;
}

}  // namespace testing
}  // namespace server
}  // namespace ps

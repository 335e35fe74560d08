// What the store's, the service's and the checkpoint's tests share: a small job, a two-server
// shard map, requests whose keys are grouped into runs by shard as a client sends them, a
// store's rows pulled by key, and a lent shared region mapped as a client on this host maps it.
#ifndef PS_SERVER_INTERNAL_TEST_FIXTURES_H_
#define PS_SERVER_INTERNAL_TEST_FIXTURES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/hash.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/sharded_store.h"

namespace ps {
namespace server {
namespace testing {

// The shards of TestJob().
constexpr uint32_t kTestShards = 8;

// Table "emb" (dim 4, uniform rows, sgd with learning rate 0.5) over kTestShards shards and 2
// servers, in ASYNC mode (pushes apply on arrival), with 1 MiB messages.
config::Job TestJob();

// Version `version` of a map in which server 0 serves the even shards and server 1 the odd ones.
rpc::ShardMap EvenOddMap(uint64_t version);

// The first `n` keys of table "emb" (counting from 0) on shards of parity `parity` (0: those
// of server 0 in EvenOddMap).
std::vector<uint64_t> KeysOnShards(int parity, int n);

// The rows of `keys` (of table "emb") pulled from `store` as an observer that keeps no step
// clock, by key. The store's error, or INTERNAL when the answer's dim is not TestJob()'s 4.
absl::StatusOr<std::map<uint64_t, std::vector<float>>> PullStoreRows(
    ShardedStore& store, const std::vector<uint64_t>& keys);

// Maps the shared region `lent` describes as a client on this host does (/proc/<pid>/fd/<fd>);
// INTERNAL, saying why, when it cannot. Unmap it with munmap(base, LentRegionBytes(lent)).
absl::StatusOr<unsigned char*> MapLentRegion(const rpc::OpenSharedRegionResponse& lent);
uint64_t LentRegionBytes(const rpc::OpenSharedRegionResponse& lent);

// Sets the request's keys and runs from `keys` of its table, grouped by shard.
template <typename Request>
void SetKeys(const std::vector<uint64_t>& keys, Request* request) {
  const uint64_t table = NameHash(request->table());
  std::map<uint32_t, std::vector<uint64_t>> by_shard;
  for (uint64_t k : keys) by_shard[ShardOf(table, k, kTestShards)].push_back(k);
  std::string bytes;
  for (const auto& [shard, ks] : by_shard) {
    rpc::ShardRun* run = request->add_runs();
    run->set_shard(shard);
    run->set_count(ks.size());
    bytes.append(reinterpret_cast<const char*>(ks.data()), ks.size() * sizeof(uint64_t));
  }
  request->set_keys(bytes);
}

}  // namespace testing
}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_INTERNAL_TEST_FIXTURES_H_

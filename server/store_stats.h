// What a parameter server reports of its tables and shard copies in ServerStatus, and the data
// path's counters behind it: per table the keys and requests pulled and pushed and its hot keys
// (TableTraffic), the pulls answered from replicas, and the stragglers' pushes that sync training
// dropped.
#ifndef PS_SERVER_STORE_STATS_H_
#define PS_SERVER_STORE_STATS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/shard/shard.h"
#include "server/storage/embedding_table.h"
#include "server/table_traffic.h"

namespace ps {
namespace server {

// StoreStats models the counters and sizes a ShardedStore reports. Thread-safe: the counters are
// atomic or TableTraffic (thread-safe); Fill reads the copies it is given, which the caller
// keeps alive.
class StoreStats {
 public:
  // `job`'s tables, whose specs are `tables` (by table index; not owned, must outlive this).
  // `hot_keys_sample_every`: one key of a request in this many goes into the hot-keys sketches
  // (0: none), each table's sketch seeded with its index + 1.
  StoreStats(const config::Job& job, const std::vector<std::unique_ptr<TableSpec>>* tables,
             uint32_t hot_keys_sample_every);

  StoreStats(const StoreStats&) = delete;
  StoreStats& operator=(const StoreStats&) = delete;

  // Table `table`'s traffic (a valid table index).
  TableTraffic& traffic(size_t table) const { return *traffic_[table]; }
  // A pull (request) answered from replicas.
  void CountReplicaPull() { replica_pulls_.fetch_add(1, std::memory_order_relaxed); }
  // Sync: a straggler's push of `keys` keys for a step already applied, dropped.
  void CountLatePush(uint64_t keys) {
    late_pushes_.fetch_add(1, std::memory_order_relaxed);
    late_keys_.fetch_add(keys, std::memory_order_relaxed);
  }

  // OK, or why the hot keys `request` asks for cannot be reported: NOT_FOUND for an unknown
  // hot_keys_table, INVALID_ARGUMENT for hot_keys_k above HotKeys::kDefaultCapacity. A request
  // without a hot_keys_table is OK.
  absl::Status CheckRequest(const rpc::ServerStatusRequest& request) const;

  // One copy of a shard that the server holds.
  struct Copy {
    uint32_t shard = 0;
    rpc::ShardSize::Copy copy = rpc::ShardSize::PRIMARY;
    const Shard* held = nullptr;  // not null
  };

  // Adds to `status`: the counters (replica_pulls, late_pushes_dropped, late_keys_dropped);
  // per copy, in the order given, its shard in primary_shards or replica_shards and its rows and
  // bytes over every table (shard_sizes); per table (tables), its name, dim, optimizer, the rows
  // and bytes of every copy and of the primaries, and its traffic counters; and, when
  // CheckRequest passes and request.hot_keys_table names a table, its hottest pulled and pushed
  // keys (request.hot_keys_k of each, 10 when 0).
  void Fill(const rpc::ServerStatusRequest& request, absl::Span<const Copy> copies,
            rpc::ServerStatus* status) const;

 private:
  // The index of table `name`; -1 for none.
  int FindTable(const std::string& name) const;

  // Constant after construction.
  const config::Job job_;
  const std::vector<std::unique_ptr<TableSpec>>* const tables_;
  // By table index. The objects are thread-safe.
  const std::vector<std::unique_ptr<TableTraffic>> traffic_;

  std::atomic<uint64_t> replica_pulls_{0};
  std::atomic<uint64_t> late_pushes_{0};
  std::atomic<uint64_t> late_keys_{0};
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_STORE_STATS_H_

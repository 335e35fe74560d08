// What a server's data path was asked of one table: keys and requests pulled and pushed, and the
// hottest keys of each direction. Read at status time (ServerStatus, and from there ps_ctl and the
// metrics endpoint).
#ifndef PS_SERVER_TABLE_TRAFFIC_H_
#define PS_SERVER_TABLE_TRAFFIC_H_

#include <atomic>
#include <cstdint>

#include "absl/types/span.h"
#include "proto/server_status.pb.h"
#include "server/hot_keys.h"

namespace ps {
namespace server {

// A TableTraffic counts one table's pulls and pushes on one server. Thread-safe, and cheap enough
// for every request: the counters are relaxed atomics, and the hot-keys sketches sample the keys
// and skip a request rather than wait (HotKeys::Record).
class TableTraffic {
 public:
  // `hot_keys` configures both sketches (pulled and pushed); with hot_keys.sample_every 0 no key is
  // sampled (the counters still count) and FillHotKeys reports none.
  explicit TableTraffic(const HotKeys::Options& hot_keys = {});

  TableTraffic(const TableTraffic&) = delete;
  TableTraffic& operator=(const TableTraffic&) = delete;

  // One validated pull or push request of `keys` (repeats included).
  void RecordPull(absl::Span<const uint64_t> keys);
  void RecordPush(absl::Span<const uint64_t> keys);

  // Sets keys_pulled, pull_requests, keys_pushed, push_requests and hot_keys_skipped of `status`
  // (the counters since construction, each read on its own).
  void FillCounters(rpc::TableStatus* status) const;

  // Appends the top `k` pulled keys to status->hot_pulled and pushed keys to status->hot_pushed
  // (HotKeys::Top: hottest first, at most k of each), and sets hot_keys_sample_every (0, with no
  // keys, when sampling is off).
  void FillHotKeys(uint32_t k, rpc::ServerStatus* status) const;

  const HotKeys& pulled() const { return pulled_; }
  const HotKeys& pushed() const { return pushed_; }

 private:
  // Constant after construction: whether keys are sampled into the sketches.
  const bool sample_;
  std::atomic<uint64_t> keys_pulled_{0};
  std::atomic<uint64_t> pull_requests_{0};
  std::atomic<uint64_t> keys_pushed_{0};
  std::atomic<uint64_t> push_requests_{0};
  HotKeys pulled_;
  HotKeys pushed_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_TABLE_TRAFFIC_H_

#include "server/table_traffic.h"

#include <vector>

namespace ps {
namespace server {
namespace {

void AddAll(const std::vector<HotKey>& top, google::protobuf::RepeatedPtrField<rpc::HotKey>* out) {
  for (const HotKey& h : top) {
    rpc::HotKey* key = out->Add();
    key->set_id(h.id);
    key->set_count(h.count);
    key->set_error(h.error);
  }
}

}  // namespace

TableTraffic::TableTraffic(const HotKeys::Options& hot_keys)
    : sample_(hot_keys.sample_every > 0), pulled_(hot_keys), pushed_([&] {
        // Another sequence of sample offsets for the other direction.
        HotKeys::Options options = hot_keys;
        options.seed = ~hot_keys.seed;
        return options;
      }()) {}

void TableTraffic::RecordPull(absl::Span<const uint64_t> keys) {
  keys_pulled_.fetch_add(keys.size(), std::memory_order_relaxed);
  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  if (sample_) pulled_.Record(keys);
}

void TableTraffic::RecordPush(absl::Span<const uint64_t> keys) {
  keys_pushed_.fetch_add(keys.size(), std::memory_order_relaxed);
  push_requests_.fetch_add(1, std::memory_order_relaxed);
  if (sample_) pushed_.Record(keys);
}

void TableTraffic::FillCounters(rpc::TableStatus* status) const {
  status->set_keys_pulled(keys_pulled_.load(std::memory_order_relaxed));
  status->set_pull_requests(pull_requests_.load(std::memory_order_relaxed));
  status->set_keys_pushed(keys_pushed_.load(std::memory_order_relaxed));
  status->set_push_requests(push_requests_.load(std::memory_order_relaxed));
  status->set_hot_keys_skipped(pulled_.skipped() + pushed_.skipped());
}

void TableTraffic::FillHotKeys(uint32_t k, rpc::ServerStatus* status) const {
  if (!sample_) {
    status->set_hot_keys_sample_every(0);
    return;
  }
  status->set_hot_keys_sample_every(pulled_.sample_every());
  AddAll(pulled_.Top(k), status->mutable_hot_pulled());
  AddAll(pushed_.Top(k), status->mutable_hot_pushed());
}

}  // namespace server
}  // namespace ps

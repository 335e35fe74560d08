#include "server/store_stats.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "server/hot_keys.h"

namespace ps {
namespace server {
namespace {

std::vector<std::unique_ptr<TableTraffic>> NewTraffic(size_t tables, uint32_t sample_every) {
  HotKeys::Options hot_keys;
  hot_keys.sample_every = sample_every;
  std::vector<std::unique_ptr<TableTraffic>> traffic;
  for (size_t t = 0; t < tables; ++t) {
    hot_keys.seed = t + 1;
    traffic.push_back(std::make_unique<TableTraffic>(hot_keys));
  }
  return traffic;
}

uint32_t HotKeysK(const rpc::ServerStatusRequest& request) {
  return request.hot_keys_k() == 0 ? 10 : request.hot_keys_k();
}

}  // namespace

StoreStats::StoreStats(const config::Job& job,
                       const std::vector<std::unique_ptr<TableSpec>>* tables,
                       uint32_t hot_keys_sample_every)
    : job_(job), tables_(tables), traffic_(NewTraffic(tables->size(), hot_keys_sample_every)) {}

int StoreStats::FindTable(const std::string& name) const {
  for (size_t t = 0; t < tables_->size(); ++t) {
    if ((*tables_)[t]->name == name) return static_cast<int>(t);
  }
  return -1;
}

absl::Status StoreStats::CheckRequest(const rpc::ServerStatusRequest& request) const {
  if (request.hot_keys_table().empty()) return absl::OkStatus();
  if (FindTable(request.hot_keys_table()) < 0) {
    return absl::NotFoundError(absl::StrFormat("unknown table \"%s\"", request.hot_keys_table()));
  }
  if (HotKeysK(request) > HotKeys::kDefaultCapacity) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hot_keys_k %d is above %d, the keys a server monitors per table and direction",
        HotKeysK(request), HotKeys::kDefaultCapacity));
  }
  return absl::OkStatus();
}

void StoreStats::Fill(const rpc::ServerStatusRequest& request, absl::Span<const Copy> copies,
                      rpc::ServerStatus* status) const {
  status->set_late_pushes_dropped(late_pushes_.load());
  status->set_late_keys_dropped(late_keys_.load());
  status->set_replica_pulls(replica_pulls_.load());
  const std::vector<std::unique_ptr<TableSpec>>& tables = *tables_;
  const size_t num_tables = tables.size();
  std::vector<uint64_t> rows(num_tables, 0), bytes(num_tables, 0);
  std::vector<uint64_t> primary_rows(num_tables, 0), primary_bytes(num_tables, 0);
  std::vector<uint64_t> shard_rows(num_tables), shard_bytes(num_tables);
  std::vector<TableShard::Counters> counters(num_tables);
  for (const Copy& copy : copies) {
    const bool primary = copy.copy == rpc::ShardSize::PRIMARY;
    if (primary) {
      status->add_primary_shards(copy.shard);
    } else {
      status->add_replica_shards(copy.shard);
    }
    std::fill(shard_rows.begin(), shard_rows.end(), 0);
    std::fill(shard_bytes.begin(), shard_bytes.end(), 0);
    copy.held->AddSizes(&shard_rows, &shard_bytes);
    copy.held->AddCounters(&counters);
    rpc::ShardSize* size = status->add_shard_sizes();
    size->set_shard(copy.shard);
    size->set_copy(copy.copy);
    for (size_t t = 0; t < num_tables; ++t) {
      rows[t] += shard_rows[t];
      bytes[t] += shard_bytes[t];
      if (primary) {
        primary_rows[t] += shard_rows[t];
        primary_bytes[t] += shard_bytes[t];
      }
      size->set_rows(size->rows() + shard_rows[t]);
      size->set_bytes(size->bytes() + shard_bytes[t]);
    }
  }
  for (size_t t = 0; t < num_tables; ++t) {
    rpc::TableStatus* ts = status->add_tables();
    ts->set_name(tables[t]->name);
    ts->set_dim(tables[t]->dim);
    ts->set_optimizer(job_.tables(t).optimizer().type());
    ts->set_rows(rows[t]);
    ts->set_bytes(bytes[t]);
    ts->set_primary_rows(primary_rows[t]);
    ts->set_primary_bytes(primary_bytes[t]);
    traffic_[t]->FillCounters(ts);
    ts->set_evicted_ttl(counters[t].evicted_ttl);
    ts->set_evicted_budget(counters[t].evicted_budget);
    ts->set_admission_refused(counters[t].admission_refused);
    ts->set_full_refused(counters[t].full_refused);
    ts->set_demoted(counters[t].demoted);
    ts->set_promoted(counters[t].promoted);
  }
  const int hot = FindTable(request.hot_keys_table());
  if (hot >= 0 && CheckRequest(request).ok()) {
    status->set_hot_keys_table(request.hot_keys_table());
    traffic_[hot]->FillHotKeys(HotKeysK(request), status);
  }
}

}  // namespace server
}  // namespace ps

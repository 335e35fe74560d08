#include "server/coordinator/etcd_state_store.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace ps {
namespace coordinator {
namespace {

constexpr char kState[] = "state";
constexpr char kKv[] = "kv/";

}  // namespace

EtcdStateStore::EtcdStateStore(EtcdClient* etcd, std::string prefix, std::string leader_key,
                               int64_t leader_revision, absl::Duration write_timeout)
    : etcd_(etcd),
      prefix_(std::move(prefix)),
      leader_key_(std::move(leader_key)),
      leader_revision_(leader_revision),
      write_timeout_(write_timeout) {}

std::string EtcdStateStore::location() const {
  return absl::StrCat("etcd ", absl::StrJoin(etcd_->endpoints(), ","), ", prefix ", prefix_);
}

absl::StatusOr<std::optional<SavedCoordinator>> EtcdStateStore::Load() const {
  PS_ASSIGN_OR_RETURN(const etcd::RangeResponse range, etcd_->RangePrefix(prefix_));
  SavedCoordinator saved;
  bool any = false;
  for (const etcd::KeyValue& kv : range.kvs()) {
    absl::string_view key(kv.key());
    if (!absl::ConsumePrefix(&key, prefix_)) continue;
    if (key == kState) {
      if (!saved.state.ParseFromString(kv.value())) {
        return absl::DataLossError(absl::StrCat(location(), ": its state record does not parse"));
      }
      any = true;
    } else if (absl::ConsumePrefix(&key, kKv)) {
      saved.kv[std::string(key)] = kv.value();
    }
  }
  if (!any) return std::optional<SavedCoordinator>();
  return std::optional<SavedCoordinator>(std::move(saved));
}

absl::Status EtcdStateStore::WriteIfLeader(etcd::TxnRequest txn) {
  etcd::Compare* leader = txn.add_compare();
  leader->set_key(leader_key_);
  leader->set_target(etcd::Compare::CREATE);
  leader->set_result(etcd::Compare::EQUAL);
  leader->set_create_revision(leader_revision_);
  // A write that failed costs this coordinator the lead: etcd gets time to sync it (a timed-out
  // write is sent to the next member; it is the same write, and puts are idempotent).
  PS_ASSIGN_OR_RETURN(const etcd::TxnResponse response, etcd_->Txn(txn, write_timeout_));
  if (!response.succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat("no longer leader: ", leader_key_,
                                                      " is not the key this coordinator created "
                                                      "at revision ",
                                                      leader_revision_, " (", location(), ")"));
  }
  return absl::OkStatus();
}

absl::Status EtcdStateStore::SaveState(const rpc::CoordinatorState& state) {
  etcd::TxnRequest txn;
  etcd::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(absl::StrCat(prefix_, kState));
  put->set_value(state.SerializeAsString());
  return WriteIfLeader(std::move(txn));
}

absl::Status EtcdStateStore::SaveClock(int32_t, int64_t) { return absl::OkStatus(); }

absl::Status EtcdStateStore::SaveKv(absl::string_view key, absl::string_view value) {
  if (value.size() > kMaxValueBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("rendezvous value of ", value.size(),
                                                     " bytes is over the ", kMaxValueBytes,
                                                     " bytes an etcd-backed coordinator keeps"));
  }
  etcd::TxnRequest txn;
  etcd::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(absl::StrCat(prefix_, kKv, key));
  put->set_value(std::string(value));
  return WriteIfLeader(std::move(txn));
}

absl::Status EtcdStateStore::EraseKvPrefix(absl::string_view prefix) {
  etcd::TxnRequest txn;
  etcd::DeleteRangeRequest* erase = txn.add_success()->mutable_request_delete_range();
  const std::string start = absl::StrCat(prefix_, kKv, prefix);
  erase->set_key(start);
  erase->set_range_end(EtcdClient::PrefixEnd(start));
  return WriteIfLeader(std::move(txn));
}

}  // namespace coordinator
}  // namespace ps

#include "server/coordinator/leader_election.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace ps {
namespace coordinator {
namespace {

etcd::RequestOp PutOp(const std::string& key, const std::string& value, int64_t lease) {
  etcd::RequestOp op;
  op.mutable_request_put()->set_key(key);
  op.mutable_request_put()->set_value(value);
  op.mutable_request_put()->set_lease(lease);
  return op;
}

// How much earlier than etcd this process counts a lease as ended: a tenth of its TTL.
absl::Duration Margin(int64_t ttl_s) { return absl::Milliseconds(100) * ttl_s; }

}  // namespace

absl::StatusOr<std::unique_ptr<LeaderElection>> LeaderElection::Create(
    EtcdClient* etcd, LeaderElectionOptions options) {
  if (options.prefix.empty() || options.prefix.back() != '/') {
    return absl::InvalidArgumentError("leader election: the prefix must end with '/'");
  }
  if (options.address.empty()) {
    return absl::InvalidArgumentError("leader election: the coordinator's address is required");
  }
  if (options.lease_ttl_s < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("leader election: the lease TTL must be >= 1 s, got ", options.lease_ttl_s));
  }
  if (options.poll <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("leader election: poll must be > 0");
  }
  std::unique_ptr<LeaderElection> election(new LeaderElection(etcd, std::move(options)));
  election->renewer_ = std::thread([e = election.get()] { e->RenewLoop(); });
  return election;
}

LeaderElection::LeaderElection(EtcdClient* etcd, LeaderElectionOptions options)
    : etcd_(etcd), options_(std::move(options)) {}

LeaderElection::~LeaderElection() {
  Stop();
  int64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    id = lease_id_;
    lease_id_ = 0;
    leading_ = false;
  }
  if (id != 0) (void)etcd_->LeaseRevoke(id);
}

void LeaderElection::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  if (renewer_.joinable() && renewer_.get_id() != std::this_thread::get_id()) renewer_.join();
}

absl::Status LeaderElection::EnsureLease() {
  {
    absl::MutexLock lock(&mu_);
    if (lease_id_ != 0 && absl::Now() < lease_valid_until_) return absl::OkStatus();
  }
  const absl::Time sent = absl::Now();
  PS_ASSIGN_OR_RETURN(const etcd::LeaseGrantResponse grant,
                      etcd_->LeaseGrant(options_.lease_ttl_s));
  etcd::TxnRequest announce;
  *announce.add_success() =
      PutOp(options_.prefix + "candidates/" + options_.address, options_.address, grant.id());
  absl::Status announced = etcd_->Txn(announce).status();
  absl::MutexLock lock(&mu_);
  lease_id_ = grant.id();
  granted_ttl_s_ = grant.ttl();
  lease_valid_until_ = sent + absl::Seconds(grant.ttl()) - Margin(grant.ttl());
  return announced;
}

void LeaderElection::RenewLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopped_) {
    const int64_t ttl = std::max<int64_t>(granted_ttl_s_, options_.lease_ttl_s);
    mu_.AwaitWithTimeout(absl::Condition(&stopped_),
                         std::max(absl::Milliseconds(100), absl::Seconds(ttl) / 4));
    if (stopped_) break;
    const int64_t id = lease_id_;
    if (id == 0) continue;
    const absl::Time sent = absl::Now();
    mu_.Unlock();
    const absl::StatusOr<int64_t> renewed = etcd_->LeaseKeepAlive(id);
    mu_.Lock();
    if (lease_id_ != id) continue;  // resigned meanwhile
    last_renewal_ = renewed.ok() ? absl::OkStatus() : renewed.status();
    last_renewal_took_ = absl::Now() - sent;
    if (renewed.ok()) {
      lease_valid_until_ =
          std::max(lease_valid_until_, sent + absl::Seconds(*renewed) - Margin(*renewed));
    } else if (absl::IsNotFound(renewed.status())) {
      // Expired: whatever this process believed, it leads no more.
      if (leading_) {
        std::fprintf(stderr, "coordinator %s: its etcd lease expired: it no longer leads\n",
                     options_.address.c_str());
      }
      lease_id_ = 0;
      leading_ = false;
      lease_valid_until_ = absl::InfinitePast();
    }
  }
}

absl::StatusOr<LeaderElection::Term> LeaderElection::Campaign() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return absl::CancelledError("leader election stopped");
    }
    const absl::Status leased = EnsureLease();
    int64_t lease = 0;
    {
      absl::MutexLock lock(&mu_);
      lease = lease_id_;
    }
    absl::StatusOr<etcd::RangeResponse> current =
        leased.ok() ? etcd_->Range(LeaderKey()) : absl::StatusOr<etcd::RangeResponse>(leased);
    if (current.ok() && current->kvs_size() > 0) {
      absl::MutexLock lock(&mu_);
      leader_ = current->kvs(0).value();
    } else if (current.ok()) {
      etcd::TxnRequest txn;
      etcd::Compare* absent = txn.add_compare();
      absent->set_key(LeaderKey());
      absent->set_target(etcd::Compare::CREATE);
      absent->set_result(etcd::Compare::EQUAL);
      absent->set_create_revision(0);
      *txn.add_success() = PutOp(LeaderKey(), options_.address, lease);
      *txn.add_success() = PutOp(options_.prefix + "terms", options_.address, 0);
      absl::StatusOr<etcd::TxnResponse> won = etcd_->Txn(txn);
      if (won.ok() && won->succeeded()) {
        Term term;
        term.leader_revision = won->header().revision();
        term.took_office = absl::Now();
        absl::StatusOr<etcd::RangeResponse> terms = etcd_->Range(options_.prefix + "terms");
        if (terms.ok() && terms->kvs_size() > 0) term.number = terms->kvs(0).version();
        absl::MutexLock lock(&mu_);
        leading_ = true;
        leader_ = options_.address;
        return term;
      }
    }
    absl::MutexLock lock(&mu_);
    if (!current.ok()) leader_.clear();
    mu_.AwaitWithTimeout(absl::Condition(&stopped_), options_.poll);
  }
}

absl::Status LeaderElection::CheckLeading() const {
  absl::MutexLock lock(&mu_);
  if (leading_ && absl::Now() < lease_valid_until_) return absl::OkStatus();
  if (leading_) {
    return absl::UnavailableError(absl::StrCat(
        "coordinator ", options_.address,
        " is no longer the leader (its etcd lease may have ended; the last renewal took ",
        absl::FormatDuration(last_renewal_took_), ": ", last_renewal_.ToString(), ")"));
  }
  if (leader_.empty() || leader_ == options_.address) {
    return absl::UnavailableError(
        absl::StrCat("coordinator ", options_.address, " is a standby; no leader is known"));
  }
  return absl::UnavailableError(
      absl::StrCat("coordinator ", options_.address, " is a standby; the leader is ", leader_));
}

void LeaderElection::Resign(const absl::Status& why) {
  int64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (leading_) {
      std::fprintf(stderr, "coordinator %s: resigns: %s\n", options_.address.c_str(),
                   why.ToString().c_str());
    }
    leading_ = false;
    leader_.clear();
    id = lease_id_;
    lease_id_ = 0;
    lease_valid_until_ = absl::InfinitePast();
  }
  if (id != 0) (void)etcd_->LeaseRevoke(id);
}

std::string LeaderElection::leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

int64_t LeaderElection::lease_ttl_s() const {
  absl::MutexLock lock(&mu_);
  return granted_ttl_s_;
}

absl::StatusOr<std::vector<std::string>> LeaderElection::Candidates() {
  const std::string prefix = options_.prefix + "candidates/";
  PS_ASSIGN_OR_RETURN(const etcd::RangeResponse range, etcd_->RangePrefix(prefix));
  std::vector<std::string> out;
  for (const etcd::KeyValue& kv : range.kvs()) {
    absl::string_view key(kv.key());
    if (absl::ConsumePrefix(&key, prefix)) out.emplace_back(key);
  }
  return out;
}

}  // namespace coordinator
}  // namespace ps

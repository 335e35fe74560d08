// A client of an etcd v3 cluster, through etcd's JSON gateway (POST http://ENDPOINT/v3/...): the
// key-value calls, transactions and leases the coordinators keep their state and elect their
// leader with (etcd_state_store.h, leader_election.h).
//
// Why the JSON gateway rather than etcd's gRPC API: the gRPC API's protos import gogoproto and
// Google API annotations that no Debian package ships for C++, and writing our own copies of
// its messages with the right field numbers would be copying its protos; the gateway's JSON is
// documented by name, protobuf parses it into our own messages (proto/etcd_gateway.proto), and
// cpp-httplib, already a dependency, carries it. The coordinators make few calls (a lease
// renewal a few times per TTL, a write when the shard map or the members change), so a JSON
// round trip per call costs nothing that matters.
#ifndef PS_SERVER_COORDINATOR_ETCD_CLIENT_H_
#define PS_SERVER_COORDINATOR_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/etcd_gateway.pb.h"

namespace ps {
namespace coordinator {

struct EtcdClientOptions {
  // How long one HTTP request to one endpoint may take, connecting included, before the next
  // endpoint is tried. Default 1 s; must be > 0. A leader renews its lease well within its TTL
  // only if this is well below the TTL (leader_election.h checks).
  absl::Duration request_timeout = absl::Seconds(1);
};

// An EtcdClient talks to the members of one etcd cluster. Thread-safe: calls may run at once
// (each opens its own connection).
//
// A call goes to the endpoint that answered last; when it cannot be reached, does not answer in
// time, or answers that it has no raft leader, the others are tried in order, each once. The
// call's outcome is then:
//  - OK with the answer;
//  - UNAVAILABLE naming every endpoint and what went wrong there, when none answered;
//  - the gateway's own error otherwise (its gRPC code: INVALID_ARGUMENT for a request etcd
//    refused, NOT_FOUND for a lease it does not know, ...), with etcd's message;
//  - INTERNAL when an answer does not parse.
class EtcdClient {
 public:
  // `endpoints`: comma-separated host:port or http://host:port. INVALID_ARGUMENT for an empty
  // list, an https:// endpoint (TLS to etcd is not supported yet) or a bad host:port, naming it.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(absl::string_view endpoints,
                                                            EtcdClientOptions options = {});

  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // The endpoints, as host:port, in the order given.
  const std::vector<std::string>& endpoints() const { return endpoints_; }

  // The keys in [key, range_end), or `key` alone when range_end is empty. A linearizable read.
  absl::StatusOr<etcd::RangeResponse> Range(absl::string_view key,
                                            absl::string_view range_end = "");
  // Every key starting with `prefix`.
  absl::StatusOr<etcd::RangeResponse> RangePrefix(absl::string_view prefix);

  // A transaction (see etcd_gateway.proto). Counted as a write when it holds a put or a delete.
  // `timeout`, when longer than options' request_timeout: the time the call may take in all,
  // endpoints tried included (a write that must not fail because etcd is slow to sync it, nor
  // hold its caller longer than this).
  absl::StatusOr<etcd::TxnResponse> Txn(const etcd::TxnRequest& request,
                                        absl::Duration timeout = absl::ZeroDuration());

  // A lease of `ttl_s` seconds (etcd may grant a longer one: the answer's TTL).
  absl::StatusOr<etcd::LeaseGrantResponse> LeaseGrant(int64_t ttl_s);
  // Renews lease `id`: its TTL from now, in seconds. NOT_FOUND when the lease has expired.
  absl::StatusOr<int64_t> LeaseKeepAlive(int64_t id);
  // Ends lease `id` and deletes its keys. NOT_FOUND when it had already expired.
  absl::Status LeaseRevoke(int64_t id);

  // One endpoint's answer to a status request, asked of that endpoint alone.
  struct EndpointHealth {
    std::string endpoint;
    bool healthy = false;
    double latency_ms = 0;
    std::string error;
    bool is_raft_leader = false;
    // The member's raft index: every write the cluster committed counts one.
    uint64_t raft_index = 0;
  };
  // Asks every endpoint, one after the other, with `timeout` each.
  std::vector<EndpointHealth> CheckEndpoints(absl::Duration timeout);

  // Requests sent (each endpoint tried counts), and of the calls, the writes (transactions
  // holding a put or a delete, lease grants and revocations; not renewals).
  int64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  int64_t writes() const { return writes_.load(std::memory_order_relaxed); }
  // The latest successful call's round trip.
  absl::Duration last_latency() const;

  // "end" of the keys starting with `prefix`: the prefix with its last byte incremented (an
  // all-0xff prefix: "\0", every key from prefix on).
  static std::string PrefixEnd(absl::string_view prefix);

 private:
  EtcdClient(std::vector<std::string> endpoints, EtcdClientOptions options)
      : endpoints_(std::move(endpoints)), options_(options) {}

  // POSTs `body` to `path` on the endpoints as described above; the answer's body.
  absl::StatusOr<std::string> Post(absl::string_view path, const std::string& body,
                                   absl::Duration timeout = absl::ZeroDuration());
  // One POST to one endpoint: the body, or the failure (`retry_elsewhere` says whether another
  // endpoint may do better).
  absl::StatusOr<std::string> PostTo(const std::string& endpoint, absl::string_view path,
                                     const std::string& body, absl::Duration timeout,
                                     bool* retry_elsewhere);

  // Constant after construction.
  const std::vector<std::string> endpoints_;
  const EtcdClientOptions options_;

  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> writes_{0};
  mutable absl::Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration last_latency_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coordinator
}  // namespace ps

#endif  // PS_SERVER_COORDINATOR_ETCD_CLIENT_H_

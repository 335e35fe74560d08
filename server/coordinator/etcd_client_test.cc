#include "server/coordinator/etcd_client.h"

#include <catch2/catch.hpp>

#include "tests/testing/etcd_cluster.h"
#include "tests/testing/ports.h"

namespace ps {
namespace coordinator {
namespace {

etcd::RequestOp Put(const std::string& key, const std::string& value, int64_t lease = 0) {
  etcd::RequestOp op;
  op.mutable_request_put()->set_key(key);
  op.mutable_request_put()->set_value(value);
  op.mutable_request_put()->set_lease(lease);
  return op;
}

// Succeeds iff `key` does not exist, then puts it.
etcd::TxnRequest CreateIfAbsent(const std::string& key, const std::string& value,
                                int64_t lease = 0) {
  etcd::TxnRequest txn;
  etcd::Compare* c = txn.add_compare();
  c->set_key(key);
  c->set_target(etcd::Compare::CREATE);
  c->set_result(etcd::Compare::EQUAL);
  c->set_create_revision(0);
  *txn.add_success() = Put(key, value, lease);
  return txn;
}

TEST_CASE("EtcdClient refuses bad endpoint lists", "[etcd]") {
  CHECK(EtcdClient::Create("").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(EtcdClient::Create("127.0.0.1:1,").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(EtcdClient::Create("nohostport").status().code() == absl::StatusCode::kInvalidArgument);
  absl::Status https = EtcdClient::Create("https://127.0.0.1:2379").status();
  CHECK(https.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(https.message()).find("https") != std::string::npos);
  absl::StatusOr<std::unique_ptr<EtcdClient>> ok =
      EtcdClient::Create("http://127.0.0.1:2379/, 127.0.0.1:2380");
  REQUIRE(ok.ok());
  CHECK((*ok)->endpoints() == std::vector<std::string>{"127.0.0.1:2379", "127.0.0.1:2380"});
  CHECK(EtcdClient::PrefixEnd("ab") == "ac");
  CHECK(EtcdClient::PrefixEnd("a\xff") == "b");
}

TEST_CASE("EtcdClient against a real etcd: keys, transactions, leases", "[etcd]") {
  absl::StatusOr<std::unique_ptr<testing::EtcdCluster>> cluster = testing::EtcdCluster::Start(1);
  REQUIRE(cluster.ok());
  // The first endpoint refuses connections: calls go on to the next one.
  testing::RefusingPort refusing;
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Create(refusing.address() + "," + (*cluster)->endpoints());
  REQUIRE(client.ok());
  EtcdClient& etcd = **client;

  SECTION("a key created once, read back, by prefix") {
    absl::StatusOr<etcd::TxnResponse> first = etcd.Txn(CreateIfAbsent("/t/a", "one"));
    REQUIRE(first.ok());
    CHECK(first->succeeded());
    absl::StatusOr<etcd::TxnResponse> second = etcd.Txn(CreateIfAbsent("/t/a", "two"));
    REQUIRE(second.ok());
    CHECK_FALSE(second->succeeded());
    REQUIRE(etcd.Txn(CreateIfAbsent("/t/b", std::string("\0\xff", 2))).ok());
    REQUIRE(etcd.Txn(CreateIfAbsent("/u", "other")).ok());
    absl::StatusOr<etcd::RangeResponse> range = etcd.RangePrefix("/t/");
    REQUIRE(range.ok());
    REQUIRE(range->kvs_size() == 2);
    CHECK(range->kvs(0).key() == "/t/a");
    CHECK(range->kvs(0).value() == "one");
    CHECK(range->kvs(1).value() == std::string("\0\xff", 2));
    CHECK(range->kvs(0).create_revision() > 0);
    absl::StatusOr<etcd::RangeResponse> missing = etcd.Range("/nothing");
    REQUIRE(missing.ok());
    CHECK(missing->kvs_size() == 0);
    CHECK(etcd.writes() == 4);
    CHECK(etcd.requests() >= 6);
  }

  SECTION("a lease: keys die with it, renewals, revocation") {
    absl::StatusOr<etcd::LeaseGrantResponse> lease = etcd.LeaseGrant(1);
    REQUIRE(lease.ok());
    CHECK(lease->ttl() >= 1);
    REQUIRE(etcd.Txn(CreateIfAbsent("/l/k", "v", lease->id())).ok());
    absl::StatusOr<int64_t> ttl = etcd.LeaseKeepAlive(lease->id());
    REQUIRE(ttl.ok());
    CHECK(*ttl >= 1);
    REQUIRE(etcd.LeaseRevoke(lease->id()).ok());
    absl::StatusOr<etcd::RangeResponse> gone = etcd.Range("/l/k");
    REQUIRE(gone.ok());
    CHECK(gone->kvs_size() == 0);
    CHECK(etcd.LeaseKeepAlive(lease->id()).status().code() == absl::StatusCode::kNotFound);
    const absl::Status again = etcd.LeaseRevoke(lease->id());
    INFO(again.ToString());
    CHECK(again.code() == absl::StatusCode::kNotFound);
  }

  SECTION("endpoint health") {
    std::vector<EtcdClient::EndpointHealth> health = etcd.CheckEndpoints(absl::Seconds(1));
    REQUIRE(health.size() == 2);
    CHECK_FALSE(health[0].healthy);
    CHECK_FALSE(health[0].error.empty());
    CHECK(health[1].healthy);
    CHECK(health[1].is_raft_leader);
  }
}

TEST_CASE("EtcdClient: nothing answers", "[etcd]") {
  testing::RefusingPort a, b;
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Create(a.address() + "," + b.address());
  REQUIRE(client.ok());
  absl::Status status = (*client)->Range("/x").status();
  CHECK(status.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(status.message()).find(a.address()) != std::string::npos);
  CHECK(std::string(status.message()).find(b.address()) != std::string::npos);
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

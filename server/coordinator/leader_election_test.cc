#include "server/coordinator/leader_election.h"

#include <catch2/catch.hpp>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/coordinator/etcd_client.h"
#include "server/coordinator/etcd_state_store.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/eventually.h"

namespace ps {
namespace coordinator {
namespace {

std::unique_ptr<LeaderElection> Candidate(EtcdClient* etcd, const std::string& address) {
  LeaderElectionOptions options;
  options.prefix = "/ps/election/";
  options.address = address;
  options.lease_ttl_s = 1;  // the test cluster's etcd grants 1 s leases
  absl::StatusOr<std::unique_ptr<LeaderElection>> e = LeaderElection::Create(etcd, options);
  REQUIRE(e.ok());
  return *std::move(e);
}

TEST_CASE("leader election: options are checked", "[election]") {
  absl::StatusOr<std::unique_ptr<EtcdClient>> etcd = EtcdClient::Create("127.0.0.1:1");
  REQUIRE(etcd.ok());
  LeaderElectionOptions options;
  options.address = "a:1";
  options.prefix = "/no-slash";
  CHECK(LeaderElection::Create(etcd->get(), options).status().code() ==
        absl::StatusCode::kInvalidArgument);
  options.prefix = "/p/";
  options.lease_ttl_s = 0;
  CHECK(LeaderElection::Create(etcd->get(), options).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("leader election: one leads, the other takes over when its lease ends", "[election]") {
  absl::StatusOr<std::unique_ptr<testing::EtcdCluster>> cluster = testing::EtcdCluster::Start(1);
  REQUIRE(cluster.ok());
  absl::StatusOr<std::unique_ptr<EtcdClient>> etcd = EtcdClient::Create((*cluster)->endpoints());
  REQUIRE(etcd.ok());

  std::unique_ptr<LeaderElection> a = Candidate(etcd->get(), "a:1");
  absl::StatusOr<LeaderElection::Term> a_term = a->Campaign();
  REQUIRE(a_term.ok());
  CHECK(a_term->number == 1);
  CHECK(a->CheckLeading().ok());
  CHECK(a->leader() == "a:1");

  std::unique_ptr<LeaderElection> b = Candidate(etcd->get(), "b:2");
  absl::StatusOr<LeaderElection::Term> b_term;
  absl::Notification b_leads;
  std::thread campaign([&] {
    b_term = b->Campaign();
    b_leads.Notify();
  });
  // B stands by, knowing who leads, and says so.
  REQUIRE(testing::Eventually([&] { return b->leader() == "a:1"; }, absl::Seconds(10)));
  const absl::Status standby = b->CheckLeading();
  CHECK(absl::IsUnavailable(standby));
  CHECK(std::string(standby.message()) == "coordinator b:2 is a standby; the leader is a:1");
  absl::StatusOr<std::vector<std::string>> candidates = a->Candidates();
  REQUIRE(candidates.ok());
  CHECK(*candidates == std::vector<std::string>{"a:1", "b:2"});

  EtcdStateStore a_store(etcd->get(), "/ps/election/", "/ps/election/leader",
                         a_term->leader_revision);
  rpc::CoordinatorState state;
  state.set_next_member_id(7);
  REQUIRE(a_store.SaveState(state).ok());

  SECTION("A stops renewing (as if paused or cut off): it stops leading, then B leads") {
    const absl::Time stopped = absl::Now();
    a->Stop();
    REQUIRE(b_leads.WaitForNotificationWithTimeout(absl::Seconds(10)));
    const absl::Duration takeover = absl::Now() - stopped;
    // Never two leaders: A counted itself out before B could be in.
    CHECK_FALSE(a->CheckLeading().ok());
    REQUIRE(b_term.ok());
    CHECK(b_term->number == 2);
    CHECK(b->CheckLeading().ok());
    CHECK(takeover < absl::Seconds(3));
    // A's writes are refused; B's go through and B reads what A wrote.
    state.set_next_member_id(9);
    const absl::Status refused = a_store.SaveState(state);
    CHECK(refused.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(refused.message()).find("no longer leader") != std::string::npos);
    EtcdStateStore b_store(etcd->get(), "/ps/election/", "/ps/election/leader",
                           b_term->leader_revision);
    absl::StatusOr<std::optional<SavedCoordinator>> loaded = b_store.Load();
    REQUIRE(loaded.ok());
    REQUIRE(loaded->has_value());
    CHECK((*loaded)->state.next_member_id() == 7);
    CHECK(b_store.SaveState(state).ok());
  }

  SECTION("A resigns: B leads at once") {
    const absl::Time resigned = absl::Now();
    a->Resign(absl::CancelledError("test"));
    CHECK_FALSE(a->CheckLeading().ok());
    REQUIRE(b_leads.WaitForNotificationWithTimeout(absl::Seconds(10)));
    CHECK(absl::Now() - resigned < absl::Seconds(1));
    REQUIRE(b_term.ok());
    CHECK(a_store.SaveState(state).code() == absl::StatusCode::kFailedPrecondition);
  }
  b->Stop();
  campaign.join();
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

#include "server/coordinator/membership.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "catch2/catch.hpp"

namespace ps {
namespace coordinator {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000'000);
constexpr absl::Duration kDeadAfter = absl::Seconds(3);

uint32_t Join(Membership& m, rpc::Role role, const std::string& address = "", int32_t rank = -1,
              absl::Time now = kStart) {
  absl::StatusOr<Membership::Registration> r = m.Register(role, address, rank, now);
  REQUIRE(r.ok());
  return r->member.member_id;
}

TEST_CASE("membership: what may register", "[membership]") {
  CHECK(Membership::CheckRegistration(rpc::ROLE_UNSPECIFIED, "").code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(Membership::CheckRegistration(rpc::SERVER, "").code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(Membership::CheckRegistration(rpc::WORKER, "").ok());
  CHECK(Membership::CheckRegistration(rpc::SERVER, "10.0.0.1:7000").ok());
  CHECK(Membership::CheckRegistration(rpc::SERVER, "[::1]:7000").ok());
  for (const char* bad : {"10.0.0.1", ":7000", "h:0", "h:65536", "::1:7000", "h :1", "h:+1"}) {
    INFO(bad);
    CHECK(Membership::CheckRegistration(rpc::SERVER, bad).code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("membership: servers take slots by address; a known address is a restart",
          "[membership]") {
  Membership m(2, 1, 1, 0, kDeadAfter);
  const uint32_t first = Join(m, rpc::SERVER, "a:1");
  Join(m, rpc::SERVER, "b:1");
  CHECK(m.servers_registered() == 2);
  CHECK(m.Register(rpc::SERVER, "c:1", -1, kStart).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Membership::Registration> again = m.Register(rpc::SERVER, "a:1", -1, kStart);
  REQUIRE(again.ok());
  CHECK(again->restarted_alive);
  CHECK(again->member.rank == 0);
  CHECK(again->member.member_id == 3);
  CHECK(m.Find(first) == nullptr);  // replaced
  CHECK(m.next_member_id() == 4);
  CHECK(m.LiveServerAddress(0) == std::optional<std::string>("a:1"));
  CHECK_FALSE(m.LiveServerAddress(2).has_value());
}

TEST_CASE("membership: worker ranks", "[membership]") {
  Membership m(1, 2, 5, 0, kDeadAfter);
  CHECK(m.Register(rpc::WORKER, "", 2, kStart).status().code() ==
        absl::StatusCode::kInvalidArgument);
  const uint32_t w1 = Join(m, rpc::WORKER, "", 1);
  CHECK(w1 == 5);  // ids start where they were told to
  CHECK(m.Register(rpc::WORKER, "", 1, kStart).status().code() == absl::StatusCode::kAlreadyExists);
  absl::StatusOr<Membership::Registration> w0 = m.Register(rpc::WORKER, "", -1, kStart);
  REQUIRE(w0.ok());
  CHECK(w0->member.rank == 0);
  CHECK(m.Register(rpc::WORKER, "", -1, kStart).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  // Rank 1's worker dies: its rank, with its clock, goes to the next worker.
  REQUIRE(m.ReportClock(w1, 4, kStart).ok());
  REQUIRE(m.Touch(m.Find(w0->member.member_id), kStart + kDeadAfter) == false);
  m.Sweep(kStart + kDeadAfter, [](const Membership::Member&) {});
  absl::StatusOr<Membership::Registration> again =
      m.Register(rpc::WORKER, "", -1, kStart + kDeadAfter);
  REQUIRE(again.ok());
  CHECK(again->member.rank == 1);
  rpc::ClusterStatus status;
  m.FillStatus(kStart + kDeadAfter, &status);
  bool seen = false;
  for (const rpc::MemberStatus& s : status.members()) {
    if (s.member_id() == again->member.member_id) {
      seen = true;
      CHECK(s.clock() == 4);
    }
  }
  CHECK(seen);
}

TEST_CASE("membership: clocks", "[membership]") {
  Membership m(1, 2, 1, /*start_step=*/3, kDeadAfter);
  const uint32_t server = Join(m, rpc::SERVER, "a:1");
  const uint32_t w0 = Join(m, rpc::WORKER);
  CHECK(m.Clocks().min_clock() == -1);  // rank 1 never registered
  CHECK(m.Clocks().max_clock() == 2);   // every rank finished the steps before 3
  const uint32_t w1 = Join(m, rpc::WORKER);
  CHECK(m.Clocks().min_clock() == 2);
  CHECK(m.ReportClock(99, 1, kStart).status().code() == absl::StatusCode::kNotFound);
  CHECK(m.ReportClock(server, 1, kStart).status().code() == absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Membership::ClockReport> report = m.ReportClock(w1, 5, kStart);
  REQUIRE(report.ok());
  CHECK(report->rank == 1);
  CHECK(report->advanced);
  report = m.ReportClock(w1, 4, kStart);
  REQUIRE(report.ok());
  CHECK_FALSE(report->advanced);  // a clock never goes back
  CHECK(m.Clocks().max_clock() == 5);
  REQUIRE(m.ReportClock(w0, 5, kStart).ok());
  CHECK(m.Clocks().min_clock() == 5);
  const absl::Status late = m.ClockNotReached(7);
  CHECK(late.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_THAT(std::string(late.message()), Catch::Contains("2 of 2 workers registered"));
}

TEST_CASE("membership: the sweep finds silent members, servers first told", "[membership]") {
  Membership m(2, 1, 1, 0, kDeadAfter);
  Join(m, rpc::SERVER, "a:1");
  const uint32_t b = Join(m, rpc::SERVER, "b:1");
  const uint32_t worker = Join(m, rpc::WORKER);
  const absl::Time later = kStart + kDeadAfter;
  m.Touch(m.Find(b), later - absl::Seconds(1));
  std::vector<int32_t> died;
  Membership::SweepResult swept =
      m.Sweep(later, [&](const Membership::Member& s) { died.push_back(s.rank); });
  CHECK(swept.any_died);
  CHECK(swept.server_died);
  CHECK(died == std::vector<int32_t>{0});
  CHECK(swept.silent_workers == std::vector<uint32_t>{worker});
  CHECK_FALSE(m.ServerAlive(0));
  CHECK(m.ServerAlive(1));
  REQUIRE(m.Servers().size() == 2);
  CHECK_FALSE(m.Servers()[0].alive);
  // A server declared dead is found dead by the next sweep.
  CHECK(m.Expire(1, later));
  CHECK_FALSE(m.Expire(0, later));
  swept = m.Sweep(later, [&](const Membership::Member& s) { died.push_back(s.rank); });
  CHECK(died == std::vector<int32_t>{0, 1});
  CHECK(m.Touch(m.Find(b), later));  // back
}

TEST_CASE("membership: a silent worker fails the job at once", "[membership]") {
  Membership m(1, 2, 1, 0, kDeadAfter);
  const uint32_t w0 = Join(m, rpc::WORKER);
  Join(m, rpc::WORKER);
  const absl::Time later = kStart + kDeadAfter;
  m.Touch(m.Find(w0), later);
  const Membership::SweepResult swept = m.Sweep(later, [](const Membership::Member&) {});
  REQUIRE(swept.silent_workers.size() == 1);
  m.WorkersSilent(swept.silent_workers, later);
  REQUIRE(m.failure().has_value());
  CHECK(m.failure()->rank() == 1);
  CHECK_THAT(m.failure()->reason(), Catch::Contains("heartbeats stopped"));
  CHECK(m.TakeNewFailure().has_value());
  CHECK_FALSE(m.TakeNewFailure().has_value());  // once
  CHECK_FALSE(m.AllTold());                     // worker 0 is alive and was not told
  m.Find(w0)->told = true;
  CHECK(m.AllTold());
}

TEST_CASE("membership: a reported failure waits for the other workers to be heard from",
          "[membership]") {
  Membership m(1, 2, 1, 0, kDeadAfter);
  const uint32_t server = Join(m, rpc::SERVER, "a:1");
  const uint32_t w0 = Join(m, rpc::WORKER);
  const uint32_t w1 = Join(m, rpc::WORKER);
  CHECK(m.ReportFailure(99, "x", kStart).code() == absl::StatusCode::kNotFound);
  CHECK(m.ReportFailure(server, "x", kStart).code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(m.ReportFailure(w0, "CUDA error", kStart + absl::Seconds(1)).ok());
  CHECK_FALSE(m.failure().has_value());  // worker 1 may be the silent cause
  REQUIRE(m.ReportFailure(w0, "again", kStart + absl::Seconds(1)).ok());
  m.Touch(m.Find(w1), kStart + absl::Seconds(2));
  m.MaybeFailJob();
  REQUIRE(m.failure().has_value());
  CHECK(m.failure()->reason() == "CUDA error");
  CHECK(m.failure()->member_id() == w0);
}

TEST_CASE("membership: leaving", "[membership]") {
  Membership m(1, 1, 1, 0, kDeadAfter);
  const uint32_t server = Join(m, rpc::SERVER, "a:1");
  const uint32_t worker = Join(m, rpc::WORKER);
  CHECK(m.Leave(99).status().code() == absl::StatusCode::kNotFound);
  CHECK(*m.Leave(server) == false);
  CHECK(*m.Leave(worker) == true);
  CHECK(*m.Leave(worker) == false);
  // A worker that left falls silent without failing the job.
  const Membership::SweepResult swept =
      m.Sweep(kStart + kDeadAfter, [](const Membership::Member&) {});
  CHECK(swept.silent_workers.empty());
}

TEST_CASE("membership: saved and taken up", "[membership]") {
  Membership m(2, 2, 3, 0, kDeadAfter);
  Join(m, rpc::SERVER, "a:1");
  const uint32_t worker = Join(m, rpc::WORKER, "", 1);
  REQUIRE(*m.Leave(worker));
  Join(m, rpc::CLIENT);
  rpc::CoordinatorState state;
  m.SaveTo(&state);
  CHECK(state.first_member_id() == 3);
  CHECK(state.next_member_id() == 6);

  Membership restarted(2, 2, 1, 0, kDeadAfter);
  const absl::Time now = kStart + absl::Hours(1);
  restarted.TakeUp(state, {{1, 8}}, now);
  CHECK(restarted.first_member_id() == 3);
  CHECK(restarted.next_member_id() == 6);
  CHECK(restarted.size() == 3);
  CHECK(restarted.servers_registered() == 1);
  CHECK(restarted.LiveServerAddress(0) == std::optional<std::string>("a:1"));
  REQUIRE(restarted.Find(worker) != nullptr);
  CHECK(restarted.Find(worker)->left);
  CHECK(restarted.Find(worker)->last_seen == now);
  CHECK(restarted.Clocks().max_clock() == 8);
  CHECK(restarted.ids().first_member_id() == 3);
  CHECK(restarted.ids().next_member_id() == 6);
}

// Regression: a coordinator restarted on a busy machine read its state, took seconds to start
// listening, and found its workers silent before they could reach it, failing the job.
TEST_CASE("membership: members taken up are judged from StartJudging, not from TakeUp",
          "[membership]") {
  Membership m(1, 1, 1, 0, kDeadAfter);
  const uint32_t server = Join(m, rpc::SERVER, "a:1");
  const uint32_t worker = Join(m, rpc::WORKER, "", 0);
  rpc::CoordinatorState state;
  m.SaveTo(&state);

  Membership restarted(1, 1, 1, 0, kDeadAfter);
  restarted.TakeUp(state, {}, kStart);
  // Long after TakeUp, before it listens: nobody is found silent.
  const absl::Time listening = kStart + 10 * kDeadAfter;
  Membership::SweepResult swept = restarted.Sweep(listening, [](const Membership::Member&) {
    FAIL("no server may be failed over before the coordinator listens");
  });
  CHECK_FALSE(swept.any_died);
  CHECK(restarted.Find(worker)->alive);

  restarted.StartJudging(listening);
  CHECK(restarted.Find(server)->last_seen == listening);
  swept = restarted.Sweep(listening + kDeadAfter - absl::Milliseconds(1),
                          [](const Membership::Member&) {});
  CHECK_FALSE(swept.any_died);
  // From then on, as always: silent for dead_after is dead.
  std::vector<int32_t> died;
  swept = restarted.Sweep(listening + kDeadAfter,
                          [&](const Membership::Member& s) { died.push_back(s.rank); });
  CHECK(swept.any_died);
  CHECK(died == std::vector<int32_t>{0});
  CHECK(swept.silent_workers == std::vector<uint32_t>{worker});
  restarted.StartJudging(listening + kDeadAfter);  // again: nothing changes
  CHECK_FALSE(restarted.Find(worker)->alive);
}

}  // namespace
}  // namespace coordinator
}  // namespace ps

#include "tests/testing/daemon.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <cerrno>

#include "absl/strings/match.h"

namespace ps {
namespace testing {
namespace {

constexpr char kFake[] = "tests/testing/fake_daemon";

// Whether a process with this pid exists (ours are reaped, so a gone child is gone).
bool Exists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST_CASE("a daemon reports its port and stops on SIGTERM", "[daemon]") {
  auto daemon = Daemon::Start(kFake, {"--listen=127.0.0.1:4321"});
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  CHECK((*daemon)->port() == 4321);
  CHECK((*daemon)->address() == "127.0.0.1:4321");
  CHECK((*daemon)->pid() > 0);
  CHECK(absl::StrContains((*daemon)->ReadLog(), "fake_daemon listening"));
  CHECK((*daemon)->Terminate(absl::Seconds(10)).ok());
  CHECK_FALSE(Exists((*daemon)->pid()));
  CHECK((*daemon)->Terminate(absl::Seconds(1)).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a daemon that exits early fails Start with its log", "[daemon]") {
  const auto daemon = Daemon::Start(kFake, {"--mode=exit", "--exit_code=7"});
  CHECK(daemon.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(daemon.status().message(), "exited with status 7"));
  CHECK(absl::StrContains(daemon.status().message(), "failing on purpose"));
}

TEST_CASE("a missing binary fails Start", "[daemon]") {
  const auto daemon = Daemon::Start("tests/testing/no_such_binary", {});
  CHECK(daemon.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(daemon.status().message(), "cannot exec"));
}

TEST_CASE("a daemon that reports no port is killed at the deadline", "[daemon]") {
  const absl::Time start = absl::Now();
  const auto daemon = Daemon::Start(kFake, {"--mode=no_port"}, absl::Milliseconds(200));
  CHECK(daemon.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::Now() - start < absl::Seconds(10));
}

TEST_CASE("Terminate reports a bad exit and kills a daemon that ignores SIGTERM", "[daemon]") {
  SECTION("bad exit") {
    auto daemon = Daemon::Start(kFake, {"--mode=fail_term"});
    REQUIRE(daemon.ok());
    const absl::Status s = (*daemon)->Terminate(absl::Seconds(10));
    CHECK(s.code() == absl::StatusCode::kInternal);
    CHECK(absl::StrContains(s.message(), "exited with status 3"));
  }
  SECTION("ignored SIGTERM") {
    auto daemon = Daemon::Start(kFake, {"--mode=ignore_term"});
    REQUIRE(daemon.ok());
    const pid_t pid = (*daemon)->pid();
    CHECK((*daemon)->Terminate(absl::Milliseconds(200)).code() ==
          absl::StatusCode::kDeadlineExceeded);
    CHECK_FALSE(Exists(pid));
  }
}

TEST_CASE("Kill and the destructor end a daemon", "[daemon]") {
  auto a = Daemon::Start(kFake, {"--mode=ignore_term"});
  auto b = Daemon::Start(kFake, {"--mode=ignore_term"});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const pid_t pid_a = (*a)->pid();
  const pid_t pid_b = (*b)->pid();
  (*a)->Kill();
  (*a)->Kill();  // idempotent
  CHECK_FALSE(Exists(pid_a));
  b->reset();
  CHECK_FALSE(Exists(pid_b));
}

TEST_CASE("RunProcess captures exit status, stdout and stderr apart", "[daemon]") {
  const auto result = RunProcess(kFake, {"--mode=exit", "--exit_code=5"});
  REQUIRE(result.ok());
  CHECK(result->exit_code == 5);
  CHECK(result->stdout_text.empty());
  CHECK(result->stderr_text == "fake_daemon: failing on purpose\n");
  const auto hung = RunProcess(kFake, {"--mode=no_port"}, absl::Milliseconds(100));
  CHECK(hung.status().code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("Launch starts a child without a port; Wait gives its exit status", "[daemon]") {
  auto child = Daemon::Launch(kFake, {"--mode=exit", "--exit_code=6"});
  REQUIRE(child.ok());
  CHECK((*child)->port() == 0);
  const absl::StatusOr<int> status = (*child)->Wait(absl::Seconds(10));
  REQUIRE(status.ok());
  CHECK(*status == 6);
  CHECK(absl::StrContains((*child)->ReadLog(), "failing on purpose"));
  CHECK((*child)->Wait(absl::Seconds(1)).status().code() == absl::StatusCode::kFailedPrecondition);

  SECTION("a child still running is left running; one killed by a signal gives 128 + it") {
    auto daemon = Daemon::Start(kFake, {"--mode=ignore_term"});
    REQUIRE(daemon.ok());
    CHECK((*daemon)->Wait(absl::Milliseconds(50)).status().code() ==
          absl::StatusCode::kDeadlineExceeded);
    REQUIRE(Exists((*daemon)->pid()));
    kill((*daemon)->pid(), SIGKILL);
    const absl::StatusOr<int> killed = (*daemon)->Wait(absl::Seconds(10));
    REQUIRE(killed.ok());
    CHECK(*killed == 128 + SIGKILL);
  }
}

}  // namespace
}  // namespace testing
}  // namespace ps

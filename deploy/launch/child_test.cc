#include "deploy/launch/child.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ps {
namespace launch {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

TEST_CASE("RunCaptured returns the output and the status", "[child]") {
  absl::StatusOr<Captured> out =
      RunCaptured({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, absl::Seconds(10));
  REQUIRE(out.ok());
  CHECK(out->output == "out\nerr\n");
  CHECK(ExitDescription(out->status) == "exited with status 3");
  CHECK_FALSE(out->timed_out);
  CHECK_FALSE(ExitedCleanly(out->status));
}

TEST_CASE("RunCaptured kills a command at its deadline", "[child]") {
  const absl::Time start = absl::Now();
  absl::StatusOr<Captured> out = RunCaptured({"sleep", "60"}, absl::Milliseconds(200));
  REQUIRE(out.ok());
  CHECK(out->timed_out);
  CHECK(ExitDescription(out->status) == "was killed by signal 9");
  CHECK(absl::Now() - start < absl::Seconds(30));
}

TEST_CASE("a command that does not exist is INTERNAL naming it", "[child]") {
  absl::StatusOr<Captured> out = RunCaptured({"/no/such/program"}, absl::Seconds(5));
  CHECK(out.status().code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(out.status().message()), Catch::Contains("/no/such/program"));
}

TEST_CASE("a child logs its output, sees its stdin end, and can be signalled", "[child]") {
  const std::string log = TempPath("child_test.log");
  std::remove(log.c_str());
  // Echoes its stdin until it ends.
  absl::StatusOr<std::unique_ptr<Child>> cat =
      Child::Start({"/bin/sh", "-c", "echo started; cat; echo stdin ended"}, log);
  REQUIRE(cat.ok());
  CHECK_FALSE((*cat)->Poll().has_value());
  (*cat)->CloseStdin();
  std::optional<int> status = (*cat)->WaitUntil(absl::Now() + absl::Seconds(20));
  REQUIRE(status.has_value());
  CHECK(ExitedCleanly(*status));
  std::ifstream in(log);
  std::ostringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "started\nstdin ended\n");

  absl::StatusOr<std::unique_ptr<Child>> sleeper = Child::Start({"sleep", "60"}, log);
  REQUIRE(sleeper.ok());
  (*sleeper)->Signal(SIGTERM);
  status = (*sleeper)->WaitUntil(absl::Now() + absl::Seconds(20));
  REQUIRE(status.has_value());
  CHECK(ExitDescription(*status) == "was killed by signal 15");
}

}  // namespace
}  // namespace launch
}  // namespace ps

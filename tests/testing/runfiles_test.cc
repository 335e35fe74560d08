#include "tests/testing/runfiles.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "tests/testing/temp_dir.h"

namespace ps {
namespace testing {
namespace {

namespace fs = std::filesystem;

TEST_CASE("SelfPath is argv0 beside its runfiles, else this process's binary", "[runfiles]") {
  auto dir = ScopedTempDir::Create("runfiles_test");
  REQUIRE(dir.ok());
  const std::string argv0 = (*dir)->path() + "/bench";
  CHECK(SelfPath(argv0.c_str()) == fs::read_symlink("/proc/self/exe").string());
  fs::create_directory(argv0 + ".runfiles");
  CHECK(SelfPath(argv0.c_str()) == argv0);
}

TEST_CASE(
    "RunfilesRoot, FindBinDir and FindWorkspaceFile look in the runfiles when they hold the "
    "probe",
    "[runfiles]") {
  auto dir = ScopedTempDir::Create("runfiles_test");
  REQUIRE(dir.ok());
  const std::string self = (*dir)->path() + "/bench";
  const std::string root = self + ".runfiles/ps";
  CHECK(RunfilesRoot(self, "worker/ps_worker").empty());
  CHECK(FindBinDir("", self, "worker/ps_worker", "bazel-bin") == "bazel-bin");
  CHECK(FindWorkspaceFile("", self, "worker/ps_worker", "deploy/jobs/quickstart.pbtxt") ==
        "deploy/jobs/quickstart.pbtxt");

  fs::create_directories(root + "/worker");
  const std::string worker = root + "/worker/ps_worker";
  std::ofstream(worker) << "#!/bin/sh\n";
  CHECK(RunfilesRoot(self, "worker/ps_worker").empty());  // not executable
  REQUIRE(chmod(worker.c_str(), 0755) == 0);
  CHECK(RunfilesRoot(self, "worker/ps_worker") == root);
  CHECK(RunfilesRoot(self, "server/ps_server").empty());
  CHECK(FindBinDir("", self, "worker/ps_worker", "bazel-bin") == root);
  CHECK(FindBinDir("/opt/ps", self, "worker/ps_worker", "bazel-bin") == "/opt/ps");
  CHECK(FindWorkspaceFile("", self, "worker/ps_worker", "deploy/jobs/quickstart.pbtxt") ==
        root + "/deploy/jobs/quickstart.pbtxt");
  CHECK(FindWorkspaceFile("my.pbtxt", self, "worker/ps_worker", "deploy/jobs/quickstart.pbtxt") ==
        "my.pbtxt");
}

}  // namespace
}  // namespace testing
}  // namespace ps

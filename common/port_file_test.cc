#include "common/port_file.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

namespace ps {
namespace {

std::string TempDir() {
  char pattern[] = "/tmp/port_file_test.XXXXXX";
  REQUIRE(mkdtemp(pattern) != nullptr);
  return pattern;
}

TEST_CASE("WritePortFile writes the port and a newline, replacing an older file", "[port_file]") {
  const std::string dir = TempDir();
  const std::string path = dir + "/port";
  REQUIRE(WritePortFile(path, 1234).ok());
  REQUIRE(WritePortFile(path, 50051).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "50051\n");
  CHECK(unlink(path.c_str()) == 0);
  CHECK(rmdir(dir.c_str()) == 0);  // no temporary file was left beside it
}

TEST_CASE("WritePortFile into a missing folder is FAILED_PRECONDITION naming the file",
          "[port_file]") {
  const absl::Status status = WritePortFile("/nonexistent-folder/port", 1);
  CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(status.message()).find("/nonexistent-folder/port") != std::string::npos);
}

}  // namespace
}  // namespace ps

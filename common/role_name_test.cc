#include "common/role_name.h"

#include <string>

#include "catch2/catch.hpp"

namespace ps {
namespace {

TEST_CASE("RoleName names every role, and no role", "[role_name]") {
  CHECK(std::string(RoleName(rpc::SERVER)) == "server");
  CHECK(std::string(RoleName(rpc::WORKER)) == "worker");
  CHECK(std::string(RoleName(rpc::CLIENT)) == "client");
  CHECK(std::string(RoleName(rpc::ROLE_UNSPECIFIED)) == "unspecified");
  CHECK(std::string(RoleName(static_cast<rpc::Role>(99))) == "unspecified");
}

}  // namespace
}  // namespace ps

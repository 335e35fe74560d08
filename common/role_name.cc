#include "common/role_name.h"

namespace ps {

const char* RoleName(rpc::Role role) {
  switch (role) {
    case rpc::SERVER:
      return "server";
    case rpc::WORKER:
      return "worker";
    case rpc::CLIENT:
      return "client";
    default:
      return "unspecified";
  }
}

}  // namespace ps

// How a member's role (rpc::Role) reads in messages and tables.
#ifndef PS_COMMON_ROLE_NAME_H_
#define PS_COMMON_ROLE_NAME_H_

#include "proto/coordinator.pb.h"

namespace ps {

// "server", "worker" or "client"; "unspecified" for ROLE_UNSPECIFIED or a value this build does
// not know. The string lives for the whole process.
const char* RoleName(rpc::Role role);

}  // namespace ps

#endif  // PS_COMMON_ROLE_NAME_H_

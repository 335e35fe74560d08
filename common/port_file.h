// The file through which a daemon tells its launcher which port it bound (the launchers and the
// tests start daemons on port 0).
#ifndef PS_COMMON_PORT_FILE_H_
#define PS_COMMON_PORT_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace ps {

// Writes `port` and a newline to `path` through a temporary file beside it and a rename, so a
// reader never sees half of it. FAILED_PRECONDITION naming the file and the system's reason when
// it cannot be created, written or renamed (nothing is left behind then).
absl::Status WritePortFile(const std::string& path, int port);

}  // namespace ps

#endif  // PS_COMMON_PORT_FILE_H_

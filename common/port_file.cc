#include "common/port_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  const std::string text = absl::StrCat(port, "\n");
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int write_errno = errno;
  if (close(fd) != 0 || !written) {
    const int close_errno = errno;
    unlink(tmp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", tmp, ": ", std::strerror(written ? close_errno : write_errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    unlink(tmp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(rename_errno)));
  }
  return absl::OkStatus();
}

}  // namespace ps

#include "client/internal/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/shared_region_layout.h"

namespace ps {
namespace client_internal {

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Map(
    const rpc::OpenSharedRegionResponse& lent) {
  if (lent.header_bytes() != kSharedRegionHeaderBytes || lent.slots() == 0 ||
      lent.slot_bytes() == 0 || lent.slot_bytes() % 4096 != 0 || lent.secret().size() != 16 ||
      lent.pid() <= 0 || lent.fd() < 0 || lent.slots() > kMaxSharedSlots ||
      lent.slot_bytes() > kMaxSharedSlotBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the server's OpenSharedRegion answer does not describe a region (%d slots of %d bytes "
        "after %d, pid %d, fd %d)",
        lent.slots(), lent.slot_bytes(), lent.header_bytes(), lent.pid(), lent.fd()));
  }
  const std::string path = absl::StrFormat("/proc/%d/fd/%d", lent.pid(), lent.fd());
  const uint64_t bytes = lent.header_bytes() + uint64_t{lent.slots()} * lent.slot_bytes();
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot open the server's shared region %s: %s (a server on another host, in another "
        "pid namespace, or of another user)",
        path, std::strerror(errno)));
  }
  struct stat st;
  const bool sized = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == bytes;
  void* base = sized ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_error = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not the server's shared region of %d bytes%s", path, bytes,
        sized ? absl::StrCat(" (mmap: ", std::strerror(map_error), ")") : std::string()));
  }
  SharedRegionHeader header;
  std::memcpy(&header, base, sizeof(header));
  if (std::memcmp(header.magic, SharedRegionHeader::kMagic, sizeof(header.magic)) != 0 ||
      header.region != lent.region() ||
      std::memcmp(header.secret, lent.secret().data(), sizeof(header.secret)) != 0 ||
      header.slots != lent.slots() || header.slot_bytes != lent.slot_bytes()) {
    munmap(base, bytes);
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not the server's shared region %d (its header differs: a server on another host "
        "or in another pid namespace)",
        path, lent.region()));
  }
  std::unique_ptr<SharedRegion> region(new SharedRegion());
  region->id_ = lent.region();
  region->secret_ = lent.secret();
  region->slots_ = lent.slots();
  region->slot_bytes_ = lent.slot_bytes();
  region->base_ = base;
  region->bytes_ = bytes;
  region->slots_base_ = static_cast<unsigned char*>(base) + lent.header_bytes();
  for (int i = static_cast<int>(lent.slots()) - 1; i >= 0; --i) region->free_.push_back(i);
  return region;
}

SharedRegion::~SharedRegion() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

int SharedRegion::Acquire() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) return -1;
  const int slot = free_.back();
  free_.pop_back();
  return slot;
}

void SharedRegion::Release(int slot) {
  absl::MutexLock lock(&mu_);
  free_.push_back(slot);
}

void SharedRegion::Retire(int /*slot*/) {
  absl::MutexLock lock(&mu_);
  ++retired_;
}

uint32_t SharedRegion::retired() const {
  absl::MutexLock lock(&mu_);
  return retired_;
}

}  // namespace client_internal
}  // namespace ps

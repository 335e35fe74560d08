#include "server/shared_regions.h"

#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace server {
namespace {

constexpr size_t kSecretBytes = sizeof(SharedRegionHeader::secret);

uint64_t RoundUpToPage(uint64_t bytes) {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// Compares in time that depends on the lengths only.
bool SameSecret(absl::string_view a, const unsigned char* b) {
  if (a.size() != kSecretBytes) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<unsigned char>(a[i]) ^ b[i];
  return diff == 0;
}

}  // namespace

struct SharedRegions::Region {
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() {
    if (base != nullptr) munmap(base, bytes);
    if (fd >= 0) close(fd);
  }

  uint64_t id = 0;
  int fd = -1;
  unsigned char* base = nullptr;
  uint64_t bytes = 0;
  uint32_t slots = 0;
  uint64_t slot_bytes = 0;
  unsigned char secret[kSecretBytes] = {};
  absl::Time last_used;  // guarded by SharedRegions::mu_
};

SharedRegions::SharedRegions(Options options) : options_(std::move(options)) {}

SharedRegions::~SharedRegions() = default;

absl::StatusOr<rpc::OpenSharedRegionResponse> SharedRegions::Open(uint32_t slots,
                                                                  uint64_t slot_bytes) {
  if (options_.max_bytes == 0) {
    return absl::FailedPreconditionError(
        "this server lends no shared memory (ps_server --shared_memory_mb=0)");
  }
  if (slots < 1 || slots > kMaxSharedSlots) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a shared region has 1 to %d slots, %d were asked for", kMaxSharedSlots, slots));
  }
  if (slot_bytes < 1 || slot_bytes > kMaxSharedSlotBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a shared slot has 1 to %d bytes, %d were asked for", kMaxSharedSlotBytes, slot_bytes));
  }
  auto region = std::make_shared<Region>();
  region->slots = slots;
  region->slot_bytes = RoundUpToPage(slot_bytes);
  region->bytes = kSharedRegionHeaderBytes + uint64_t{slots} * region->slot_bytes;
  {
    absl::MutexLock lock(&mu_);
    CloseIdleLocked(Now() - options_.idle_timeout);
    if (bytes_ + region->bytes > options_.max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("shared regions would take %d bytes, over this server's %d (ps_server "
                          "--shared_memory_mb); %d regions are lent",
                          bytes_ + region->bytes, options_.max_bytes, regions_.size()));
    }
    region->id = next_id_++;
    // Counted now, so that two opens at once cannot both pass the limit; given back on failure.
    bytes_ += region->bytes;
  }
  auto fail = [&](const char* what) {
    const int error = errno;
    absl::MutexLock lock(&mu_);
    bytes_ -= region->bytes;
    return absl::InternalError(absl::StrFormat("shared region of %d bytes: %s: %s", region->bytes,
                                               what, std::strerror(error)));
  };
  region->fd = memfd_create("ps-shared-region", MFD_CLOEXEC);
  if (region->fd < 0) return fail("memfd_create");
  if (ftruncate(region->fd, static_cast<off_t>(region->bytes)) != 0) return fail("ftruncate");
  void* base = mmap(nullptr, region->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region->fd, 0);
  if (base == MAP_FAILED) return fail("mmap");
  region->base = static_cast<unsigned char*>(base);
  if (getrandom(region->secret, kSecretBytes, 0) != static_cast<ssize_t>(kSecretBytes)) {
    return fail("getrandom");
  }
  SharedRegionHeader header;
  std::memcpy(header.magic, SharedRegionHeader::kMagic, sizeof(header.magic));
  header.region = region->id;
  std::memcpy(header.secret, region->secret, kSecretBytes);
  header.slots = slots;
  header.slot_bytes = region->slot_bytes;
  std::memcpy(region->base, &header, sizeof(header));

  rpc::OpenSharedRegionResponse response;
  response.set_region(region->id);
  response.set_secret(reinterpret_cast<const char*>(region->secret), kSecretBytes);
  response.set_pid(static_cast<int32_t>(getpid()));
  response.set_fd(region->fd);
  response.set_slots(slots);
  response.set_slot_bytes(region->slot_bytes);
  response.set_header_bytes(kSharedRegionHeaderBytes);
  absl::MutexLock lock(&mu_);
  region->last_used = Now();
  regions_[region->id] = std::move(region);
  ++opened_;
  return response;
}

absl::Status SharedRegions::Close(uint64_t id, absl::string_view secret) {
  std::shared_ptr<Region> closed;  // unmapped outside the lock
  absl::MutexLock lock(&mu_);
  const auto it = regions_.find(id);
  if (it == regions_.end()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("shared region %d is not held by this server", id));
  }
  if (!SameSecret(secret, it->second->secret)) {
    return absl::PermissionDeniedError(absl::StrFormat("wrong secret for shared region %d", id));
  }
  closed = std::move(it->second);
  bytes_ -= closed->bytes;
  regions_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<SharedRegions::Slot> SharedRegions::Find(const rpc::SharedSlot& shared) {
  std::shared_ptr<Region> region;
  {
    absl::MutexLock lock(&mu_);
    const auto it = regions_.find(shared.region());
    if (it == regions_.end()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "shared region %d is not held by this server (closed, idle too long, or lent by a "
          "server that restarted): open another",
          shared.region()));
    }
    region = it->second;
    region->last_used = Now();
  }
  if (!SameSecret(shared.secret(), region->secret)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("wrong secret for shared region %d", shared.region()));
  }
  if (shared.slot() >= region->slots) {
    return absl::InvalidArgumentError(absl::StrFormat("slot %d of shared region %d, which has %d",
                                                      shared.slot(), shared.region(),
                                                      region->slots));
  }
  if (shared.keys_bytes() > region->slot_bytes ||
      shared.grads_bytes() > region->slot_bytes - shared.keys_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d bytes of keys and %d of gradients do not fit a shared slot of %d bytes",
                        shared.keys_bytes(), shared.grads_bytes(), region->slot_bytes));
  }
  Slot slot;
  slot.data_ = region->base + kSharedRegionHeaderBytes + shared.slot() * region->slot_bytes;
  slot.size_ = region->slot_bytes;
  slot.region_ = std::move(region);
  return slot;
}

void SharedRegions::CloseIdleLocked(absl::Time before) {
  std::vector<uint64_t> idle;
  for (const auto& [id, region] : regions_) {
    if (region->last_used < before) idle.push_back(id);
  }
  for (const uint64_t id : idle) {
    bytes_ -= regions_[id]->bytes;
    regions_.erase(id);
  }
}

size_t SharedRegions::regions() const {
  absl::MutexLock lock(&mu_);
  return regions_.size();
}

uint64_t SharedRegions::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

uint64_t SharedRegions::opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}

}  // namespace server
}  // namespace ps

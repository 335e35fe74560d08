// A region of shared memory lent as a server lends one (proto/ps.proto rule 9), in the test's own
// process, for the tests of what maps it. Test-only.
#ifndef PS_CLIENT_INTERNAL_LENT_REGION_FOR_TEST_H_
#define PS_CLIENT_INTERNAL_LENT_REGION_FOR_TEST_H_

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "common/futex.h"
#include "common/shared_region_layout.h"
#include "proto/ps.pb.h"

namespace ps {
namespace client_internal {

// A region as a server lends one: a memfd of this process with its header written.
struct Lent {
  explicit Lent(uint32_t slots, uint64_t slot_bytes = 4096) {
    fd = memfd_create("test-region", MFD_CLOEXEC);
    bytes = SharedRegionHeaderBytes(slots) + slots * slot_bytes;
    REQUIRE(ftruncate(fd, static_cast<off_t>(bytes)) == 0);
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(base != MAP_FAILED);
    SharedRegionHeader header;
    std::memcpy(header.magic, SharedRegionHeader::kMagic, sizeof(header.magic));
    header.region = 7;
    for (int i = 0; i < 16; ++i) header.secret[i] = static_cast<unsigned char>(100 + i);
    header.slots = slots;
    header.slot_bytes = slot_bytes;
    std::memcpy(base, &header, sizeof(header));
    response.set_region(7);
    response.set_secret(std::string(reinterpret_cast<const char*>(header.secret), 16));
    response.set_pid(getpid());
    response.set_fd(fd);
    response.set_slots(slots);
    response.set_slot_bytes(slot_bytes);
    response.set_header_bytes(SharedRegionHeaderBytes(slots));
  }
  ~Lent() {
    munmap(base, bytes);
    close(fd);
  }
  unsigned char* slot(uint32_t i) const {
    return static_cast<unsigned char*>(base) + response.header_bytes() + i * response.slot_bytes();
  }

  int fd = -1;
  uint64_t bytes = 0;
  void* base = nullptr;
  rpc::OpenSharedRegionResponse response;
};

// The call page of `slot`.
inline SharedCallPage* PageOf(const Lent& lent, uint32_t slot) {
  return reinterpret_cast<SharedCallPage*>(static_cast<unsigned char*>(lent.base) +
                                           kSharedPageBytes * (1 + slot));
}

// The word at `offset` of the region's header.
inline uint32_t* WordAt(const Lent& lent, size_t offset) {
  return reinterpret_cast<uint32_t*>(static_cast<unsigned char*>(lent.base) + offset);
}

// Plays the server's part for the call in `slot`: takes it, checks it, answers it.
inline void Answer(const Lent& lent, uint32_t slot, absl::StatusCode code, const std::string& data) {
  SharedCallPage* page = PageOf(lent, slot);
  REQUIRE(SwapWord(&page->state, kSharedCallRequested, kSharedCallServing));
  std::memcpy(page->data, data.data(), data.size());
  page->answer_bytes = static_cast<uint32_t>(data.size());
  page->code = static_cast<int32_t>(code);
  StoreWord(&page->state, kSharedCallAnswered);
  RingBell(WordAt(lent, kClientBellOffset));
}

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_LENT_REGION_FOR_TEST_H_

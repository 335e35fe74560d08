// The layout of a shared-memory region a server lends a client on its host (proto/ps.proto,
// rule 9): a header page, then the slots. Both sides read it: the server writes the header
// (server/shared_regions.h), the client checks it after mapping the region
// (client/internal/shared_region.h).
#ifndef PS_COMMON_SHARED_REGION_LAYOUT_H_
#define PS_COMMON_SHARED_REGION_LAYOUT_H_

#include <cstdint>

namespace ps {

// The first bytes of a region.
struct SharedRegionHeader {
  static constexpr char kMagic[8] = {'p', 's', '-', 's', 'h', 'm', '1', '\0'};
  char magic[8];
  // OpenSharedRegionResponse.region and .secret: a client that mapped something else (another
  // host's or another pid namespace's /proc/<pid>/fd/<fd>) sees them differ.
  uint64_t region;
  unsigned char secret[16];
  uint64_t slots;
  uint64_t slot_bytes;
};

// Bytes before the first slot: a page, so that every slot starts on a page.
constexpr uint64_t kSharedRegionHeaderBytes = 4096;

// Limits of one region (OpenSharedRegionRequest).
constexpr uint32_t kMaxSharedSlots = 64;
constexpr uint64_t kMaxSharedSlotBytes = uint64_t{256} << 20;

}  // namespace ps

#endif  // PS_COMMON_SHARED_REGION_LAYOUT_H_

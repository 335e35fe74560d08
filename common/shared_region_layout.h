// The layout of a shared-memory region a server lends a client on its host (proto/ps.proto,
// rules 9 and 10): a header page, one call page per slot, then the slots. Both sides read it:
// the server writes the header (server/shared_regions.h), the client checks it after mapping the
// region (client/internal/shared_region.h).
//
// Calls in the region (rule 10): a client writes a Pull's or Push's message into the call page of
// the slot holding its payload, sets the page's state to kSharedCallRequested and rings the
// server's bell (SharedBell: a futex word in the header page, incremented and woken). The server
// sets the state to kSharedCallServing, copies the message out, serves it, writes the answer
// (status code, and the response message or the error's text) into the same page, sets
// kSharedCallAnswered and rings the client's bell. The client reads the answer and the slot is
// kSharedCallIdle again. Every word both sides touch is read and written with atomic operations.
#ifndef PS_COMMON_SHARED_REGION_LAYOUT_H_
#define PS_COMMON_SHARED_REGION_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace ps {

// The first bytes of a region.
struct SharedRegionHeader {
  static constexpr char kMagic[8] = {'p', 's', '-', 's', 'h', 'm', '2', '\0'};
  char magic[8];
  // OpenSharedRegionResponse.region and .secret: a client that mapped something else (another
  // host's or another pid namespace's /proc/<pid>/fd/<fd>) sees them differ.
  uint64_t region;
  unsigned char secret[16];
  uint64_t slots;
  uint64_t slot_bytes;
};

// The bells, futex words in the header page, each on a cache line of its own.
constexpr size_t kServerBellOffset = 128;  // rung by the client: a call was written
constexpr size_t kClientBellOffset = 192;  // rung by the server: a call was answered
// A word the server sets to 1 (then rings the client's bell) when it stops taking calls in the
// region: closed, idle too long, or the server stopping. A call still kSharedCallRequested then
// will not be taken: the client withdraws it (kSharedCallRequested to kSharedCallIdle, atomically,
// so that the server cannot take it meanwhile); one being served is still answered.
constexpr size_t kClosedOffset = 256;

// Limits of one region (OpenSharedRegionRequest).
constexpr uint32_t kMaxSharedSlots = 64;
constexpr uint64_t kMaxSharedSlotBytes = uint64_t{256} << 20;

constexpr uint64_t kSharedPageBytes = 4096;

// States of a call page.
constexpr uint32_t kSharedCallIdle = 0;       // the client's
constexpr uint32_t kSharedCallRequested = 1;  // written by the client, not yet taken
constexpr uint32_t kSharedCallServing = 2;    // the server's
constexpr uint32_t kSharedCallAnswered = 3;   // the client's again, with the answer

// Methods of a call.
constexpr uint32_t kSharedCallPull = 1;
constexpr uint32_t kSharedCallPush = 2;

// One call page per slot: slot i's is page 1 + i of the region.
struct SharedCallPage {
  uint32_t state;  // the futex word the states above go through
  uint32_t method;
  // The request message's bytes in `data` (client), the answer's (server).
  uint32_t request_bytes;
  uint32_t answer_bytes;
  // The answer's absl::StatusCode; `data` holds the response message when it is 0 (OK), the
  // error's text otherwise.
  int32_t code;
  // The request's keys, written by the client: a hint the server schedules by (a call of many
  // keys is served beside others, a small one at once by the thread that took it).
  uint32_t keys;
  uint32_t reserved[10];
  char data[kSharedPageBytes - 64];
};
static_assert(sizeof(SharedCallPage) == kSharedPageBytes, "a call page is one page");

// Bytes before the first slot: the header page and the call pages, so that every slot starts on a
// page.
constexpr uint64_t SharedRegionHeaderBytes(uint64_t slots) {
  return kSharedPageBytes * (1 + slots);
}

}  // namespace ps

#endif  // PS_COMMON_SHARED_REGION_LAYOUT_H_

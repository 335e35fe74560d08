// A client's side of a shared-memory region lent by a server on its host (proto/ps.proto, rule
// 9): the mapping, checked against what the server said it lent, and its slots, each lent to one
// request at a time. Private to the client library.
#ifndef PS_CLIENT_INTERNAL_SHARED_REGION_H_
#define PS_CLIENT_INTERNAL_SHARED_REGION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps.pb.h"

namespace ps {
namespace client_internal {

// SharedRegion: one mapped region. Thread-safe.
class SharedRegion {
 public:
  // Maps the region `lent` describes (/proc/<pid>/fd/<fd>) and checks its header.
  // FAILED_PRECONDITION, saying why, when it cannot be opened or mapped here (the server is on
  // another host, in another pid namespace, or runs as another user) or its header is not the
  // lent region's; INVALID_ARGUMENT for a response that does not describe a region.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Map(
      const rpc::OpenSharedRegionResponse& lent);

  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  uint64_t id() const { return id_; }
  const std::string& secret() const { return secret_; }
  uint32_t slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  // Slot i's bytes (slot_bytes of them).
  unsigned char* slot(uint32_t i) const { return slots_base_ + uint64_t{i} * slot_bytes_; }

  // A free slot, now the caller's, or -1 when every slot is lent or retired.
  int Acquire();
  // Gives back a slot whose request the server answered.
  void Release(int slot);
  // Takes a slot out for good: its request failed or timed out, and the server may still read or
  // write it.
  void Retire(int slot);
  // Slots taken out for good.
  uint32_t retired() const;

 private:
  SharedRegion() = default;

  uint64_t id_ = 0;
  std::string secret_;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
  void* base_ = nullptr;
  uint64_t bytes_ = 0;
  unsigned char* slots_base_ = nullptr;

  mutable absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
  uint32_t retired_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_SHARED_REGION_H_

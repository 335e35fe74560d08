// A client's side of a shared-memory region lent by a server on its host (proto/ps.proto, rules
// 9 and 10): the mapping, checked against what the server said it lent; its slots, each lent to
// one request at a time; and, when the server serves calls in the region, the calls made in it
// and a thread that waits for their answers. Private to the client library.
#ifndef PS_CLIENT_INTERNAL_SHARED_REGION_H_
#define PS_CLIENT_INTERNAL_SHARED_REGION_H_

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"

namespace ps {
namespace client_internal {

// SharedRegion: one mapped region. Thread-safe.
class SharedRegion {
 public:
  // How a call made in the region ended: `answered` when the server wrote its answer (the status
  // and, when OK, the response message), not when it timed out or the server's process exited.
  using CallDone =
      std::function<void(const absl::Status& status, std::string response, bool answered)>;

  // How often the waiting thread checks that the server's process still runs, while calls are
  // in flight.
  static constexpr absl::Duration kLivenessPeriod = absl::Milliseconds(50);

  // Maps the region `lent` describes (/proc/<pid>/fd/<fd>) and checks its header.
  // FAILED_PRECONDITION, saying why, when it cannot be opened or mapped here (the server is on
  // another host, in another pid namespace, or runs as another user) or its header is not the
  // lent region's; INVALID_ARGUMENT for a response that does not describe a region. With
  // `lent.calls()` and `calls`, starts the thread that waits for the calls' answers.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Map(
      const rpc::OpenSharedRegionResponse& lent, bool calls = true);

  // Ends the waiting thread (no call may be in flight) and unmaps the region.
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  uint64_t id() const { return id_; }
  const std::string& secret() const { return secret_; }
  uint32_t slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  // Slot i's bytes (slot_bytes of them).
  unsigned char* slot(uint32_t i) const { return slots_base_ + uint64_t{i} * slot_bytes_; }
  // Whether calls can be made in the region (rule 10).
  bool calls() const { return calls_ != nullptr; }

  // A free slot, now the caller's, or -1 when every slot is lent or retired.
  int Acquire();
  // Gives back a slot whose request the server answered.
  void Release(int slot);
  // Takes a slot out for good: its request failed or timed out, and the server may still read or
  // write it.
  void Retire(int slot);
  // Slots taken out for good.
  uint32_t retired() const;

  // Makes a call in `slot` (acquired, its payload written): writes `request` into the slot's call
  // page and rings the server's bell. `done` runs once, on the region's thread: with the answer;
  // DEADLINE_EXCEEDED at `deadline`; or UNAVAILABLE, naming the "shared region", when the
  // server's process exited; FAILED_PRECONDITION, naming the "shared region", when the server
  // closed the region before taking the call. False, with nothing done, when the region has no
  // calls, is closed, or `request` does not fit a call page (send it through the channel).
  // With `wait_here`, the calling thread waits for the call to end and runs `done` itself before
  // returning (one wake-up instead of two, for a caller that would block anyway).
  // `keys`: the request's, a hint for the server's scheduling.
  bool Call(int slot, uint32_t method, const google::protobuf::MessageLite& request, uint32_t keys,
            absl::Time deadline, CallDone done, bool wait_here = false);

 private:
  struct Calls;

  SharedRegion() = default;

  uint64_t id_ = 0;
  std::string secret_;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
  unsigned char* slots_base_ = nullptr;
  // The mapping, shared with the waiting thread.
  std::shared_ptr<void> mapping_;
  unsigned char* base_ = nullptr;
  // The calls' state, shared with the waiting thread; null without calls.
  std::shared_ptr<Calls> calls_;
  std::thread waiter_;

  mutable absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
  uint32_t retired_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace client_internal
}  // namespace ps

#endif  // PS_CLIENT_INTERNAL_SHARED_REGION_H_

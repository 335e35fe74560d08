// Shared memory that a server lends to clients on its host for the payloads of Pull and Push
// (proto/ps.proto, rule 9): keys and gradients written by the client, rows written by the
// server, none of it through the sockets.
//
// A region is a memfd of the server process: slots x slot_bytes bytes after one page of header
// (SharedRegionHeader, common/shared_region_layout.h). A client of the server's user on its host
// maps it through /proc/<pid>/fd/<fd>; any other process cannot open it, and a request that names
// a slot must carry the region's 16-byte secret, which only the client that opened it learned
// (over the channel, under TLS when the cluster has it).
//
// The server never trusts what is in a slot: callers copy a request's keys and gradients out
// (Slot::data) before checking them, so a client writing its slot while the server reads it can
// garble only its own request, which the checks then refuse or apply as they would any bytes.
//
// With Options::serve_call set, each region also carries calls (rule 10): a thread of the region
// sleeps on the region's server bell, takes each call a client wrote into a call page (its
// message copied out first) and hands it to serve_call, which answers it (Call::Answer) from
// whichever thread it finishes on. A small call is served by the region's thread itself; one of
// kPoolKeys keys or more by a pool of threads the regions share, so that a client's large
// requests are served side by side, as their RPCs would be.
#ifndef PS_SERVER_SHARED_REGIONS_H_
#define PS_SERVER_SHARED_REGIONS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shared_region_layout.h"
#include "proto/ps.pb.h"

namespace ps {
namespace server {

// SharedRegions: the regions one server has lent. Thread-safe.
class SharedRegions {
  struct Region;

 public:
  class Call;

  struct Options {
    // All regions together, header pages included; 0 lends none.
    uint64_t max_bytes = 0;
    // A region no request named for this long is closed at the next Open.
    absl::Duration idle_timeout = absl::Minutes(10);
    // The clock (tests); absl::Now when empty.
    std::function<absl::Time()> now;
    // Serves the calls made in regions (rule 10); none are served when empty.
    std::function<void(Call)> serve_call;
    // Threads serving the large calls of every region (with serve_call).
    int pool_threads = 2;
    // Told of every call answered: its method, status code and time from being taken (metrics).
    std::function<void(uint32_t method, absl::StatusCode code, absl::Duration took)> on_answered;
  };

  // Calls of this many keys or more (their call page's hint) are served by the pool.
  static constexpr uint32_t kPoolKeys = 4096;

  // A slot of a region, named by a request. The region stays mapped while a Slot of it lives,
  // even if it is closed meanwhile.
  class Slot {
   public:
    Slot() = default;
    // The slot's bytes: slot_bytes of them. Shared with the client: copy what is read.
    unsigned char* data() const { return data_; }
    size_t size() const { return size_; }

   private:
    friend class SharedRegions;
    std::shared_ptr<const void> region_;
    unsigned char* data_ = nullptr;
    size_t size_ = 0;
  };

  // A call made in a region (rule 10), taken from its call page. Answer it once; a Call dropped
  // unanswered answers INTERNAL.
  class Call {
   public:
    Call() = default;
    Call(Call&& other) noexcept { *this = std::move(other); }
    Call& operator=(Call&& other) noexcept;
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    ~Call();

    // kSharedCallPull or kSharedCallPush (anything else: the client wrote garbage).
    uint32_t method() const { return method_; }
    // The request message, copied out of the call page.
    const std::string& request() const { return request_; }
    // The slot whose call page this is (the request's SharedSlot must name it).
    uint32_t slot() const { return slot_; }
    uint64_t region() const;
    // The gRPC peer that opened the region (admission counts the call as that peer's).
    const std::string& peer() const;
    // Writes the answer into the call page (the error's text cut to the page) and rings the
    // client's bell. `response` must fit the page (a Pull's or Push's response without rows).
    void Answer(const absl::Status& status, absl::string_view response);

   private:
    friend class SharedRegions;
    using Hook = std::function<void(uint32_t, absl::StatusCode, absl::Duration)>;

    std::shared_ptr<Region> region_;
    uint32_t slot_ = 0;
    uint32_t method_ = 0;
    std::string request_;
    absl::Time taken_;
    std::shared_ptr<const Hook> on_answered_;
  };

  explicit SharedRegions(Options options);
  // Unmaps and closes every region (a client still mapping one keeps its pages).
  ~SharedRegions();
  SharedRegions(const SharedRegions&) = delete;
  SharedRegions& operator=(const SharedRegions&) = delete;

  // Lends a new region of `slots` slots of `slot_bytes` bytes each (rounded up to whole pages) to
  // `peer`, first closing those idle past the timeout; with serve_call, starts its thread.
  // FAILED_PRECONDITION when this server lends none (max_bytes 0); INVALID_ARGUMENT for slots
  // outside [1, kMaxSharedSlots] or slot_bytes outside [1, kMaxSharedSlotBytes]; RESOURCE_EXHAUSTED
  // when the regions would pass max_bytes; INTERNAL when the kernel refuses the memory.
  absl::StatusOr<rpc::OpenSharedRegionResponse> Open(uint32_t slots, uint64_t slot_bytes,
                                                     absl::string_view peer = "");

  // Closes a region: FAILED_PRECONDITION if it is not held, PERMISSION_DENIED for a wrong secret.
  absl::Status Close(uint64_t region, absl::string_view secret);

  // The slot a request names, checked: FAILED_PRECONDITION for a region not held,
  // PERMISSION_DENIED for a wrong secret, INVALID_ARGUMENT for a slot out of range or
  // keys_bytes + grads_bytes beyond the slot. Marks the region used.
  absl::StatusOr<Slot> Find(const rpc::SharedSlot& shared);

  // Stops taking calls: the regions' threads end (a call being served still gets its answer).
  // Before the server's store goes away; the destructor does it too.
  void StopCalls();

  // Regions held, and their bytes; regions lent since the start (closed ones included).
  size_t regions() const;
  uint64_t bytes() const;
  uint64_t opened() const;
  // The three into `status` (ServerStatus.shared_regions, shared_region_bytes,
  // shared_regions_opened), read together.
  void FillStatus(rpc::ServerStatus* status) const;

 private:
  absl::Time Now() const { return options_.now ? options_.now() : absl::Now(); }
  // Takes out the regions unused since `before`, to be stopped (StopRegion) outside the lock.
  std::vector<std::shared_ptr<Region>> TakeIdleLocked(absl::Time before)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a region's thread, if it has one. Not under mu_ (the thread takes it in Find).
  static void StopRegion(Region* region);
  // The thread of a region with calls.
  void ServeCalls(Region* region);
  // A thread of the pool.
  void ServePool();

  const Options options_;
  // options_.on_answered, shared with the calls (which may be answered after this is gone).
  const std::shared_ptr<const Call::Hook> on_answered_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Region>> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
  bool calls_stopped_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex pool_mu_;
  std::deque<Call> pool_calls_ ABSL_GUARDED_BY(pool_mu_);
  bool pool_stopping_ ABSL_GUARDED_BY(pool_mu_) = false;
  std::vector<std::thread> pool_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_SHARED_REGIONS_H_

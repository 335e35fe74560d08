// The shared-memory AllReduce of a Gloo group whose ranks are all on one host: a POSIX
// shared-memory segment that every rank maps, a slot per rank, a result area and a barrier in it.
// AllReduce::CreateGloo (allreduce.cc) joins one beside its Gloo contexts and hands it the buffers
// it takes.
#ifndef PS_WORKER_COLLECTIVE_INTERNAL_SHM_ALLREDUCE_H_
#define PS_WORKER_COLLECTIVE_INTERNAL_SHM_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/coordinator_client.h"

namespace ps {
namespace worker {
namespace internal {

// What tells whether two processes can share memory through shm_open: this machine's host name,
// its boot (/proc/sys/kernel/random/boot_id) and this process's IPC namespace (readlink of
// /proc/self/ns/ipc), so that containers on one host that cannot share memory differ. When a part
// cannot be read, a value that no other process has (the pid and random bytes): such a process
// never shares. Processes of one host whose /dev/shm differs (another mount namespace) have the
// same identity; ShmAllReduce::Join tells them apart by the segment it cannot find.
std::string HostIdentity();

// A ShmAllReduce is one rank's mapping of the segment that the `size` ranks of a group on one host
// sum float buffers through. Each call: every rank copies (its chunk of) its buffer into its slot;
// a barrier; each rank sums its 1/size part of the chunk over the slots, in rank order, into the
// result area; a barrier; every rank copies the whole result out. So every rank gets bit-identical
// values, each element being ((x_0 + x_1) + x_2) + ... in float. Buffers larger than a slot go
// through in slot-sized chunks, two barriers each (the result area is double-buffered so that a
// chunk's sums never overwrite what a slower rank still copies out of the previous one).
//
// The barrier is a generation counter in the segment: a waiting rank spins on it briefly (when the
// group has no more ranks than this machine has cores), then sleeps on it with a futex, so that a
// peer that is descheduled gets the core.
//
// Collective like AllReduce: every rank calls SumInPlace the same number of times, in the same
// order, with the same element count. Thread-compatible.
class ShmAllReduce {
 public:
  // Joins the shared memory of group `group` (keys "collective/shm/<group>/..." in the
  // coordinator's rendezvous store) as rank `rank` of `size` (>= 2), waiting for the others until
  // `deadline`. Every rank publishes `host_identity`, or "" when `enable` is false (then it and
  // every other rank of the group get nullptr). When every rank published the same non-empty
  // identity, rank 0 creates a segment named after the group and random bytes, with slots of
  // `slot_bytes` (a positive multiple of 64, at most 1 GiB), writes `slot_bytes`, `max_bytes` and
  // the random bytes in its header and publishes its name; every other rank maps it and checks the
  // random bytes; each publishes whether that worked, and rank 0 unlinks the segment once every
  // rank has answered (from then on it lives only as long as the mappings: nothing leaks when a
  // process dies; a rank 0 that dies between creating and unlinking leaves the name in /dev/shm).
  //
  // Returns the mapping when every rank mapped the segment; nullptr when identities differ or any
  // rank could not create, size or map it (all ranks then agree on nullptr: they read the same
  // keys). Every rank adopts rank 0's slot_bytes and max_bytes (max_bytes()). Errors:
  // INVALID_ARGUMENT for size < 2, a rank outside [0, size) or a bad slot_bytes; DEADLINE_EXCEEDED
  // when a rank's keys do not come by `deadline`; UNAVAILABLE and the others of the coordinator's
  // rendezvous store as it returns them.
  static absl::StatusOr<std::unique_ptr<ShmAllReduce>> Join(
      CoordinatorClient* coordinator, const std::string& group, int rank, int size, bool enable,
      const std::string& host_identity, size_t slot_bytes, size_t max_bytes, absl::Time deadline);

  ~ShmAllReduce();

  ShmAllReduce(const ShmAllReduce&) = delete;
  ShmAllReduce& operator=(const ShmAllReduce&) = delete;

  // Replaces every element of `data` by its sum over the ranks, in rank order. OK for an empty span
  // (without waiting for the others). Errors (after which `data` holds unspecified values and the
  // segment's barrier is out of step: the caller must not call again): DEADLINE_EXCEEDED when a
  // peer does not reach a barrier by `deadline` (it died, or does not call); INTERNAL when the
  // ranks' element counts differ (every rank returns it, at the call's first barrier).
  absl::Status SumInPlace(absl::Span<float> data, absl::Time deadline);

  // Rank 0's limits, adopted at Join: the slot size and the largest buffer (in bytes) the owner
  // hands to SumInPlace.
  size_t slot_bytes() const { return slot_bytes_; }
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct Header;

  ShmAllReduce(int rank, int size, void* base, size_t mapped_bytes);

  absl::Status Barrier(absl::Time deadline);
  // Rank `rank`'s slot of set `set` (0 or 1).
  float* Slot(int set, int rank) const;
  float* Result(int which) const;
  uint64_t* Count(int rank) const;

  // Constant after construction.
  const int rank_;
  const int size_;
  void* const base_;  // the mapping
  const size_t mapped_bytes_;
  Header* const header_;
  const size_t slot_bytes_;
  const size_t max_bytes_;
  const bool spin_;  // whether barriers spin before they sleep

  // Which slot set and result area the next chunk uses; the same on every rank.
  int phase_ = 0;
};

}  // namespace internal
}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_INTERNAL_SHM_ALLREDUCE_H_

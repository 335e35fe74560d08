// AllReduce of dense gradients among a job's workers: on CPUs through shared memory among ranks of
// one host, else Gloo over TCP; NCCL on GPUs. Groups bootstrap through the coordinator's
// rendezvous store (worker/collective/kv_store.h).
#ifndef PS_WORKER_COLLECTIVE_ALLREDUCE_H_
#define PS_WORKER_COLLECTIVE_ALLREDUCE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/coordinator_client.h"

namespace ps {
namespace worker {

// An AllReduce is one rank's membership of a fixed group of `size` ranks that sum float buffers
// elementwise. Collective: every rank calls SumInPlace the same number of times, in the same
// order, with the same number of elements. Thread-compatible.
class AllReduce {
 public:
  // How a Gloo group connects and splits its work. Every rank of a group must use the same
  // streams, min_bytes_per_stream, segment_bytes and ring_min_bytes (the shared memory's limits
  // are rank 0's).
  struct GlooOptions {
    // The host name or IP address this rank listens on and advertises to its peers; it must reach
    // them. Default "": this machine's host name (gethostname), as Gloo resolves it. Use
    // "127.0.0.1" when every rank is on this machine. Ignored when `iface` is set.
    std::string hostname;
    // A network interface (e.g. "eth0") whose address to use instead of `hostname`. Default "".
    std::string iface;
    // TCP connections to each peer, 1 to 16 (default 8). A buffer of at least
    // `min_bytes_per_stream` per connection is cut into that many contiguous parts reduced
    // concurrently, each over its own Gloo context (and event loop thread) by a thread the group
    // keeps; smaller buffers use fewer. One connection leaves Gloo's ring waiting on each
    // segment's hand-shake: on a 2-core machine's loopback, 8 reach about 1.5x its bandwidth at
    // 16 MiB, 4 about 1.3x, 16 less than 8.
    int streams = 8;
    // The smallest part worth a stream of its own, in bytes (default 1 MiB, > 0).
    size_t min_bytes_per_stream = size_t{1} << 20;
    // The largest message Gloo's ring keeps in flight (two per peer), in bytes (default 1 MiB, >=
    // 4096): smaller overlaps reduction and transfer more, at more per-message overhead.
    size_t segment_bytes = size_t{1} << 20;
    // Which of Gloo's algorithms reduces a part (one stream's): its ring for parts of at least
    // this many bytes, its bcube (log2(ranks) exchanges of halves: a few large messages) for
    // smaller ones, such as a recommender's dense part (DEEPFM's job: 46 KB), where the ring's
    // hand-shakes per segment and step are what the time goes to. Default 2 MiB (0: the ring
    // always). On a 2-core machine's loopback, 2 ranks (allreduce_bench --ring_min_bytes=0 and
    // the default in turn, 3 invocations each, 2026-11-28): 1 MiB in 1.77 ms against 3.06 by the
    // ring, 128 KiB in 1.31 against 1.48 (medians; the small sizes' latency varies 2 to 3x between
    // invocations there); from 4 MiB on the ring is faster (5.5 against 5.9 ms at 4 MiB, 15.7
    // against 18.1 at 16).
    size_t ring_min_bytes = size_t{2} << 20;
    // Whether a group whose ranks are all on this host sums through shared memory rather than
    // Gloo (default true). At CreateGloo every rank publishes its host identity (host name, boot
    // id, IPC namespace: internal/shm_allreduce.h); when all agree and every rank maps the POSIX
    // shared-memory segment that rank 0 creates (then unlinks at once, so nothing is left behind),
    // buffers of up to `shared_memory_max_bytes` go through it, a slot's size at a time: each rank
    // copies into its slot what the others sum, sums its 1/size part in rank order, and copies
    // the others' sums out, with a barrier in the segment (spin, yield, then futex) in between,
    // and no event loop thread or socket. Every rank then gets bit-identical values, the serial sum
    // in rank order (Gloo's order of additions differs, so the two may differ by rounding).
    // Otherwise (ranks on several hosts, any rank with this false, or a segment that cannot be
    // created or mapped: a small /dev/shm, another mount namespace) every buffer goes to Gloo as
    // before, on every rank.
    bool shared_memory = true;
    // The largest buffer, in bytes, summed through shared memory; larger ones go to Gloo. Default
    // unlimited: every size goes through the segment, in chunks of a slot, since on a 2-core
    // machine (2 ranks, allreduce_bench, idle, 2026-11-28, medians) 16 MiB chunked through it
    // takes 3.5 ms (20 invocations) against 14.5 by Gloo's ring (--shared_memory=0, 3). Rank 0's
    // value is used by every rank.
    size_t shared_memory_max_bytes = ~size_t{0};
    // The segment's slot per rank, in bytes (default 1 MiB; a positive multiple of 64, at most 1
    // GiB): larger buffers go through in chunks of this size, one barrier each (and one more a
    // call). The segment takes (2 x ranks + 2) slots and two pages of /dev/shm (a container's is
    // often 64 MiB). 256 KiB and 128 KiB slots did no better at 1 and 16 MiB (5 invocations
    // each, within this machine's noise). Rank 0's value is used by every rank.
    size_t shared_memory_slot_bytes = size_t{1} << 20;
  };

  virtual ~AllReduce() = default;

  AllReduce(const AllReduce&) = delete;
  AllReduce& operator=(const AllReduce&) = delete;

  // Joins group `group` as rank `rank` of `size` over Gloo's TCP transport, with the default
  // GlooOptions, and waits up to `timeout` for every rank to join. When every rank is on this
  // host, the group also maps a shared-memory segment and sums buffers there
  // (GlooOptions::shared_memory). `group` names the group's keys in the coordinator's store
  // ("collective/gloo/<group>/...", "collective/shm/<group>/..."): it must be the same on every
  // rank and not reused for another group while the coordinator runs (the store keeps the old
  // addresses). `coordinator` is used
  // only during this call. A group of size 1 needs no coordinator (it may be null) and its
  // SumInPlace does nothing.
  //
  // `timeout` also bounds each SumInPlace. Errors: INVALID_ARGUMENT for a rank outside [0, size),
  // a size < 1, an empty group name, a non-positive timeout, bad options (such as a
  // shared_memory_slot_bytes that is not a positive multiple of 64 of at most 1 GiB) or a null
  // coordinator for size > 1; DEADLINE_EXCEEDED when a rank does not join in time (or does not
  // publish its part of the shared memory's set-up); UNAVAILABLE when the coordinator or a peer
  // cannot be reached or the address cannot be bound. A segment that cannot be created or mapped
  // is no error: the group uses Gloo alone.
  static absl::StatusOr<std::unique_ptr<AllReduce>> CreateGloo(CoordinatorClient* coordinator,
                                                               const std::string& group, int rank,
                                                               int size, absl::Duration timeout);
  static absl::StatusOr<std::unique_ptr<AllReduce>> CreateGloo(CoordinatorClient* coordinator,
                                                               const std::string& group, int rank,
                                                               int size, absl::Duration timeout,
                                                               const GlooOptions& options);

  // Joins group `group` as rank `rank` of `size` through NCCL on CUDA device `device` (this
  // process's device index): rank 0 publishes NCCL's unique id under "collective/nccl/<group>/id"
  // in the coordinator's store, the others wait up to `timeout` for it; then every rank
  // initialises the communicator, waiting up to `timeout` for the others. SumInPlace then reduces
  // memory of `device` (cudaMalloc'd or managed) in place on a stream of this object's, and any
  // other memory (a host buffer) through a device buffer the object keeps, with a copy each way;
  // it returns when the result is in place, and each call is bounded by `timeout`. INTERNAL from
  // SumInPlace when that device buffer cannot be allocated or filled leaves the group usable.
  //
  // Defined in //worker/collective:nccl_allreduce, which links NCCL and the CUDA runtime; depend
  // on that target to call this. Errors: FAILED_PRECONDITION "no CUDA device" when the machine
  // has none (cuda::DeviceCount() == 0); INVALID_ARGUMENT as for CreateGloo and for a device
  // index out of range; DEADLINE_EXCEEDED when rank 0's id or a rank does not come in time;
  // UNAVAILABLE for the coordinator's failures; INTERNAL for CUDA or NCCL errors.
  static absl::StatusOr<std::unique_ptr<AllReduce>> CreateNccl(CoordinatorClient* coordinator,
                                                               const std::string& group, int rank,
                                                               int size, int device,
                                                               absl::Duration timeout);

  // Replaces every element of `data` by its sum over the ranks; every rank gets the same values.
  // OK for an empty span and, for a group of size 1, without doing anything. Errors (after which
  // `data` holds unspecified values and this object is broken: every later call returns
  // FAILED_PRECONDITION with the first error): DEADLINE_EXCEEDED when a peer does not take part
  // within the timeout (through shared memory also when it died: there is no connection to
  // break); UNAVAILABLE when a connection to a peer breaks; INTERNAL for other failures of the
  // library, including element counts that differ between ranks where the library notices them
  // (the shared memory always does, on every rank; otherwise such a mismatch ends in
  // DEADLINE_EXCEEDED, as does an empty span on some ranks only).
  // INVALID_ARGUMENT, without breaking the group, for a span the implementation cannot take
  // (Gloo's: over 2^31 - 1 elements).
  virtual absl::Status SumInPlace(absl::Span<float> data) = 0;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Whether this group sums (some sizes of) buffers through shared memory of one host (see
  // GlooOptions::shared_memory); the same on every rank. False for NCCL groups.
  virtual bool shared_memory() const { return false; }

 protected:
  AllReduce() = default;
};

}  // namespace worker
}  // namespace ps

#endif  // PS_WORKER_COLLECTIVE_ALLREDUCE_H_

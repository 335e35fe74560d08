// Admission control for a server's requests: how many requests, and how many request bytes, may be
// in flight at once, server-wide and per peer, so that a flood is answered RESOURCE_EXHAUSTED at
// once rather than queued without bound.
#ifndef PS_SERVER_ADMISSION_H_
#define PS_SERVER_ADMISSION_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ps {
namespace server {

// The limits of an Admission. 0 means "no limit" for each. A peer is the gRPC peer string
// ("ipv4:127.0.0.1:5555"): one TCP connection, so every channel of a client process that shares
// its connection (gRPC's global subchannel pool) counts as one peer.
//
// The byte limits count request bytes as received (the serialised request). A single request
// larger than a byte limit is still admitted when nothing else is in flight under that limit, so
// that a limit below the job's message limit slows big requests down rather than refusing them
// forever.
struct AdmissionLimits {
  // Requests in flight on the whole server. Default 4096 (ps_server --max_inflight_requests).
  int64_t max_requests = 4096;
  // Request bytes in flight on the whole server. Default 2 GiB (--max_inflight_bytes).
  int64_t max_bytes = int64_t{2} << 30;
  // Requests in flight from one peer. Default 512 (--max_inflight_requests_per_peer); at most
  // max_requests when both are set.
  int64_t max_requests_per_peer = 512;
  // Request bytes in flight from one peer. Default 1 GiB (--max_inflight_bytes_per_peer); at most
  // max_bytes when both are set.
  int64_t max_bytes_per_peer = int64_t{1} << 30;
};

// OK, or INVALID_ARGUMENT naming the flag for a negative limit or a per-peer limit above its
// server-wide one (both set).
absl::Status ValidateAdmissionLimits(const AdmissionLimits& limits);

// An Admission counts the requests and request bytes in flight, server-wide and per peer, and
// refuses a request that would go over a limit. Thread-safe. Lock-light: the server-wide counts
// are atomics; the per-peer counts are in 16 maps, each under its own mutex, picked by the peer's
// hash, and a peer's entry is removed when its last request ends (the maps hold only peers with
// requests in flight).
class Admission {
 public:
  // A request admitted: holds its share of the counts until destroyed or Release()d. Movable.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Release(); }

    // Gives the request's share back; then the ticket is empty. Does nothing if empty.
    void Release();

   private:
    friend class Admission;
    Admission* admission_ = nullptr;
    std::string peer_;
    int64_t bytes_ = 0;
  };

  // `limits` must pass ValidateAdmissionLimits (a broken one crashes, loudly).
  explicit Admission(const AdmissionLimits& limits);
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  // Every ticket must have been released.
  ~Admission() = default;

  // Admits a request of `bytes` bytes from `peer`: its ticket, or RESOURCE_EXHAUSTED naming the
  // limit that would be exceeded, the peer and the flag ("server busy: 512 requests in flight
  // from ipv4:127.0.0.1:5555 (--max_inflight_requests_per_peer=512); retry later"). A refusal
  // changes no count.
  absl::StatusOr<Ticket> Admit(absl::string_view peer, int64_t bytes);

  // Counts in flight now (for tests and status).
  int64_t requests_in_flight() const { return requests_.load(std::memory_order_relaxed); }
  int64_t bytes_in_flight() const { return bytes_.load(std::memory_order_relaxed); }
  // The requests in flight from `peer`.
  int64_t requests_in_flight(absl::string_view peer) const;
  // Requests refused since construction.
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  struct PeerCounts {
    int64_t requests = 0;
    int64_t bytes = 0;
  };
  struct PeerShard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, PeerCounts> peers ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kPeerShards = 16;

  PeerShard& ShardOf(absl::string_view peer) const;
  void Release(const std::string& peer, int64_t bytes);
  absl::Status Refuse(std::string message);

  // Constant after construction.
  const AdmissionLimits limits_;

  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> bytes_{0};
  std::atomic<uint64_t> refused_{0};
  mutable std::array<PeerShard, kPeerShards> peer_shards_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_ADMISSION_H_

#include "server/admission.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace server {

absl::Status ValidateAdmissionLimits(const AdmissionLimits& limits) {
  const struct {
    const char* flag;
    int64_t value;
  } all[] = {{"--max_inflight_requests", limits.max_requests},
             {"--max_inflight_bytes", limits.max_bytes},
             {"--max_inflight_requests_per_peer", limits.max_requests_per_peer},
             {"--max_inflight_bytes_per_peer", limits.max_bytes_per_peer}};
  for (const auto& [flag, value] : all) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s must be >= 0 (0: no limit), got %d", flag, value));
    }
  }
  if (limits.max_requests > 0 && limits.max_requests_per_peer > limits.max_requests) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max_inflight_requests_per_peer=%d is above --max_inflight_requests=%d",
                        limits.max_requests_per_peer, limits.max_requests));
  }
  if (limits.max_bytes > 0 && limits.max_bytes_per_peer > limits.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max_inflight_bytes_per_peer=%d is above --max_inflight_bytes=%d",
                        limits.max_bytes_per_peer, limits.max_bytes));
  }
  return absl::OkStatus();
}

Admission::Ticket& Admission::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Release();
    admission_ = std::exchange(other.admission_, nullptr);
    peer_ = std::move(other.peer_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void Admission::Ticket::Release() {
  if (admission_ == nullptr) return;
  std::exchange(admission_, nullptr)->Release(peer_, bytes_);
  peer_.clear();
  bytes_ = 0;
}

Admission::Admission(const AdmissionLimits& limits) : limits_(limits) {
  if (const absl::Status valid = ValidateAdmissionLimits(limits); !valid.ok()) {
    std::fprintf(stderr, "Admission: %s\n", valid.ToString().c_str());
    std::abort();
  }
}

Admission::PeerShard& Admission::ShardOf(absl::string_view peer) const {
  return peer_shards_[absl::Hash<absl::string_view>()(peer) % kPeerShards];
}

absl::Status Admission::Refuse(std::string message) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  return absl::ResourceExhaustedError(std::move(message));
}

absl::StatusOr<Admission::Ticket> Admission::Admit(absl::string_view peer, int64_t bytes) {
  // Server-wide: counted first, given back on a refusal.
  const int64_t requests = requests_.fetch_add(1, std::memory_order_relaxed);
  if (limits_.max_requests > 0 && requests >= limits_.max_requests) {
    requests_.fetch_sub(1, std::memory_order_relaxed);
    return Refuse(absl::StrFormat(
        "server busy: %d requests in flight (--max_inflight_requests=%d); retry later", requests,
        limits_.max_requests));
  }
  const int64_t held = bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (limits_.max_bytes > 0 && held > 0 && held + bytes > limits_.max_bytes) {
    bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    requests_.fetch_sub(1, std::memory_order_relaxed);
    return Refuse(absl::StrFormat(
        "server busy: %d request bytes in flight, %d more do not fit (--max_inflight_bytes=%d); "
        "retry later",
        held, bytes, limits_.max_bytes));
  }
  std::string refusal;
  {
    PeerShard& shard = ShardOf(peer);
    absl::MutexLock lock(&shard.mu);
    PeerCounts& counts = shard.peers[peer];
    if (limits_.max_requests_per_peer > 0 && counts.requests >= limits_.max_requests_per_peer) {
      refusal = absl::StrFormat(
          "server busy: %d requests in flight from %s (--max_inflight_requests_per_peer=%d); "
          "retry later",
          counts.requests, peer, limits_.max_requests_per_peer);
    } else if (limits_.max_bytes_per_peer > 0 && counts.bytes > 0 &&
               counts.bytes + bytes > limits_.max_bytes_per_peer) {
      refusal = absl::StrFormat(
          "server busy: %d request bytes in flight from %s, %d more do not fit "
          "(--max_inflight_bytes_per_peer=%d); retry later",
          counts.bytes, peer, bytes, limits_.max_bytes_per_peer);
    } else {
      ++counts.requests;
      counts.bytes += bytes;
    }
    if (!refusal.empty() && counts.requests == 0) shard.peers.erase(shard.peers.find(peer));
  }
  if (!refusal.empty()) {
    bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    requests_.fetch_sub(1, std::memory_order_relaxed);
    return Refuse(std::move(refusal));
  }
  Ticket ticket;
  ticket.admission_ = this;
  ticket.peer_ = std::string(peer);
  ticket.bytes_ = bytes;
  return ticket;
}

void Admission::Release(const std::string& peer, int64_t bytes) {
  {
    PeerShard& shard = ShardOf(peer);
    absl::MutexLock lock(&shard.mu);
    auto it = shard.peers.find(peer);
    if (it == shard.peers.end()) {
      std::fprintf(stderr, "Admission: a ticket of %s released twice\n", peer.c_str());
      std::abort();
    }
    it->second.bytes -= bytes;
    if (--it->second.requests == 0) shard.peers.erase(it);
  }
  bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  requests_.fetch_sub(1, std::memory_order_relaxed);
}

int64_t Admission::requests_in_flight(absl::string_view peer) const {
  PeerShard& shard = ShardOf(peer);
  absl::MutexLock lock(&shard.mu);
  const auto it = shard.peers.find(peer);
  return it == shard.peers.end() ? 0 : it->second.requests;
}

}  // namespace server
}  // namespace ps

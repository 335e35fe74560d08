// Exactly-once bookkeeping for the pushes of one shard.
//
// Every push carries (worker_id, sequence), sequences strictly increasing per worker from 1, and a
// retry reuses its sequence. Concurrent requests of one worker may arrive out of order, so a
// shard remembers, per worker, the highest sequence it admitted and which of the kWindow sequences
// below it it admitted (the anti-replay window of IPsec, RFC 4303 section 3.4.3).
#ifndef PS_SERVER_STORAGE_APPLY_WINDOW_H_
#define PS_SERVER_STORAGE_APPLY_WINDOW_H_

#include <array>
#include <cstdint>

#include "absl/container/flat_hash_map.h"

namespace ps {
namespace server {

// An ApplyWindow decides whether a push of one shard is new. Thread-compatible.
class ApplyWindow {
 public:
  // Sequences tracked below a worker's highest admitted sequence.
  static constexpr uint64_t kWindow = 1024;

  enum class Verdict {
    kApply,      // first time seen: apply it (it is now recorded)
    kDuplicate,  // admitted before: a retry, do not apply again
    kTooOld,     // more than kWindow below the highest admitted: cannot tell, do not apply
  };

  ApplyWindow() = default;
  ApplyWindow(const ApplyWindow&) = delete;
  ApplyWindow& operator=(const ApplyWindow&) = delete;

  // Decides on (worker_id, sequence) and records it if the verdict is kApply. Sequence 0 is never
  // valid and gets kTooOld.
  Verdict Admit(uint32_t worker_id, uint64_t sequence);

  // Workers seen so far.
  size_t num_workers() const { return workers_.size(); }

 private:
  struct Worker {
    // Highest admitted sequence; 0 before the first.
    uint64_t highest = 0;
    // Bit d - 1 (word (d - 1) / 64, bit (d - 1) % 64) is set iff highest - d was admitted,
    // for d in [1, kWindow].
    std::array<uint64_t, kWindow / 64> seen{};
  };

  absl::flat_hash_map<uint32_t, Worker> workers_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_STORAGE_APPLY_WINDOW_H_

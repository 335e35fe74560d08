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
#include "common/sequence_window.h"

namespace ps {
namespace server {

// An ApplyWindow decides whether a push of one shard is new. Thread-compatible.
class ApplyWindow {
 public:
  // Sequences tracked below a worker's highest admitted sequence.
  static constexpr uint64_t kWindow = kSequenceWindow;

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

  // The bitmap of a worker's admitted sequences below its highest (see Worker::seen).
  using Bitmap = std::array<uint64_t, kWindow / 64>;

  // Calls f(worker_id, highest, const Bitmap& seen) for every worker, in no fixed order: what a
  // copy of the window needs (Restore).
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [worker, w] : workers_) f(worker, w.highest, w.seen);
  }

  // Sets one worker's state as ForEach gave it (replicas, snapshots, restores).
  void Restore(uint32_t worker_id, uint64_t highest, const Bitmap& seen) {
    Worker& w = workers_[worker_id];
    w.highest = highest;
    w.seen = seen;
  }

  // Forgets every worker.
  void Clear() { workers_.clear(); }

 private:
  struct Worker {
    // Highest admitted sequence; 0 before the first.
    uint64_t highest = 0;
    // Bit d - 1 (word (d - 1) / 64, bit (d - 1) % 64) is set iff highest - d was admitted,
    // for d in [1, kWindow].
    Bitmap seen{};
  };

  absl::flat_hash_map<uint32_t, Worker> workers_;
};

}  // namespace server
}  // namespace ps

#endif  // PS_SERVER_STORAGE_APPLY_WINDOW_H_

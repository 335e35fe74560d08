// Admission by frequency: a count-min sketch of how often ids were seen, holding no state per id,
// and the decision whether an id has been seen often enough to be given a place. A server's table
// admits ids to rows by it (one per table and shard, table.admission); a worker's row cache admits
// pulled rows by it (training.row_cache.min_pulls).
//
// The sketch has 4 rows of `width` 4-bit counters (2 bytes an id of width). A sighting of an id
// increments, in each row, the counter its hash picks, but only those equal to the id's current
// estimate, the smallest of its 4 (conservative update: a counter shared with a frequent id does
// not grow further from a rare one). The estimate never undercounts an id's sightings since the
// last aging; it overcounts only when all 4 of its counters are shared with other ids.
//
// Aging: after `width` sightings every counter is halved (rounded down), so the sketch describes
// recent traffic and a once-popular id stops counting forever. An id whose sightings are spread
// over several agings may need more than min_count of them.
//
// Decision (Admit): an id is admitted when, counting this sighting, its estimate reaches
// min_count, and then with `probability`, drawn from a hash of (seed, id, estimate), so that the
// same sequence of sightings makes the same decisions on every run.
#ifndef PS_COMMON_ADMISSION_SKETCH_H_
#define PS_COMMON_ADMISSION_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ps {

struct AdmissionOptions {
  // Sightings before an id is admitted, 1 to 15.
  uint32_t min_count = 1;
  // Probability of admission once min_count is reached, in (0, 1].
  double probability = 1.0;
  // Counters per row, rounded up to a power of two, at least 64.
  size_t width = 1 << 16;
  // Mixed into the hashes (a server's table: its name's hash and the job's seed; a row cache's
  // table: its index).
  uint64_t seed = 0;
};

// Thread-compatible: the caller serialises calls (a server under its shard's lock).
class AdmissionSketch {
 public:
  explicit AdmissionSketch(const AdmissionOptions& options);

  AdmissionSketch(const AdmissionSketch&) = delete;
  AdmissionSketch& operator=(const AdmissionSketch&) = delete;

  // Counts a sighting of `id` (an id without a row) and returns whether it is admitted now.
  bool Admit(uint64_t id);

  // The sightings of `id` the sketch holds (at least its true count since the last aging, at most
  // 15). Does not count a sighting.
  uint32_t Estimate(uint64_t id) const;

  // Bytes of the counters.
  size_t MemoryBytes() const { return bytes_; }

  // Agings so far.
  uint64_t agings() const { return agings_; }

  // Forgets every count (a restore or a new snapshot replaces the table's rows).
  void Clear();

  static constexpr uint32_t kMaxCount = 15;

 private:
  static constexpr int kRows = 4;

  // The counter positions of `id`, one per row.
  void Positions(uint64_t id, size_t pos[kRows]) const;
  uint32_t Get(size_t pos) const { return (counters_[pos >> 1] >> ((pos & 1) * 4)) & 0xF; }
  void Set(size_t pos, uint32_t value) {
    uint8_t& byte = counters_[pos >> 1];
    const int shift = (pos & 1) * 4;
    byte = static_cast<uint8_t>((byte & ~(0xF << shift)) | (value << shift));
  }
  void Age();

  // Constant after construction.
  const uint32_t min_count_;
  // probability as a threshold on a 64-bit hash (2^64 - 1 when 1).
  const uint64_t threshold_;
  const bool always_;
  const uint64_t seed_;
  // log2(width).
  const int bits_;
  const size_t bytes_;

  std::unique_ptr<uint8_t[]> counters_;  // kRows x width counters, 2 a byte
  uint64_t sightings_ = 0;               // since the last aging
  uint64_t agings_ = 0;
};

}  // namespace ps

#endif  // PS_COMMON_ADMISSION_SKETCH_H_

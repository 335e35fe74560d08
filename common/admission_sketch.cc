#include "common/admission_sketch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/byte_order.h"
#include "xxhash.h"

namespace ps {
namespace {

uint64_t Hash(uint64_t id, uint64_t seed) {
  const uint64_t le = LittleEndian64(id);
  return XXH3_64bits_withSeed(&le, sizeof(le), seed);
}

int BitsFor(size_t width) {
  int bits = 6;
  while ((size_t{1} << bits) < width && bits < 32) ++bits;
  return bits;
}

uint64_t ThresholdFor(double probability) {
  if (probability >= 1.0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(std::ldexp(std::max(probability, 0.0), 64));
}

}  // namespace

AdmissionSketch::AdmissionSketch(const AdmissionOptions& options)
    : min_count_(std::min<uint32_t>(std::max<uint32_t>(options.min_count, 1), kMaxCount)),
      threshold_(ThresholdFor(options.probability)),
      always_(options.probability >= 1.0),
      seed_(options.seed ^ 0x6a09e667f3bcc909ull),
      bits_(BitsFor(options.width)),
      bytes_((size_t{kRows} << bits_) / 2),
      counters_(new uint8_t[bytes_]) {
  Clear();
}

void AdmissionSketch::Clear() {
  std::memset(counters_.get(), 0, bytes_);
  sightings_ = 0;
}

void AdmissionSketch::Positions(uint64_t id, size_t pos[kRows]) const {
  // Kirsch-Mitzenmacher: the rows' positions from two halves of one 64-bit hash.
  const uint64_t h = Hash(id, seed_);
  const uint32_t a = static_cast<uint32_t>(h);
  const uint32_t b = static_cast<uint32_t>(h >> 32) | 1;
  const size_t mask = (size_t{1} << bits_) - 1;
  for (int r = 0; r < kRows; ++r) {
    pos[r] = (size_t{static_cast<uint32_t>(a + r * b)} & mask) + (static_cast<size_t>(r) << bits_);
  }
}

uint32_t AdmissionSketch::Estimate(uint64_t id) const {
  size_t pos[kRows];
  Positions(id, pos);
  uint32_t estimate = kMaxCount;
  for (int r = 0; r < kRows; ++r) estimate = std::min(estimate, Get(pos[r]));
  return estimate;
}

bool AdmissionSketch::Admit(uint64_t id) {
  size_t pos[kRows];
  Positions(id, pos);
  uint32_t estimate = kMaxCount;
  for (int r = 0; r < kRows; ++r) estimate = std::min(estimate, Get(pos[r]));
  if (estimate < kMaxCount) {
    for (int r = 0; r < kRows; ++r) {
      if (Get(pos[r]) == estimate) Set(pos[r], estimate + 1);
    }
    ++estimate;
  }
  if (++sightings_ >= (size_t{1} << bits_)) Age();
  if (estimate < min_count_) return false;
  if (always_) return true;
  return Hash(id ^ (uint64_t{estimate} << 56), seed_ + 1) <= threshold_;
}

void AdmissionSketch::Age() {
  // Halves both counters of every byte at once.
  for (size_t i = 0; i < bytes_; ++i) counters_[i] = (counters_[i] >> 1) & 0x77;
  sightings_ = 0;
  ++agings_;
}

}  // namespace ps

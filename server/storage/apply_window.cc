#include "server/storage/apply_window.h"

namespace ps {
namespace server {
namespace {

constexpr size_t kWords = ApplyWindow::kWindow / 64;

// Moves every bit `shift` (in [1, kWindow)) positions towards the high end of the bitmap,
// dropping those that fall off.
void ShiftUp(std::array<uint64_t, kWords>& bits, uint64_t shift) {
  const size_t words = shift / 64;
  const unsigned offset = shift % 64;
  for (size_t i = kWords; i-- > 0;) {
    uint64_t word = 0;
    if (i >= words) {
      word = bits[i - words] << offset;
      if (offset != 0 && i > words) word |= bits[i - words - 1] >> (64 - offset);
    }
    bits[i] = word;
  }
}

bool TestBit(const std::array<uint64_t, kWords>& bits, uint64_t index) {
  return (bits[index / 64] >> (index % 64)) & 1;
}

void SetBit(std::array<uint64_t, kWords>& bits, uint64_t index) {
  bits[index / 64] |= uint64_t{1} << (index % 64);
}

}  // namespace

ApplyWindow::Verdict ApplyWindow::Admit(uint32_t worker_id, uint64_t sequence) {
  if (sequence == 0) return Verdict::kTooOld;
  Worker& w = workers_[worker_id];
  if (sequence > w.highest) {
    const uint64_t advance = sequence - w.highest;
    if (advance >= kWindow) {
      w.seen.fill(0);
    } else {
      ShiftUp(w.seen, advance);
    }
    // The previous highest is now `advance` below; 0 stands for "none yet".
    if (w.highest != 0 && advance <= kWindow) SetBit(w.seen, advance - 1);
    w.highest = sequence;
    return Verdict::kApply;
  }
  if (sequence == w.highest) return Verdict::kDuplicate;
  const uint64_t below = w.highest - sequence;
  if (below > kWindow) return Verdict::kTooOld;
  if (TestBit(w.seen, below - 1)) return Verdict::kDuplicate;
  SetBit(w.seen, below - 1);
  return Verdict::kApply;
}

}  // namespace server
}  // namespace ps

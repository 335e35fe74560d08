// Futex waits and wakes on a 32-bit word of memory shared between processes (a MAP_SHARED
// mapping), for the bells of shared regions (common/shared_region_layout.h). Linux only.
#ifndef PS_COMMON_FUTEX_H_
#define PS_COMMON_FUTEX_H_

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "absl/time/time.h"

namespace ps {

// Sleeps while *word == expected, at most `timeout` (absl::InfiniteDuration: no limit). Returns
// at once when the word differs; may return early (a signal, a spurious wake): callers re-check.
inline void FutexWait(uint32_t* word, uint32_t expected, absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) {
    syscall(SYS_futex, word, FUTEX_WAIT, expected, nullptr, nullptr, 0);
    return;
  }
  const timespec relative =
      absl::ToTimespec(timeout < absl::ZeroDuration() ? absl::ZeroDuration() : timeout);
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &relative, nullptr, 0);
}

// Wakes every process and thread sleeping on `word`.
inline void FutexWakeAll(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Rings a bell: increments it and wakes those sleeping on it.
inline void RingBell(uint32_t* bell) {
  __atomic_add_fetch(bell, 1, __ATOMIC_SEQ_CST);
  FutexWakeAll(bell);
}

// Spins while *word == value, at most `budget`: whether it changed. For a wait expected to be
// shorter than a sleep and a wake-up.
inline bool SpinWhile(const uint32_t* word, uint32_t value, absl::Duration budget) {
  const absl::Time until = absl::Now() + budget;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (__atomic_load_n(word, __ATOMIC_SEQ_CST) != value) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (absl::Now() >= until) return false;
  }
}

// As SpinWhile, giving the processor up (sched_yield) between looks: for waits a little longer,
// where a peer that shares the cores must run to change the word, and a futex's sleep and wake
// would cost more than the wait.
inline bool YieldWhile(const uint32_t* word, uint32_t value, absl::Duration budget) {
  const absl::Time until = absl::Now() + budget;
  while (true) {
    for (int i = 0; i < 16; ++i) {
      if (__atomic_load_n(word, __ATOMIC_SEQ_CST) != value) return true;
      sched_yield();
    }
    if (absl::Now() >= until) return false;
  }
}

inline uint32_t LoadWord(const uint32_t* word) { return __atomic_load_n(word, __ATOMIC_SEQ_CST); }
inline void StoreWord(uint32_t* word, uint32_t value) {
  __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
}
inline bool SwapWord(uint32_t* word, uint32_t expected, uint32_t desired) {
  return __atomic_compare_exchange_n(word, &expected, desired, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST);
}

}  // namespace ps

#endif  // PS_COMMON_FUTEX_H_

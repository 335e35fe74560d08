// Process-wide settings for the daemons and benchmarks (not for the client library, which must
// not change its application's process).
#ifndef PS_COMMON_PROCESS_TUNING_H_
#define PS_COMMON_PROCESS_TUNING_H_

namespace ps {

// Call once, first thing in main:
// - keeps large freed blocks (request and response buffers of many MiB) in the heap for reuse
//   instead of returning them to the kernel at once: glibc otherwise serves each such buffer with
//   a fresh mmap, and the page faults and zeroing of every call cost more than copying the data;
// - turns off Abseil's mutex deadlock detection, which records every lock acquisition in a graph
//   (about 1% of a server's time) to report lock-order cycles that the tests would already show.
void TuneProcess();

}  // namespace ps

#endif  // PS_COMMON_PROCESS_TUNING_H_

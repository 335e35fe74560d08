// Process-wide allocator settings for the daemons and benchmarks.
#ifndef PS_COMMON_MALLOC_TUNING_H_
#define PS_COMMON_MALLOC_TUNING_H_

namespace ps {

// Keeps large freed blocks (request and response buffers of many MiB) in the heap for reuse
// instead of returning them to the kernel at once: glibc otherwise serves each such buffer with a
// fresh mmap, and the page faults and zeroing of every call cost more than copying the data.
// Call once, first thing in main.
void KeepLargeAllocations();

}  // namespace ps

#endif  // PS_COMMON_MALLOC_TUNING_H_

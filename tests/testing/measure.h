// What benchmarks measure of the processes they start and of their samples: a process's resident
// set, and a percentile of a sample.
#ifndef PS_TESTS_TESTING_MEASURE_H_
#define PS_TESTS_TESTING_MEASURE_H_

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace ps {
namespace testing {

// The resident set of process `pid` in bytes (VmRSS of /proc/PID/status), or 0 if it cannot be
// read (the process is gone).
uint64_t ResidentBytesOf(pid_t pid);

// The CPU seconds (user + system) process `pid` has used (utime and stime of /proc/PID/stat), or
// -1 if they cannot be read (the process is gone).
double CpuSecondsOf(pid_t pid);

// The `p`-quantile (p in [0, 1]) of `v`, the nearest rank rounded half up; 0 for an empty `v`.
double Percentile(std::vector<double> v, double p);

}  // namespace testing
}  // namespace ps

#endif  // PS_TESTS_TESTING_MEASURE_H_

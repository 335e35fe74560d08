// mpi_allreduce: Open MPI's MPI_Allreduce (float sum, in place) timed the way allreduce_bench times
// ours, as its reference. Run under mpirun; rank 0 prints one line per size:
//   {"bytes":16777216,"median_s":0.0071}
//
//   mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl tcp,self
//     bazel-out/k8-opt/bin/tests/bench/mpi_allreduce --sizes=1048576,16777216
// (one command line).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, sizes, "1048576,16777216,67108864",
          "buffer sizes in bytes, comma-separated");
ABSL_FLAG(int, warmup, 3, "untimed AllReduces per size");
ABSL_FLAG(int, iterations, 15, "timed AllReduces per size");

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  absl::ParseCommandLine(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  for (const absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',')) {
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(text, &bytes) || bytes <= 0 || bytes % sizeof(float) != 0) {
      std::fprintf(stderr, "bad size %s\n", std::string(text).c_str());
      status = 2;
      break;
    }
    const int count = static_cast<int>(bytes / sizeof(float));
    std::vector<float> data(count);
    for (int i = 0; i < count; ++i) data[i] = static_cast<float>((i + rank) % 1000);
    std::vector<double> times;
    const int warmup = absl::GetFlag(FLAGS_warmup);
    const int iterations = absl::GetFlag(FLAGS_iterations);
    for (int i = 0; i < warmup + iterations; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (i >= warmup) times.push_back(MPI_Wtime() - start);
    }
    std::sort(times.begin(), times.end());
    if (rank == 0 && !times.empty()) {
      std::printf("{\"bytes\":%lld,\"median_s\":%.6f}\n", static_cast<long long>(bytes),
                  times[times.size() / 2]);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return status;
}

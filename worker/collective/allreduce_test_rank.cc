// One rank of a Gloo AllReduce group as a process of its own, for allreduce_test's groups of
// processes: joins --group through --coordinator, sums RandomValues(rank, round, size) for each
// round and each of --sizes in turn, and prints one line per call,
//   <round> <size> <digest of the result in hex>
// after a first line "shared_memory <0|1>". With --then_wait it then waits to be killed (pause()).
// Exits 1 with the error on stderr when the group cannot be joined or a call fails.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/coordinator_client.h"
#include "worker/collective/allreduce.h"
#include "worker/collective/internal/random_values_for_test.h"

ABSL_FLAG(std::string, coordinator, "", "host:port of the job's coordinator");
ABSL_FLAG(std::string, group, "processes", "the group's name");
ABSL_FLAG(int, rank, 0, "this process's rank");
ABSL_FLAG(int, ranks, 2, "ranks in the group");
ABSL_FLAG(std::string, sizes, "1,1001", "element counts, comma-separated, summed in turn");
ABSL_FLAG(int, rounds, 2, "times each size is summed");
ABSL_FLAG(bool, shared_memory, true, "GlooOptions::shared_memory");
ABSL_FLAG(int, timeout_s, 30, "the group's timeout");
ABSL_FLAG(bool, then_wait, false, "after the calls, wait to be killed");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int rank = absl::GetFlag(FLAGS_rank);
  auto client = ps::CoordinatorClient::Connect(absl::GetFlag(FLAGS_coordinator), absl::Seconds(10));
  if (!client.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, client.status().ToString().c_str());
    return 1;
  }
  ps::worker::AllReduce::GlooOptions options;
  options.hostname = "127.0.0.1";
  options.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  auto allreduce = ps::worker::AllReduce::CreateGloo(
      client->get(), absl::GetFlag(FLAGS_group), rank, absl::GetFlag(FLAGS_ranks),
      absl::Seconds(absl::GetFlag(FLAGS_timeout_s)), options);
  if (!allreduce.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, allreduce.status().ToString().c_str());
    return 1;
  }
  std::printf("shared_memory %d\n", (*allreduce)->shared_memory() ? 1 : 0);
  std::vector<size_t> sizes;
  for (const absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',')) {
    size_t n = 0;
    if (absl::SimpleAtoi(text, &n)) sizes.push_back(n);
  }
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const size_t n : sizes) {
      std::vector<float> data = ps::worker::internal::RandomValues(rank, round, n);
      const absl::Status status = (*allreduce)->SumInPlace(absl::MakeSpan(data));
      if (!status.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
        return 1;
      }
      std::printf("%d %zu %016llx\n", round, n,
                  static_cast<unsigned long long>(ps::worker::internal::Digest(data)));
    }
  }
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_then_wait)) {
    for (;;) pause();
  }
  return 0;
}

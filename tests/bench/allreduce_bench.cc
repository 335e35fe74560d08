// allreduce_bench: bus bandwidth of our Gloo AllReduce against Open MPI's MPI_Allreduce on this
// machine: ours through shared memory (the ranks being on one host) or, with
// --shared_memory=false, over TCP; Open MPI's likewise through its shared memory (vader) or over
// TCP (--mpi_btl).
//
// Starts a ps_coordinator and --ranks rank processes (this binary again, with --role=rank) that
// form a Gloo group through it and time SumInPlace on buffers of each --sizes_mib; then runs
// mpi_allreduce under `mpirun --mca btl <--mpi_btl>` on the same sizes, --rounds times in turn.
// Each side's figure is the median over rounds of the median of --iterations AllReduces (after
// --warmup), each started after a barrier. Like the daemons, the ranks keep large freed buffers in
// the heap (common/process_tuning.h). Prints one JSON line
// per size, bandwidth being the bus bandwidth 2(n-1)/n * bytes / time, in GB/s (10^9 bytes):
//   {"bench":"allreduce","ranks":2,"bytes":16777216,"ours_gbps":...,"mpi_gbps":...,"ratio":...,
//    "ours_ms":...,"mpi_ms":...,"streams":2,"shared_memory":1,"shared_memory_used":1,"rounds":3}
// ("shared_memory": --shared_memory; "shared_memory_used": whether that size went through it).
//
//   bazel build -c opt //tests/bench:allreduce_bench &&
//   bazel-out/k8-opt/bin/tests/bench/allreduce_bench [--sizes_mib=0.125,1,16,64]
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/coordinator_client.h"
#include "common/process_tuning.h"
#include "tests/testing/daemon.h"
#include "tests/testing/runfiles.h"
#include "tests/testing/temp_dir.h"
#include "worker/collective/allreduce.h"

ABSL_FLAG(int, ranks, 2, "ranks (processes) in the group");
ABSL_FLAG(std::string, sizes_mib, "0.125,1,16,64",
          "buffer sizes in MiB, comma-separated (fractions allowed: 0.125 is 128 KiB)");
ABSL_FLAG(int, warmup, 3, "untimed AllReduces per size");
ABSL_FLAG(int, iterations, 15, "timed AllReduces per size");
ABSL_FLAG(int, rounds, 3,
          "rounds of ours then MPI's; each side's result is the median of its rounds' medians");
ABSL_FLAG(int, streams, ps::worker::AllReduce::GlooOptions().streams,
          "Gloo: TCP connections per peer");
ABSL_FLAG(int64_t, min_bytes_per_stream, ps::worker::AllReduce::GlooOptions().min_bytes_per_stream,
          "Gloo: smallest part of a buffer given its own connection");
ABSL_FLAG(int64_t, segment_bytes, ps::worker::AllReduce::GlooOptions().segment_bytes,
          "Gloo: largest message in flight");
ABSL_FLAG(int64_t, ring_min_bytes, ps::worker::AllReduce::GlooOptions().ring_min_bytes,
          "parts of at least this many bytes by Gloo's ring, smaller ones by its bcube (0: ring)");
ABSL_FLAG(bool, shared_memory, ps::worker::AllReduce::GlooOptions().shared_memory,
          "sum through shared memory, the ranks being on one host (false: Gloo over TCP)");
ABSL_FLAG(int64_t, shared_memory_max_bytes,
          static_cast<int64_t>(std::min<uint64_t>(
              ps::worker::AllReduce::GlooOptions().shared_memory_max_bytes, INT64_MAX)),
          "largest buffer summed through shared memory, larger ones by Gloo");
ABSL_FLAG(int64_t, shared_memory_slot_bytes,
          ps::worker::AllReduce::GlooOptions().shared_memory_slot_bytes,
          "shared memory: each rank's slot (larger buffers go through in chunks of it)");
ABSL_FLAG(bool, mpi, true, "also run the Open MPI reference");
ABSL_FLAG(std::string, mpirun, "mpirun", "Open MPI's mpirun");
ABSL_FLAG(std::string, mpi_btl, "auto",
          "Open MPI's transports (--mca btl): auto is vader,self (its shared memory) when ours "
          "may use shared memory (--shared_memory), else tcp,self, so that both sides cross the "
          "same medium");
ABSL_FLAG(std::string, bin_dir, "",
          "folder holding server/coordinator/ps_coordinator and tests/bench/mpi_allreduce "
          "(default: this binary's runfiles)");
ABSL_FLAG(int, timeout_s, 300, "limit for each phase, in seconds");
// Internal: how the parent starts its ranks.
ABSL_FLAG(std::string, role, "", "internal: 'rank'");
ABSL_FLAG(std::string, coordinator, "",
          "internal: host:port, or several comma-separated: the job's coordinators");
ABSL_FLAG(int, rank, 0, "internal: this process's rank");

namespace ps {
namespace {

std::string g_self;  // this binary's path
// Whether a run of ours summed through shared memory (rank 0 says so).
bool g_shared_memory_used = false;

// --bin_dir, else this binary's runfiles (under `bazel run`), else the -c opt output folder.
std::string BinDir() {
  return testing::FindBinDir(absl::GetFlag(FLAGS_bin_dir), g_self,
                             "server/coordinator/ps_coordinator", "bazel-out/k8-opt/bin");
}

// `name` as given if it holds a '/', else its first executable match on $PATH (RunProcess does
// not search it).
std::string FindOnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  for (const absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return name;
}

std::vector<int64_t> SizesBytes() {
  std::vector<int64_t> sizes;
  for (const absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',')) {
    double mib = 0;  // fractions too: 0.125 is 128 KiB
    if (absl::SimpleAtod(text, &mib) && mib > 0) {
      sizes.push_back(static_cast<int64_t>(mib * (1 << 20)) / 4 * 4);  // whole floats
    }
  }
  return sizes;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Lines {"bytes":B,"median_s":S}, as the rank processes and mpi_allreduce print them.
std::map<int64_t, double> ParseMedians(const std::string& text) {
  std::map<int64_t, double> medians;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (!absl::ConsumePrefix(&line, "{\"bytes\":")) continue;
    const size_t comma = line.find(",\"median_s\":");
    int64_t bytes = 0;
    double seconds = 0;
    if (comma == absl::string_view::npos || !absl::SimpleAtoi(line.substr(0, comma), &bytes) ||
        !absl::SimpleAtod(absl::StripSuffix(line.substr(comma + 12), "}"), &seconds)) {
      continue;
    }
    medians[bytes] = seconds;
  }
  return medians;
}

worker::AllReduce::GlooOptions Options() {
  worker::AllReduce::GlooOptions options;
  options.hostname = "127.0.0.1";
  options.streams = absl::GetFlag(FLAGS_streams);
  options.min_bytes_per_stream = absl::GetFlag(FLAGS_min_bytes_per_stream);
  options.segment_bytes = absl::GetFlag(FLAGS_segment_bytes);
  options.ring_min_bytes = absl::GetFlag(FLAGS_ring_min_bytes);
  options.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  options.shared_memory_max_bytes = absl::GetFlag(FLAGS_shared_memory_max_bytes);
  options.shared_memory_slot_bytes = absl::GetFlag(FLAGS_shared_memory_slot_bytes);
  return options;
}

// --role=rank: one member of the Gloo group; rank 0 prints the medians.
int RunRank() {
  const int rank = absl::GetFlag(FLAGS_rank);
  const int ranks = absl::GetFlag(FLAGS_ranks);
  auto client = CoordinatorClient::Connect(absl::GetFlag(FLAGS_coordinator), absl::Seconds(30));
  if (!client.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, client.status().ToString().c_str());
    return 1;
  }
  auto allreduce = worker::AllReduce::CreateGloo(client->get(), "allreduce_bench", rank, ranks,
                                                 absl::Seconds(60), Options());
  if (!allreduce.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, allreduce.status().ToString().c_str());
    return 1;
  }
  if (rank == 0) {
    std::printf("{\"shared_memory_used\":%d}\n", (*allreduce)->shared_memory() ? 1 : 0);
  }
  float token = 0;
  for (const int64_t bytes : SizesBytes()) {
    std::vector<float> data(bytes / sizeof(float));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((i + rank) % 1000);
    std::vector<double> times;
    const int warmup = absl::GetFlag(FLAGS_warmup);
    const int iterations = absl::GetFlag(FLAGS_iterations);
    for (int i = 0; i < warmup + iterations; ++i) {
      // A one-float AllReduce is the barrier.
      absl::Status status = (*allreduce)->SumInPlace(absl::MakeSpan(&token, 1));
      const absl::Time start = absl::Now();
      if (status.ok()) status = (*allreduce)->SumInPlace(absl::MakeSpan(data));
      if (!status.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
        return 1;
      }
      if (i >= warmup) times.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    if (rank == 0) {
      std::printf("{\"bytes\":%lld,\"median_s\":%.6f}\n", static_cast<long long>(bytes),
                  Median(times));
      std::fflush(stdout);
    }
  }
  return 0;
}

std::optional<std::map<int64_t, double>> RunOurs(const std::string& bin) {
  const std::string job = testing::TempDir() + "/job.pbtxt";
  std::ofstream(job) << "name: \"allreduce_bench\"\ntables { name: \"emb\" dim: 8 }\n"
                     << "cluster { num_shards: 8 num_servers: 1 num_workers: "
                     << absl::GetFlag(FLAGS_ranks) << " }\n";
  auto coordinator =
      testing::Daemon::Start(bin + "/server/coordinator/ps_coordinator", {"--job=" + job});
  std::remove(job.c_str());
  if (!coordinator.ok()) {
    std::fprintf(stderr, "%s\n", coordinator.status().ToString().c_str());
    return std::nullopt;
  }
  const int ranks = absl::GetFlag(FLAGS_ranks);
  std::vector<absl::StatusOr<testing::ProcessResult>> results(ranks, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      std::vector<std::string> args = {
          "--role=rank",
          absl::StrCat("--rank=", rank),
          absl::StrCat("--ranks=", ranks),
          absl::StrCat("--coordinator=", (*coordinator)->address()),
          absl::StrCat("--sizes_mib=", absl::GetFlag(FLAGS_sizes_mib)),
          absl::StrCat("--warmup=", absl::GetFlag(FLAGS_warmup)),
          absl::StrCat("--iterations=", absl::GetFlag(FLAGS_iterations)),
          absl::StrCat("--streams=", absl::GetFlag(FLAGS_streams)),
          absl::StrCat("--min_bytes_per_stream=", absl::GetFlag(FLAGS_min_bytes_per_stream)),
          absl::StrCat("--segment_bytes=", absl::GetFlag(FLAGS_segment_bytes)),
          absl::StrCat("--ring_min_bytes=", absl::GetFlag(FLAGS_ring_min_bytes)),
          absl::StrCat("--shared_memory=", absl::GetFlag(FLAGS_shared_memory)),
          absl::StrCat("--shared_memory_max_bytes=", absl::GetFlag(FLAGS_shared_memory_max_bytes)),
          absl::StrCat("--shared_memory_slot_bytes=",
                       absl::GetFlag(FLAGS_shared_memory_slot_bytes)),
      };
      results[rank] =
          testing::RunProcess(g_self, args, absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
    });
  }
  for (std::thread& thread : threads) thread.join();
  (void)(*coordinator)->Terminate(absl::Seconds(10));
  for (int rank = 0; rank < ranks; ++rank) {
    if (!results[rank].ok() || results[rank]->exit_code != 0) {
      std::fprintf(stderr, "rank %d failed: %s\n", rank,
                   results[rank].ok() ? results[rank]->stderr_text.c_str()
                                      : results[rank].status().ToString().c_str());
      return std::nullopt;
    }
  }
  if (absl::StrContains(results[0]->stdout_text, "{\"shared_memory_used\":1}")) {
    g_shared_memory_used = true;
  }
  return ParseMedians(results[0]->stdout_text);
}

// The transports Open MPI runs with (--mpi_btl).
std::string MpiBtl() {
  const std::string btl = absl::GetFlag(FLAGS_mpi_btl);
  if (btl != "auto") return btl;
  return absl::GetFlag(FLAGS_shared_memory) ? "vader,self" : "tcp,self";
}

std::optional<std::map<int64_t, double>> RunMpi(const std::string& bin) {
  std::vector<std::string> sizes;
  for (const int64_t bytes : SizesBytes()) sizes.push_back(absl::StrCat(bytes));
  const std::vector<std::string> args = {
      "--allow-run-as-root",
      "--oversubscribe",
      "-np",
      absl::StrCat(absl::GetFlag(FLAGS_ranks)),
      "--mca",
      "btl",
      MpiBtl(),
      bin + "/tests/bench/mpi_allreduce",
      absl::StrCat("--sizes=", absl::StrJoin(sizes, ",")),
      absl::StrCat("--warmup=", absl::GetFlag(FLAGS_warmup)),
      absl::StrCat("--iterations=", absl::GetFlag(FLAGS_iterations)),
  };
  auto result = testing::RunProcess(FindOnPath(absl::GetFlag(FLAGS_mpirun)), args,
                                    absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  if (!result.ok() || result->exit_code != 0) {
    std::fprintf(stderr, "mpirun failed: %s\n",
                 result.ok() ? (result->stderr_text + result->stdout_text).c_str()
                             : result.status().ToString().c_str());
    return std::nullopt;
  }
  return ParseMedians(result->stdout_text);
}

int RunBench() {
  const std::string bin = BinDir();
  const bool with_mpi = absl::GetFlag(FLAGS_mpi);
  // Rounds alternate ours and MPI's, so that load from elsewhere on the machine falls on both.
  std::map<int64_t, std::vector<double>> ours;
  std::map<int64_t, std::vector<double>> mpi;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    const std::optional<std::map<int64_t, double>> our_medians = RunOurs(bin);
    if (!our_medians.has_value()) return 1;
    for (const auto& [bytes, seconds] : *our_medians) ours[bytes].push_back(seconds);
    if (!with_mpi) continue;
    const std::optional<std::map<int64_t, double>> mpi_medians = RunMpi(bin);
    if (!mpi_medians.has_value()) return 1;
    for (const auto& [bytes, seconds] : *mpi_medians) mpi[bytes].push_back(seconds);
  }

  const int ranks = absl::GetFlag(FLAGS_ranks);
  const double bus_factor = 2.0 * (ranks - 1) / ranks;
  auto gbps = [&](int64_t bytes, double seconds) {
    return seconds > 0 ? bus_factor * bytes / seconds / 1e9 : 0.0;
  };
  for (const int64_t bytes : SizesBytes()) {
    if (ours[bytes].empty() || (with_mpi && mpi[bytes].empty())) {
      std::fprintf(stderr, "no result for %lld bytes\n", static_cast<long long>(bytes));
      return 1;
    }
    const double our_seconds = Median(ours[bytes]);
    const double ours_gbps = gbps(bytes, our_seconds);
    std::string line =
        absl::StrFormat("{\"bench\":\"allreduce\",\"ranks\":%d,\"bytes\":%d,\"ours_gbps\":%.3f",
                        ranks, bytes, ours_gbps);
    if (with_mpi) {
      const double mpi_seconds = Median(mpi[bytes]);
      const double mpi_gbps = gbps(bytes, mpi_seconds);
      absl::StrAppendFormat(
          &line, ",\"mpi_gbps\":%.3f,\"ratio\":%.3f,\"mpi_ms\":%.3f,\"mpi_btl\":\"%s\"", mpi_gbps,
          mpi_gbps > 0 ? ours_gbps / mpi_gbps : 0.0, mpi_seconds * 1e3, MpiBtl());
    }
    absl::StrAppendFormat(
        &line,
        ",\"ours_ms\":%.3f,\"streams\":%d,\"shared_memory\":%d,"
        "\"shared_memory_used\":%d,\"rounds\":%d}\n",
        our_seconds * 1e3, absl::GetFlag(FLAGS_streams), absl::GetFlag(FLAGS_shared_memory) ? 1 : 0,
        g_shared_memory_used && bytes <= absl::GetFlag(FLAGS_shared_memory_max_bytes) ? 1 : 0,
        absl::GetFlag(FLAGS_rounds));
    std::fputs(line.c_str(), stdout);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::TuneProcess();
  absl::ParseCommandLine(argc, argv);
  ps::g_self = ps::testing::SelfPath(argv[0]);
  if (absl::GetFlag(FLAGS_role) == "rank") return ps::RunRank();
  // What its daemons and workers write goes into one folder, removed at the end.
  auto scratch = ps::testing::UseScopedTempDir("allreduce_bench");
  if (!scratch.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", scratch.status().ToString().c_str());
    return 1;
  }
  return ps::RunBench();
}

// AllReduce among ranks running as threads of this test, each with its own connection to a real
// ps_coordinator process. Threads of one process are ranks on one host: their groups sum through
// shared memory unless GlooOptions::shared_memory is false (internal/shm_allreduce_test.cc tests
// that component on its own).
#include "worker/collective/allreduce.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/coordinator_client.h"
#include "cuda_kernels/device.h"
#include "tests/testing/daemon.h"
#include "worker/collective/internal/nccl_comm.h"
#include "worker/collective/internal/random_values_for_test.h"

namespace ps {
namespace worker {
namespace {

using testing::Daemon;

constexpr char kJob[] = R"pb(name: "allreduce_test"
                             tables { name: "emb" dim: 8 }
                             cluster { num_shards: 8 num_servers: 1 num_workers: 3 }
)pb";

std::unique_ptr<Daemon> StartCoordinator() {
  auto daemon = testing::StartCoordinator(kJob, "allreduce_test_job");
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  return std::move(*daemon);
}

// Runs `body(rank)` on one thread per rank and joins them. Catch2's assertions are not
// thread-safe, so bodies record outcomes for the test's thread to check.
void RunRanks(int ranks, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) threads.emplace_back(body, rank);
  for (std::thread& thread : threads) thread.join();
}

// Integer values small enough that every sum is exact in float, whatever the order of additions.
float Value(int rank, size_t i, int round) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13 + round * 5) % 1001) - 500);
}

TEST_CASE("Gloo AllReduce sums exactly across ranks", "[collective][gloo]") {
  const int ranks = GENERATE(2, 3);
  const size_t elements = GENERATE(size_t{1}, size_t{1000}, size_t{1} << 20);
  const int streams = GENERATE(1, 3);
  // Gloo's ring for every part, its bcube for every part, and the default split between them.
  const size_t ring_min_bytes = GENERATE(size_t{0}, size_t{2} << 20, ~size_t{0});
  CAPTURE(ranks, elements, streams, ring_min_bytes);
  std::unique_ptr<Daemon> daemon = StartCoordinator();

  AllReduce::GlooOptions options;
  options.hostname = "127.0.0.1";
  options.shared_memory = false;  // Gloo's algorithms; the next test case runs the shared memory
  options.streams = streams;
  options.ring_min_bytes = ring_min_bytes;
  // Small enough that a MiB-sized buffer is split across every stream, with a remainder.
  options.min_bytes_per_stream = 64 << 10;
  // Rounds alternate between the full buffer and a third of it, so that one group reduces
  // buffers split over every stream and over fewer in turn.
  constexpr int kRounds = 3;

  std::vector<absl::Status> created(ranks);
  std::vector<absl::Status> summed(ranks);
  std::vector<size_t> wrong(ranks, 0);
  RunRanks(ranks, [&](int rank) {
    auto client = CoordinatorClient::Connect(daemon->address(), absl::Seconds(10));
    if (!client.ok()) {
      created[rank] = client.status();
      return;
    }
    auto allreduce =
        AllReduce::CreateGloo(client->get(), "sum", rank, ranks, absl::Seconds(30), options);
    created[rank] = allreduce.status();
    if (!allreduce.ok()) return;
    if ((*allreduce)->rank() != rank || (*allreduce)->size() != ranks) {
      created[rank] = absl::InternalError("wrong rank or size");
      return;
    }
    // The same object reduces several buffers in turn.
    for (int round = 0; round < kRounds && summed[rank].ok(); ++round) {
      std::vector<float> data(round % 2 == 0 ? elements : elements / 3 + 1);
      for (size_t i = 0; i < data.size(); ++i) data[i] = Value(rank, i, round);
      summed[rank] = (*allreduce)->SumInPlace(absl::MakeSpan(data));
      for (size_t i = 0; i < data.size(); ++i) {
        float expected = 0;
        for (int r = 0; r < ranks; ++r) expected += Value(r, i, round);
        if (data[i] != expected) ++wrong[rank];
      }
    }
  });
  for (int rank = 0; rank < ranks; ++rank) {
    CAPTURE(rank);
    CHECK(created[rank].ToString() == "OK");
    CHECK(summed[rank].ToString() == "OK");
    CHECK(wrong[rank] == 0);
  }
}

TEST_CASE("Gloo AllReduce on one host sums through shared memory unless told not to",
          "[collective][gloo][shm]") {
  const int ranks = GENERATE(2, 3);
  const bool shared_memory = GENERATE(true, false);
  // Every buffer through the shared memory, or only those of at most 4 KiB (larger ones by Gloo).
  const size_t max_bytes = GENERATE(~size_t{0}, size_t{4096});
  CAPTURE(ranks, shared_memory, max_bytes);
  std::unique_ptr<Daemon> daemon = StartCoordinator();

  AllReduce::GlooOptions options;
  options.hostname = "127.0.0.1";
  options.streams = 2;
  options.min_bytes_per_stream = 64 << 10;
  options.shared_memory = shared_memory;
  options.shared_memory_max_bytes = max_bytes;
  options.shared_memory_slot_bytes = 64 << 10;  // the largest buffer goes through in 19 chunks
  // Empty, one float, odd sizes, over a slot; each size twice, in one group.
  const std::vector<size_t> sizes = {0, 1, 17, 1001, 300001};
  const int rounds = static_cast<int>(2 * sizes.size());
  auto size_of = [&](int round) { return sizes[round % sizes.size()]; };

  std::vector<absl::Status> created(ranks);
  std::vector<absl::Status> summed(ranks);
  std::vector<int> used(ranks, -1);
  std::vector<std::vector<std::vector<float>>> results(ranks);
  RunRanks(ranks, [&](int rank) {
    auto client = CoordinatorClient::Connect(daemon->address(), absl::Seconds(10));
    if (!client.ok()) {
      created[rank] = client.status();
      return;
    }
    auto allreduce =
        AllReduce::CreateGloo(client->get(), "shm", rank, ranks, absl::Seconds(30), options);
    created[rank] = allreduce.status();
    if (!allreduce.ok()) return;
    used[rank] = (*allreduce)->shared_memory();
    for (int round = 0; round < rounds && summed[rank].ok(); ++round) {
      std::vector<float> data = internal::RandomValues(rank, round, size_of(round));
      summed[rank] = (*allreduce)->SumInPlace(absl::MakeSpan(data));
      results[rank].push_back(std::move(data));
    }
  });
  for (int rank = 0; rank < ranks; ++rank) {
    CAPTURE(rank);
    REQUIRE(created[rank].ToString() == "OK");
    REQUIRE(summed[rank].ToString() == "OK");
    CHECK(used[rank] == static_cast<int>(shared_memory));
    REQUIRE(results[rank].size() == static_cast<size_t>(rounds));
  }
  for (int round = 0; round < rounds; ++round) {
    const size_t n = size_of(round);
    const bool through_shm = shared_memory && n * sizeof(float) <= max_bytes;
    CAPTURE(round, n, through_shm);
    // The serial sum in rank order, and the sum of magnitudes that bounds Gloo's rounding.
    std::vector<float> expected(n, 0.0f);
    std::vector<double> magnitude(n, 0.0);
    for (int rank = 0; rank < ranks; ++rank) {
      const std::vector<float> values = internal::RandomValues(rank, round, n);
      for (size_t i = 0; i < n; ++i) {
        expected[i] = rank == 0 ? values[i] : expected[i] + values[i];
        magnitude[i] += std::fabs(values[i]);
      }
    }
    for (int rank = 0; rank < ranks; ++rank) {
      CAPTURE(rank);
      const std::vector<float>& got = results[rank][round];
      if (through_shm) {
        // Exactly the serial sum, so the same bits on every rank.
        CHECK(std::memcmp(got.data(), expected.data(), n * sizeof(float)) == 0);
        continue;
      }
      // Gloo adds in an order of its own: equal up to rounding.
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) {
        if (std::fabs(got[i] - expected[i]) > 4 * ranks * FLT_EPSILON * magnitude[i]) ++wrong;
      }
      CHECK(wrong == 0);
    }
  }
}

constexpr char kRankBinary[] = "worker/collective/allreduce_test_rank";

TEST_CASE("Gloo AllReduce among processes of one host gives every rank the same bits",
          "[collective][gloo][shm][processes]") {
  const int ranks = GENERATE(2, 3);
  const bool shared_memory = GENERATE(true, false);
  CAPTURE(ranks, shared_memory);
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  const std::vector<size_t> sizes = {1, 17, 1001, 300001};
  constexpr int kRounds = 2;

  std::vector<absl::StatusOr<testing::ProcessResult>> results(ranks, absl::UnknownError("not run"));
  RunRanks(ranks, [&](int rank) {
    results[rank] = testing::RunProcess(
        kRankBinary,
        {absl::StrCat("--coordinator=", daemon->address()), absl::StrCat("--rank=", rank),
         absl::StrCat("--ranks=", ranks), "--sizes=1,17,1001,300001",
         absl::StrCat("--rounds=", kRounds), absl::StrCat("--shared_memory=", shared_memory)},
        absl::Seconds(60));
  });
  // Every rank's lines: "shared_memory <0|1>", then "<round> <size> <digest>" per call.
  std::string expected = absl::StrCat("shared_memory ", shared_memory ? 1 : 0, "\n");
  for (int round = 0; round < kRounds; ++round) {
    for (const size_t n : sizes) {
      absl::StrAppendFormat(&expected, "%d %d %016x\n", round, n,
                            internal::Digest(internal::SerialSum(ranks, round, n)));
    }
  }
  for (int rank = 0; rank < ranks; ++rank) {
    CAPTURE(rank);
    REQUIRE(results[rank].ok());
    INFO(results[rank]->stderr_text);
    REQUIRE(results[rank]->exit_code == 0);
    if (shared_memory) {
      // The serial sum in rank order, bit for bit, on every rank.
      CHECK(results[rank]->stdout_text == expected);
    } else {
      // Gloo's order of additions is its own: the same calls, and the same bits on every rank.
      CHECK(results[rank]->stdout_text.size() == expected.size());
      CHECK(results[rank]->stdout_text == results[0]->stdout_text);
    }
  }
}

TEST_CASE("Gloo AllReduce through shared memory times out when a peer process dies",
          "[collective][gloo][shm][processes]") {
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  // Rank 1 joins, then waits to be killed.
  auto peer = Daemon::Launch(
      kRankBinary, {absl::StrCat("--coordinator=", daemon->address()), "--group=dies", "--rank=1",
                    "--ranks=2", "--rounds=0", "--then_wait", "--timeout_s=30"});
  REQUIRE(peer.ok());
  auto client = CoordinatorClient::Connect(daemon->address(), absl::Seconds(10));
  REQUIRE(client.ok());
  AllReduce::GlooOptions options;
  options.hostname = "127.0.0.1";
  constexpr absl::Duration kTimeout = absl::Seconds(5);  // also what the peer may take to start
  auto allreduce = AllReduce::CreateGloo(client->get(), "dies", 0, 2, kTimeout, options);
  INFO(allreduce.status().ToString());
  REQUIRE(allreduce.ok());
  REQUIRE((*allreduce)->shared_memory());
  (*peer)->Kill();

  std::vector<float> data(1000, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status status = (*allreduce)->SumInPlace(absl::MakeSpan(data));
  INFO(status.ToString());
  CHECK(absl::IsDeadlineExceeded(status));
  CHECK(absl::Now() - start < kTimeout + absl::Seconds(5));
  CHECK(absl::IsFailedPrecondition((*allreduce)->SumInPlace(absl::MakeSpan(data))));
}

TEST_CASE("Gloo AllReduce of a group of one does nothing and needs no coordinator",
          "[collective][gloo]") {
  auto allreduce = AllReduce::CreateGloo(nullptr, "alone", 0, 1, absl::Seconds(1));
  REQUIRE(allreduce.ok());
  CHECK_FALSE((*allreduce)->shared_memory());
  std::vector<float> data = {1, 2, 3};
  REQUIRE((*allreduce)->SumInPlace(absl::MakeSpan(data)).ok());
  CHECK(data == std::vector<float>{1, 2, 3});
  CHECK((*allreduce)->SumInPlace({}).ok());
}

TEST_CASE("Gloo AllReduce refuses bad arguments", "[collective][gloo]") {
  CoordinatorClient* const none = nullptr;
  CHECK(absl::IsInvalidArgument(AllReduce::CreateGloo(none, "g", 2, 2, absl::Seconds(1)).status()));
  CHECK(
      absl::IsInvalidArgument(AllReduce::CreateGloo(none, "g", -1, 2, absl::Seconds(1)).status()));
  CHECK(absl::IsInvalidArgument(AllReduce::CreateGloo(none, "g", 0, 0, absl::Seconds(1)).status()));
  CHECK(absl::IsInvalidArgument(AllReduce::CreateGloo(none, "", 0, 1, absl::Seconds(1)).status()));
  CHECK(absl::IsInvalidArgument(
      AllReduce::CreateGloo(none, "g", 0, 1, absl::ZeroDuration()).status()));
  // More than one rank needs the coordinator.
  CHECK(absl::IsInvalidArgument(AllReduce::CreateGloo(none, "g", 0, 2, absl::Seconds(1)).status()));
  AllReduce::GlooOptions options;
  options.streams = 0;
  CHECK(absl::IsInvalidArgument(
      AllReduce::CreateGloo(none, "g", 0, 1, absl::Seconds(1), options).status()));
  options.streams = 1;
  options.segment_bytes = 16;
  CHECK(absl::IsInvalidArgument(
      AllReduce::CreateGloo(none, "g", 0, 1, absl::Seconds(1), options).status()));
  options.segment_bytes = 4096;
  options.shared_memory_slot_bytes = 1000;  // not a multiple of 64
  CHECK(absl::IsInvalidArgument(
      AllReduce::CreateGloo(none, "g", 0, 1, absl::Seconds(1), options).status()));
}

TEST_CASE("Gloo AllReduce times out when a rank never joins", "[collective][gloo]") {
  const int streams = GENERATE(1, 2);
  CAPTURE(streams);
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  AllReduce::GlooOptions options;
  options.hostname = "127.0.0.1";
  options.streams = streams;
  constexpr absl::Duration kTimeout = absl::Seconds(1);

  // Ranks 0 and 1 of 3 join; rank 2 never does.
  std::vector<absl::Status> created(2);
  std::vector<absl::Duration> took(2);
  RunRanks(2, [&](int rank) {
    auto client = CoordinatorClient::Connect(daemon->address(), absl::Seconds(10));
    if (!client.ok()) {
      created[rank] = client.status();
      return;
    }
    const absl::Time start = absl::Now();
    created[rank] =
        AllReduce::CreateGloo(client->get(), "missing-rank", rank, 3, kTimeout, options).status();
    took[rank] = absl::Now() - start;
  });
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank, created[rank].ToString());
    CHECK((absl::IsDeadlineExceeded(created[rank]) || absl::IsUnavailable(created[rank])));
    CHECK(took[rank] < kTimeout + absl::Seconds(5));
  }
}

TEST_CASE("Gloo AllReduce times out when a peer stops taking part, then stays broken",
          "[collective][gloo]") {
  const bool shared_memory = GENERATE(true, false);
  CAPTURE(shared_memory);
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  AllReduce::GlooOptions options;
  options.hostname = "127.0.0.1";
  options.shared_memory = shared_memory;
  constexpr absl::Duration kTimeout = absl::Seconds(1);

  std::vector<std::unique_ptr<CoordinatorClient>> clients(2);
  std::vector<std::unique_ptr<AllReduce>> group(2);
  std::vector<absl::Status> created(2);
  RunRanks(2, [&](int rank) {
    auto client = CoordinatorClient::Connect(daemon->address(), absl::Seconds(10));
    if (!client.ok()) {
      created[rank] = client.status();
      return;
    }
    clients[rank] = *std::move(client);
    auto allreduce =
        AllReduce::CreateGloo(clients[rank].get(), "stops", rank, 2, kTimeout, options);
    created[rank] = allreduce.status();
    if (allreduce.ok()) group[rank] = *std::move(allreduce);
  });
  REQUIRE(created[0].ToString() == "OK");
  REQUIRE(created[1].ToString() == "OK");
  CHECK(group[0]->shared_memory() == shared_memory);

  // Rank 1 is alive but never calls SumInPlace.
  std::vector<float> data(1000, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status status = group[0]->SumInPlace(absl::MakeSpan(data));
  INFO(status.ToString());
  CHECK(absl::IsDeadlineExceeded(status));
  CHECK(absl::Now() - start < kTimeout + absl::Seconds(5));
  const absl::Status again = group[0]->SumInPlace(absl::MakeSpan(data));
  INFO(again.ToString());
  CHECK(absl::IsFailedPrecondition(again));
}

TEST_CASE("NCCL AllReduce refuses without a GPU", "[collective][nccl]") {
  if (cuda::DeviceCount() > 0) return;  // nccl_allreduce_gpu_test runs it there
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  auto client = CoordinatorClient::Connect(daemon->address(), absl::Seconds(10));
  REQUIRE(client.ok());
  auto allreduce = AllReduce::CreateNccl(client->get(), "nccl", 0, 2, 0, absl::Seconds(1));
  INFO(allreduce.status().ToString());
  CHECK(absl::IsFailedPrecondition(allreduce.status()));
  CHECK(allreduce.status().message() == "no CUDA device");
}

}  // namespace
}  // namespace worker
}  // namespace ps

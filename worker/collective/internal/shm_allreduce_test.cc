// The shared-memory AllReduce among ranks running as threads of this test (each maps the segment
// on its own, as a process would), bootstrapped through a real ps_coordinator process.
#include "worker/collective/internal/shm_allreduce.h"

#include <dirent.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/coordinator_client.h"
#include "tests/testing/daemon.h"
#include "worker/collective/internal/random_values_for_test.h"

namespace ps {
namespace worker {
namespace internal {
namespace {

using testing::Daemon;

constexpr char kJob[] = R"pb(name: "shm_allreduce_test"
                             tables { name: "emb" dim: 8 }
                             cluster { num_shards: 8 num_servers: 1 num_workers: 3 }
)pb";

std::unique_ptr<Daemon> StartCoordinator() {
  auto daemon = testing::StartCoordinator(kJob, "shm_allreduce_test_job");
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  return std::move(*daemon);
}

// Runs `body(rank, client)` on one thread per rank, each with its own coordinator connection, and
// joins them. Catch2's assertions are not thread-safe, so bodies record outcomes for the test's
// thread to check.
void RunRanks(const Daemon& daemon, int ranks,
              const std::function<void(int, CoordinatorClient*)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      auto client = CoordinatorClient::Connect(daemon.address(), absl::Seconds(10));
      if (client.ok()) body(rank, client->get());
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Segments of this test's groups still named in /dev/shm.
std::vector<std::string> Leftovers(const std::string& group) {
  std::vector<std::string> names;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir)) {
    if (absl::StartsWith(entry->d_name, absl::StrCat("ps-allreduce-", group, "-"))) {
      names.push_back(entry->d_name);
    }
  }
  closedir(dir);
  return names;
}

TEST_CASE("Shared-memory AllReduce sums in rank order, the same bits on every rank",
          "[collective][shm]") {
  const int ranks = GENERATE(2, 3);
  constexpr size_t kSlotBytes = 4096;  // 1024 floats: larger buffers go through in chunks
  // Empty, one float, odd sizes, a slot exactly, over a slot, several slots and a remainder.
  const size_t elements = GENERATE(size_t{0}, size_t{1}, size_t{17}, size_t{1000}, size_t{1024},
                                   size_t{1025}, size_t{3 * 1024 + 7});
  CAPTURE(ranks, elements);
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  const std::string group = absl::StrCat("sum-", ranks, "-", elements);
  constexpr int kRounds = 3;

  std::vector<absl::Status> joined(ranks, absl::UnknownError("not run"));
  std::vector<absl::Status> summed(ranks);
  std::vector<std::vector<std::vector<float>>> results(ranks);
  RunRanks(*daemon, ranks, [&](int rank, CoordinatorClient* client) {
    auto shm = ShmAllReduce::Join(client, group, rank, ranks, true, HostIdentity(), kSlotBytes,
                                  ~size_t{0}, absl::Now() + absl::Seconds(30));
    joined[rank] = shm.status();
    if (!shm.ok()) return;
    if (*shm == nullptr) {
      joined[rank] = absl::InternalError("no shared memory among threads of one process");
      return;
    }
    // The same object reduces several buffers in turn.
    for (int round = 0; round < kRounds && summed[rank].ok(); ++round) {
      std::vector<float> data = RandomValues(rank, round, elements);
      summed[rank] = (*shm)->SumInPlace(absl::MakeSpan(data), absl::Now() + absl::Seconds(30));
      results[rank].push_back(std::move(data));
    }
  });
  CHECK(Leftovers(group).empty());
  for (int rank = 0; rank < ranks; ++rank) {
    CAPTURE(rank);
    REQUIRE(joined[rank].ToString() == "OK");
    REQUIRE(summed[rank].ToString() == "OK");
    REQUIRE(results[rank].size() == static_cast<size_t>(kRounds));
  }
  for (int round = 0; round < kRounds; ++round) {
    const std::vector<float> expected = SerialSum(ranks, round, elements);
    for (int rank = 0; rank < ranks; ++rank) {
      CAPTURE(round, rank);
      const std::vector<float>& got = results[rank][round];
      REQUIRE(got.size() == elements);
      CHECK(std::memcmp(got.data(), expected.data(), elements * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("Shared-memory AllReduce is not used across hosts or when a rank disables it",
          "[collective][shm]") {
  const bool other_host = GENERATE(true, false);
  CAPTURE(other_host);
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  const std::string group = absl::StrCat("apart-", other_host);
  std::vector<absl::Status> joined(3, absl::UnknownError("not run"));
  std::vector<bool> got(3, true);
  RunRanks(*daemon, 3, [&](int rank, CoordinatorClient* client) {
    // Rank 2 is on another host, or on this one with the shared memory off.
    const std::string identity =
        other_host && rank == 2 ? "another host\nboot\nipc:[1]" : HostIdentity();
    const bool enable = other_host || rank != 2;
    auto shm = ShmAllReduce::Join(client, group, rank, 3, enable, identity, 4096, ~size_t{0},
                                  absl::Now() + absl::Seconds(30));
    joined[rank] = shm.status();
    if (shm.ok()) got[rank] = *shm != nullptr;
  });
  for (int rank = 0; rank < 3; ++rank) {
    CAPTURE(rank);
    CHECK(joined[rank].ToString() == "OK");
    CHECK_FALSE(got[rank]);
  }
  CHECK(Leftovers(group).empty());
}

TEST_CASE("Shared-memory AllReduce adopts rank 0's limits", "[collective][shm]") {
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  std::vector<size_t> slot(2), max(2);
  RunRanks(*daemon, 2, [&](int rank, CoordinatorClient* client) {
    auto shm =
        ShmAllReduce::Join(client, "limits", rank, 2, true, HostIdentity(), rank == 0 ? 8192 : 4096,
                           rank == 0 ? 1000 : 2000, absl::Now() + absl::Seconds(30));
    if (shm.ok() && *shm != nullptr) {
      slot[rank] = (*shm)->slot_bytes();
      max[rank] = (*shm)->max_bytes();
    }
  });
  CHECK(slot == std::vector<size_t>{8192, 8192});
  CHECK(max == std::vector<size_t>{1000, 1000});
}

TEST_CASE("Shared-memory AllReduce times out when a peer never calls, then when a rank is missing",
          "[collective][shm]") {
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  constexpr absl::Duration kTimeout = absl::Seconds(1);
  const size_t elements = GENERATE(size_t{1}, size_t{5000});  // one chunk, several
  CAPTURE(elements);
  const std::string group = absl::StrCat("silent-", elements);

  absl::Status joined = absl::UnknownError("not run");
  absl::Status status = absl::UnknownError("not run");
  absl::Duration took;
  // Rank 1 joins, then never calls SumInPlace; it keeps its mapping until rank 0 is done.
  absl::Mutex mu;
  bool done = false;
  RunRanks(*daemon, 2, [&](int rank, CoordinatorClient* client) {
    auto shm = ShmAllReduce::Join(client, group, rank, 2, true, HostIdentity(), 4096, ~size_t{0},
                                  absl::Now() + absl::Seconds(30));
    if (rank == 1) {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&done));
      return;
    }
    joined = shm.ok() && *shm != nullptr ? absl::OkStatus() : absl::InternalError("no segment");
    if (joined.ok()) {
      std::vector<float> data(elements, 1.0f);
      const absl::Time start = absl::Now();
      status = (*shm)->SumInPlace(absl::MakeSpan(data), start + kTimeout);
      took = absl::Now() - start;
    }
    absl::MutexLock lock(&mu);
    done = true;
  });
  REQUIRE(joined.ToString() == "OK");
  INFO(status.ToString());
  CHECK(absl::IsDeadlineExceeded(status));
  CHECK(took >= kTimeout);
  CHECK(took < kTimeout + absl::Seconds(2));

  // A rank that never joins: the others' Join ends at the deadline.
  std::vector<absl::Status> alone(2, absl::UnknownError("not run"));
  RunRanks(*daemon, 2, [&](int rank, CoordinatorClient* client) {
    alone[rank] = ShmAllReduce::Join(client, group + "-missing", rank, 3, true, HostIdentity(),
                                     4096, ~size_t{0}, absl::Now() + kTimeout)
                      .status();
  });
  for (const absl::Status& s : alone) {
    INFO(s.ToString());
    CHECK(absl::IsDeadlineExceeded(s));
  }
}

TEST_CASE("Shared-memory AllReduce of counts that differ fails on every rank",
          "[collective][shm]") {
  std::unique_ptr<Daemon> daemon = StartCoordinator();
  std::vector<absl::Status> status(2, absl::UnknownError("not run"));
  RunRanks(*daemon, 2, [&](int rank, CoordinatorClient* client) {
    auto shm = ShmAllReduce::Join(client, "counts", rank, 2, true, HostIdentity(), 4096, ~size_t{0},
                                  absl::Now() + absl::Seconds(30));
    if (!shm.ok() || *shm == nullptr) return;
    std::vector<float> data(rank == 0 ? 10 : 3000, 1.0f);
    status[rank] = (*shm)->SumInPlace(absl::MakeSpan(data), absl::Now() + absl::Seconds(30));
  });
  for (const absl::Status& s : status) {
    INFO(s.ToString());
    CHECK(absl::IsInternal(s));
  }
}

TEST_CASE("Shared-memory AllReduce refuses bad arguments", "[collective][shm]") {
  CoordinatorClient* const none = nullptr;
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  auto join = [&](int rank, int size, size_t slot) {
    return ShmAllReduce::Join(none, "g", rank, size, true, "h", slot, 0, deadline).status();
  };
  CHECK(absl::IsInvalidArgument(join(0, 1, 4096)));
  CHECK(absl::IsInvalidArgument(join(2, 2, 4096)));
  CHECK(absl::IsInvalidArgument(join(-1, 2, 4096)));
  CHECK(absl::IsInvalidArgument(join(0, 2, 0)));
  CHECK(absl::IsInvalidArgument(join(0, 2, 100)));
  CHECK(absl::IsInvalidArgument(join(0, 2, (size_t{1} << 30) + 64)));
}

TEST_CASE("HostIdentity is the same on every call of one process", "[collective][shm]") {
  const std::string identity = HostIdentity();
  CHECK_FALSE(identity.empty());
  CHECK_FALSE(absl::StartsWith(identity, "unshared:"));  // this machine has /proc
  CHECK(HostIdentity() == identity);
}

}  // namespace
}  // namespace internal
}  // namespace worker
}  // namespace ps

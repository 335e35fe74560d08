// NCCL AllReduce on a GPU: device buffers in place, host buffers through the group's device
// buffer (cuda_kernels:gpu_test_main fails the test on a machine without a GPU; allreduce_test
// checks the refusal there).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/coordinator_client.h"
#include "cuda_kernels/device.h"
#include "tests/testing/daemon.h"
#include "worker/collective/allreduce.h"
#include "worker/collective/internal/nccl_comm.h"

namespace ps {
namespace worker {
namespace {

TEST_CASE("NCCL AllReduce sums device and host buffers on a GPU", "[collective][nccl]") {
  // NCCL's rendezvous goes through the coordinator's store.
  auto daemon = testing::StartCoordinator(
      R"pb(name: "nccl_gpu_test" tables { name: "emb" dim: 8 } cluster { num_workers: 1 })pb",
      "nccl_gpu_test_job");
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  auto client = CoordinatorClient::Connect((*daemon)->address(), absl::Seconds(10));
  REQUIRE(client.ok());

  // One GPU: a group of one rank (NCCL refuses two ranks on one device) runs the real path.
  auto allreduce = AllReduce::CreateNccl(client->get(), "nccl", 0, 1, 0, absl::Seconds(30));
  INFO(allreduce.status().ToString());
  REQUIRE(allreduce.ok());
  constexpr size_t kElements = 1 << 20;
  std::vector<float> host(kElements);
  // Integers: every sum is exact in float.
  for (size_t i = 0; i < kElements; ++i) host[i] = static_cast<float>(i % 1001) - 500.0f;
  auto device = internal::DeviceFloats::Create(kElements, 0);
  REQUIRE(device.ok());
  REQUIRE((*device)->CopyFromHost(host).ok());
  const absl::Status summed = (*allreduce)->SumInPlace((*device)->span());
  INFO(summed.ToString());
  REQUIRE(summed.ok());
  std::vector<float> result(kElements);
  REQUIRE((*device)->CopyToHost(absl::MakeSpan(result)).ok());
  CHECK(result == host);
  // Host memory goes through the group's device buffer: smaller, then larger than before.
  std::vector<float> small(host.begin(), host.begin() + 1000);
  CHECK((*allreduce)->SumInPlace(absl::MakeSpan(small)).ok());
  CHECK(std::equal(small.begin(), small.end(), host.begin()));
  std::vector<float> large(2 * kElements, 3.0f);
  CHECK((*allreduce)->SumInPlace(absl::MakeSpan(large)).ok());
  CHECK(large == std::vector<float>(2 * kElements, 3.0f));
  CHECK((*allreduce)->SumInPlace((*device)->span()).ok());
}

}  // namespace
}  // namespace worker
}  // namespace ps

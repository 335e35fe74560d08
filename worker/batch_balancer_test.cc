#include "worker/batch_balancer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace ps {
namespace worker {
namespace {

// One exchange among `balancers` (one per rank): every rank reports, the figures are summed as
// an AllReduce would, and every rank updates from the sum.
void Exchange(std::vector<BatchBalancer>& balancers) {
  std::vector<float> sum(balancers[0].ExchangeFloats(), 0.0f);
  for (size_t r = 0; r < balancers.size(); ++r) {
    std::vector<float> mine(sum.size(), 0.0f);
    balancers[r].Report(static_cast<int>(r), absl::MakeSpan(mine));
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += mine[i];
  }
  for (BatchBalancer& b : balancers) REQUIRE(b.Update(sum).ok());
}

int SumOfShares(const BatchBalancer& b, int world) {
  int sum = 0;
  for (int r = 0; r < world; ++r) sum += b.batch(r);
  return sum;
}

TEST_CASE("shares start equal and sum to the step's samples", "[batch_balancer]") {
  BatchBalancer b(3, 256);
  CHECK(b.total() == 768);
  for (int r = 0; r < 3; ++r) CHECK(b.batch(r) == 256);
  CHECK(b.ExchangeFloats() == 6);
}

TEST_CASE("a half-speed worker's share converges to equal step times", "[batch_balancer]") {
  // Step time = a fixed 2 ms + a per-sample cost; rank 2 costs twice as much per sample. Equal
  // step times need 2 + 0.01 n0 = 2 + 0.02 n2 with n0 = n1 and n0 + n1 + n2 = 300: 120, 120, 60.
  const int kWorld = 3, kBatch = 100;
  const double per_sample_ms[kWorld] = {0.01, 0.01, 0.02};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(0.95, 1.05);
  std::vector<BatchBalancer> balancers(kWorld, BatchBalancer(kWorld, kBatch));
  for (int interval = 0; interval < 30; ++interval) {
    for (int r = 0; r < kWorld; ++r) {
      for (int step = 0; step < 8; ++step) {
        const int n = balancers[r].batch(r);
        const double ms = (2.0 + per_sample_ms[r] * n) * jitter(rng);
        balancers[r].Record(n, absl::Microseconds(ms * 1000));
      }
    }
    Exchange(balancers);
    for (int r = 0; r < kWorld; ++r) {
      REQUIRE(SumOfShares(balancers[r], kWorld) == kWorld * kBatch);
      for (int q = 0; q < kWorld; ++q) REQUIRE(balancers[r].batch(q) == balancers[0].batch(q));
    }
  }
  CHECK(std::abs(balancers[0].batch(0) - 120) <= 4);
  CHECK(std::abs(balancers[0].batch(1) - 120) <= 4);
  CHECK(std::abs(balancers[0].batch(2) - 60) <= 4);
}

TEST_CASE("the first measure sets the shares at once", "[batch_balancer]") {
  std::vector<BatchBalancer> balancers(3, BatchBalancer(3, 100));
  balancers[0].Record(100, absl::Milliseconds(10));
  balancers[1].Record(100, absl::Milliseconds(10));
  balancers[2].Record(100, absl::Milliseconds(20));  // half speed
  Exchange(balancers);
  CHECK(balancers[0].batch(0) == 120);
  CHECK(balancers[0].batch(1) == 120);
  CHECK(balancers[0].batch(2) == 60);
}

TEST_CASE("equal workers keep equal shares", "[batch_balancer]") {
  std::vector<BatchBalancer> balancers(2, BatchBalancer(2, 64));
  for (int interval = 0; interval < 5; ++interval) {
    for (int r = 0; r < 2; ++r) balancers[r].Record(64, absl::Milliseconds(3));
    Exchange(balancers);
  }
  CHECK(balancers[0].batch(0) == 64);
  CHECK(balancers[0].batch(1) == 64);
}

TEST_CASE("a worker with no measured time keeps everyone's shares", "[batch_balancer]") {
  std::vector<BatchBalancer> balancers(2, BatchBalancer(2, 10));
  balancers[0].Record(10, absl::Milliseconds(1));  // rank 1 reports nothing
  Exchange(balancers);
  CHECK(balancers[0].batch(0) == 10);
  CHECK(balancers[0].batch(1) == 10);
}

TEST_CASE("a very slow worker keeps at least one sample", "[batch_balancer]") {
  std::vector<BatchBalancer> balancers(2, BatchBalancer(2, 4));
  for (int interval = 0; interval < 20; ++interval) {
    balancers[0].Record(balancers[0].batch(0), absl::Milliseconds(1));
    balancers[1].Record(balancers[1].batch(1), absl::Seconds(10));
    Exchange(balancers);
    REQUIRE(SumOfShares(balancers[0], 2) == 8);
  }
  CHECK(balancers[0].batch(1) == 1);
  CHECK(balancers[0].batch(0) == 7);
}

TEST_CASE("bad figures are refused and change nothing", "[batch_balancer]") {
  BatchBalancer b(2, 10);
  CHECK(b.Update(std::vector<float>{1, 2, 3}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(b.Update(std::vector<float>{10, -1, 10, 1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(b.Update(std::vector<float>{10, std::numeric_limits<float>::quiet_NaN(), 10, 1}).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(b.batch(0) == 10);
  CHECK(b.batch(1) == 10);
}

}  // namespace
}  // namespace worker
}  // namespace ps

#include "common/finite.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

namespace ps {
namespace {

TEST_CASE("AllFinite finds a NaN or Inf anywhere", "[common][finite]") {
  std::vector<float> v(1001, 1.5f);
  v[7] = -0.0f;
  v[8] = std::numeric_limits<float>::denorm_min();
  v[9] = std::numeric_limits<float>::max();
  v[10] = -std::numeric_limits<float>::max();
  CHECK(AllFinite(v.data(), v.size()));
  CHECK(AllFinite(v.data(), 0));
  const float bad =
      GENERATE(std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
               -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
               -std::numeric_limits<float>::infinity());
  const size_t at = GENERATE(0u, 15u, 500u, 991u, 992u, 1000u);
  v[at] = bad;
  CHECK_FALSE(AllFinite(v.data(), v.size()));
}

}  // namespace
}  // namespace ps

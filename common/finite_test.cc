#include "common/finite.h"

#include <algorithm>
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

TEST_CASE("FiniteCheck over rows of any width finds a NaN or Inf in any of them",
          "[common][finite]") {
  const size_t width = GENERATE(1u, 3u, 4u, 16u, 17u);
  std::vector<float> v(width * 9, -2.25f);
  v[0] = std::numeric_limits<float>::max();
  auto check = [&] {
    FiniteCheck finite;
    for (size_t row = 0; row < 9; ++row) finite.Add(v.data() + row * width, width);
    return finite.ok();
  };
  CHECK(check());
  CHECK(FiniteCheck().ok());
  const float bad = GENERATE(std::numeric_limits<float>::quiet_NaN(),
                             -std::numeric_limits<float>::infinity());
  const size_t at = GENERATE(0u, 1u, 4u);  // a row's first, second or fifth float (if it has one)
  v[std::min(at, width - 1) + 5 * width] = bad;
  CHECK_FALSE(check());
}

}  // namespace
}  // namespace ps

#include "tests/testing/json_line.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

namespace ps {
namespace testing {
namespace {

TEST_CASE("JsonField reads a number wherever the key stands", "[json_line]") {
  const std::string json = R"({"steps":120,"samples_per_s":4.5e+04,"heldout_auc":0.801})";
  CHECK(JsonField(json, "steps") == 120);
  CHECK(JsonField(json, "samples_per_s") == 45000);
  CHECK(JsonField(json, "heldout_auc") == 0.801);  // the last field, closed by '}'
  CHECK(JsonField(R"({"x":-2.5})", "x") == -2.5);
  CHECK(JsonField(R"({"x": -2.5 , "y":1})", "x") == -2.5);  // blanks around the number
  CHECK(JsonField(R"({"x":7)", "x") == 7);  // unterminated: the number runs to the end
}

TEST_CASE("JsonField is NaN for a missing key or a value that is no number", "[json_line]") {
  CHECK(std::isnan(JsonField(R"({"steps":120})", "seconds")));
  CHECK(std::isnan(JsonField(R"({"auc":null})", "auc")));
  CHECK(std::isnan(JsonField(R"({"mode":"sync"})", "mode")));
  CHECK(std::isnan(JsonField("", "steps")));
  // A key that ends another key is not that key: the quote before it is part of the match.
  CHECK(std::isnan(JsonField(R"({"mean_steps":3})", "steps")));
}

TEST_CASE("JsonNumber writes %.6g, and null for what JSON cannot hold", "[json_line]") {
  CHECK(JsonNumber(0.801234567) == "0.801235");
  CHECK(JsonNumber(45000) == "45000");
  CHECK(JsonNumber(1e-7) == "1e-07");
  CHECK(JsonNumber(std::nan("")) == "null");
  CHECK(JsonNumber(std::numeric_limits<double>::infinity()) == "null");
  CHECK(JsonField(R"({"x":)" + JsonNumber(0.25) + "}", "x") == 0.25);
}

}  // namespace
}  // namespace testing
}  // namespace ps

#include "worker/model/pooled_input.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace ps {
namespace worker {
namespace {

// Two samples over an emb row of 5 floats: table 0 (dim 2) pools slots at 0 and 3, table 1 (dim
// 1) the slot at 2.
struct Fixture {
  std::vector<float> rows0 = std::vector<float>(6, 1.0f), rows1 = {1.0f, 2.0f};
  std::vector<uint32_t> index0 = {0, 1, 2, 0}, ends0 = {2, 2, 3, 4};
  std::vector<uint32_t> index1 = {1, 0}, ends1 = {1, 2};
  PooledInput in;

  Fixture() {
    in.batch = 2;
    PooledTable t0;
    t0.dim = 2;
    t0.rows = rows0;
    t0.index = index0;
    t0.ends = ends0;
    t0.slot_offset = {0, 3};
    t0.slot_mean = {0, 1};
    PooledTable t1;
    t1.dim = 1;
    t1.rows = rows1;
    t1.index = index1;
    t1.ends = ends1;
    t1.slot_offset = {2};
    t1.slot_mean = {0};
    in.tables = {t0, t1};
  }
};

TEST_CASE("CheckPooledInput takes inputs that cover an emb row exactly", "[worker][model]") {
  Fixture f;
  CHECK(CheckPooledInput(f.in, 5).ok());
  CHECK(f.in.tables[0].slots() == 2);
  CHECK(f.in.tables[0].num_rows() == 3);
  PooledInput none;
  CHECK(CheckPooledInput(none, 0).ok());
}

TEST_CASE("CheckPooledInput refuses what does not fit", "[worker][model]") {
  Fixture f;
  std::string want;
  SECTION("a float of the row no slot pools") {
    f.in.tables[1].slot_offset = {};
    f.in.tables[1].slot_mean = {};
    want = "no slots";
  }
  SECTION("a float pooled twice") {
    f.in.tables[1].slot_offset = {1};
    want = "pooled twice";
  }
  SECTION("a slot past the row") {
    f.in.tables[0].slot_offset = {0, 4};
    want = "outside an emb row";
  }
  SECTION("ends of another batch") {
    f.in.batch = 3;
    want = "ends for 3 samples";
  }
  SECTION("decreasing ends") {
    f.ends0 = {2, 1, 3, 4};
    want = "decrease";
  }
  SECTION("ends short of the values") {
    f.ends1 = {1, 1};
    want = "last end";
  }
  SECTION("rows not a multiple of dim") {
    f.in.tables[0].rows = absl::MakeConstSpan(f.rows0.data(), 5);
    want = "multiple of dim";
  }
  SECTION("mean flags of another count") {
    f.in.tables[0].slot_mean = {0};
    want = "slot_mean";
  }
  const absl::Status status = CheckPooledInput(f.in, 5);
  INFO(status.ToString());
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(status.message()).find(want) != std::string::npos);
}

}  // namespace
}  // namespace worker
}  // namespace ps

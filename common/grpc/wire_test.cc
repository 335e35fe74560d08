#include "common/grpc/wire.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/ps.pb.h"

namespace ps {
namespace grpc_util {
namespace {

// `bytes` cut into slices of `piece` bytes.
std::vector<grpc::Slice> Cut(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  slices.emplace_back();  // an empty slice first: skipped
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return slices;
}

TEST_CASE("varints are written as protobuf writes them", "[wire]") {
  for (const uint64_t value : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128},
                               uint64_t{300}, uint64_t{1} << 35, ~uint64_t{0}}) {
    INFO(value);
    rpc::ShardRecord record;
    record.set_sequence(value);  // field 2, a varint
    const std::string expected = value == 0 ? "" : record.SerializeAsString();
    char bytes[11];
    char* end = bytes;
    if (value != 0) {
      end = PutVarint(Tag(2, kWireVarint), end);
      end = PutVarint(value, end);
      CHECK(static_cast<size_t>(end - bytes) == 1 + VarintSize(value));
    }
    CHECK(std::string(bytes, end) == expected);
  }
}

TEST_CASE("SliceCursor reads across slices of any size", "[wire]") {
  rpc::RowsChange change;
  change.set_table(300);
  change.set_keys(std::string(1000, 'k'));
  change.set_values("vvvv");
  const std::string bytes = change.SerializeAsString();
  const size_t piece = GENERATE(size_t{1}, size_t{3}, size_t{64}, size_t{5000});
  const std::vector<grpc::Slice> slices = Cut(bytes, piece);
  SliceCursor in(slices);
  uint64_t tag = 0, value = 0;
  REQUIRE(in.ReadVarint(&tag));
  CHECK(tag == Tag(1, kWireVarint));
  REQUIRE(in.ReadVarint(&value));
  CHECK(value == 300);
  REQUIRE(in.ReadVarint(&tag));
  CHECK(tag == Tag(2, kWireLengthDelimited));
  REQUIRE(in.ReadVarint(&value));
  std::string keys;
  size_t runs = 0;
  REQUIRE(in.Take(value, [&](const char* data, size_t n) {
    keys.append(data, n);
    ++runs;
  }));
  CHECK(keys == change.keys());
  CHECK(runs >= 1000 / piece);
  REQUIRE(in.ReadVarint(&tag));
  REQUIRE(in.SkipValue(static_cast<uint32_t>(tag & 7)));
  CHECK(in.AtEnd());
  CHECK(in.position() == bytes.size());
  uint8_t byte = 0;
  CHECK_FALSE(in.ReadByte(&byte));
  CHECK_FALSE(in.Skip(1));
}

TEST_CASE("SliceCursor refuses what runs past the end", "[wire]") {
  const std::vector<grpc::Slice> slices = Cut(std::string("\x80\x80", 2), 1);
  SliceCursor in(slices);
  uint64_t value = 0;
  CHECK_FALSE(in.ReadVarint(&value));  // cut off
  const std::vector<grpc::Slice> eleven = Cut(std::string(11, '\x80'), 4);
  SliceCursor too_long(eleven);
  CHECK_FALSE(too_long.ReadVarint(&value));  // more than 10 bytes
  const std::vector<grpc::Slice> group = Cut(std::string("\x0b", 1), 1);
  SliceCursor start_group(group);
  REQUIRE(start_group.ReadVarint(&value));
  CHECK_FALSE(start_group.SkipValue(static_cast<uint32_t>(value & 7)));  // wire type 3
}

}  // namespace
}  // namespace grpc_util
}  // namespace ps
